"""The Spark jobs' own credentials, for the brokers' admin API and for the bookies.

Named as Pulsar's Spark connector names them: the source options ``authPluginClassName`` and
``authParams`` (also accepted with the connector's ``pulsar.client.`` prefix), and ``magnetar-jobs
--auth-plugin/--auth-params`` as ``pulsar-admin``'s flags. Without them, the environment:
``MAGNETAR_AUTH_TOKEN`` (the token) or ``MAGNETAR_AUTH_TOKEN_FILE`` (a file read on every new
connection, for rotation) — how the operator hands a SparkApplication its ``jobs`` token from a
Kubernetes Secret, on the driver and on every executor alike. Only the settings travel to the
executors (in the pickled reader); each process resolves them itself.

TLS the same way: ``tlsTrustCertsFilePath`` (also ``pulsar.client.tlsTrustCertsFilePath``; the
Pulsar client's name), ``magnetar-jobs --tls-trust-cert-path`` (``pulsar-admin``'s), or the
environment ``MAGNETAR_TLS_TRUST_CERTS_FILE``: the CA the job trusts for bookies that registered
``tls`` (jobs/ledger_reads.py) and for an ``https://`` admin URL.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.security import tls

TOKEN_ENV = "MAGNETAR_AUTH_TOKEN"
TOKEN_FILE_ENV = "MAGNETAR_AUTH_TOKEN_FILE"
TLS_TRUST_ENV = "MAGNETAR_TLS_TRUST_CERTS_FILE"
_PLUGIN_OPTIONS = ("authPluginClassName", "pulsar.client.authPluginClassName")
_PARAMS_OPTIONS = ("authParams", "pulsar.client.authParams")
_TRUST_OPTIONS = ("tlsTrustCertsFilePath", "pulsar.client.tlsTrustCertsFilePath")


@dataclass(frozen=True)
class JobCredentials:
    """``plugin``/``params`` as Pulsar's ``--auth-plugin``/``--auth-params``; both None: none.
    ``tls_trust_certs_file_path``: the CA for TLS bookies and HTTPS admin URLs (None: the
    environment's, else none, and a TLS bookie is refused with the option's name)."""

    plugin: str | None = None
    params: str | None = None
    tls_trust_certs_file_path: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> JobCredentials:
        def first(names: tuple[str, ...]) -> str | None:
            for name in names:
                value = options.get(name)
                if value is not None and str(value).strip():
                    return str(value).strip()
            return None

        return cls(first(_PLUGIN_OPTIONS), first(_PARAMS_OPTIONS), first(_TRUST_OPTIONS))

    def resolved(self) -> JobCredentials:
        """These settings, or the environment's where none were given."""
        trust = self.tls_trust_certs_file_path or os.environ.get(TLS_TRUST_ENV, "").strip() or None
        if self.params:
            return replace(self, tls_trust_certs_file_path=trust)
        token, path = os.environ.get(TOKEN_ENV, "").strip(), os.environ.get(TOKEN_FILE_ENV, "").strip()
        if token:
            return JobCredentials("token", f"token:{token}", trust)
        if path:
            return JobCredentials("token", path if path.startswith("file:") else f"file://{path}", trust)
        return JobCredentials(self.plugin, None, trust)

    def admin_params(self) -> str | None:
        """What ``AdminClient(token=...)`` takes (``token:``/``file:``/JSON/bare JWT)."""
        return self.resolved().params

    def bookie_security(self) -> BookieClientSecurity:
        """The token and, with a trust file, the TLS context (used only towards TLS bookies)."""
        got = self.resolved()
        return BookieClientSecurity.from_settings(
            plugin=got.plugin, params=got.params, tls_trust_certs_file_path=got.tls_trust_certs_file_path
        )

    def admin_ssl_context(self) -> ssl.SSLContext | None:
        """What ``AdminClient(ssl_context=...)`` takes for an ``https://`` admin URL."""
        trust = self.resolved().tls_trust_certs_file_path
        return tls.client_context(trust) if trust else None

    def as_options(self) -> dict[str, str]:
        """Source options carrying these settings (empty when none were given)."""
        out = {}
        if self.plugin:
            out["authPluginClassName"] = self.plugin
        if self.params:
            out["authParams"] = self.params
        if self.tls_trust_certs_file_path:
            out["tlsTrustCertsFilePath"] = self.tls_trust_certs_file_path
        return out
