"""What a bookie client sends and checks: its token supplier and its TLS context (WIRE.md R80-R86).

One ``BookieClientSecurity`` per process, shared by all its ``TcpBookieClient``s: a broker builds it
from Pulsar's ``bookkeeperClientAuthenticationPlugin``/``bookkeeperClientAuthenticationParameters``
and ``bookkeeperTLS*`` settings; a bookie (for autorecovery's copies between bookies) from the same
names in its own config; a Spark job from ``authPluginClassName``/``authParams`` (or
``MAGNETAR_AUTH_TOKEN``/``MAGNETAR_AUTH_TOKEN_FILE``). The supplier is called for every new
connection, never cached, so a token file rotated in place is used from the next connection on.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from magnetar.security import tls
from magnetar.security.credentials import TokenSupplier, token_supplier


@dataclass(frozen=True)
class BookieClientSecurity:
    credentials: TokenSupplier | None = None  # None: send no bk_auth
    ssl_context: ssl.SSLContext | None = None  # None: plaintext (refuses bookies that registered tls)

    @classmethod
    def from_settings(
        cls,
        *,
        plugin: str | None = None,
        params: str | None = None,
        tls_trust_certs_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        tls_key_file_path: str | None = None,
        tls_client_authentication: bool = False,
        tls_enabled: bool | None = None,
    ) -> BookieClientSecurity:
        """Pulsar's broker.conf settings; TLS is on when a trust file is given (or ``tls_enabled``).
        ``CredentialsError``/``TlsFilesError`` (both ``ValueError``) name a bad setting."""
        supplier = token_supplier(plugin, params, setting="bookkeeperClientAuthentication")
        use_tls = bool(tls_trust_certs_file_path) if tls_enabled is None else tls_enabled
        context = None
        if use_tls:
            cert, key = (tls_certificate_file_path, tls_key_file_path) if tls_client_authentication else (None, None)
            if tls_client_authentication and not (cert and key):
                raise tls.TlsFilesError(
                    "bookkeeperTLSClientAuthentication needs bookkeeperTLSCertificateFilePath and "
                    "bookkeeperTLSKeyFilePath"
                )
            context = tls.client_context(tls_trust_certs_file_path, cert, key)
        return cls(supplier, context)

    @classmethod
    def from_config(cls, settings: Any) -> BookieClientSecurity:
        """From anything with the ``bookkeeper_*`` attributes of ``BrokerConfig`` (a broker's config,
        a bookie's parsed flags); duck-typed because the broker layer sits above this one."""
        return cls.from_settings(
            plugin=settings.bookkeeper_client_authentication_plugin,
            params=settings.bookkeeper_client_authentication_parameters,
            tls_trust_certs_file_path=settings.bookkeeper_tls_trust_certs_file_path,
            tls_certificate_file_path=settings.bookkeeper_tls_certificate_file_path,
            tls_key_file_path=settings.bookkeeper_tls_key_file_path,
            tls_client_authentication=settings.bookkeeper_tls_client_authentication,
        )

    @property
    def enabled(self) -> bool:
        return self.credentials is not None or self.ssl_context is not None
