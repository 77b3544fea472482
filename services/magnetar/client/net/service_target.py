"""What a client dials for one ``ServiceInfo``: its brokers or its HTTP lookup, its TLS context, its credentials.

A ``Client`` resolves its service URL once at construction, and again each time a
``ServiceInfoProvider`` switches it to another cluster (``service_info.py``); both go through
``ServiceTarget.resolve``, so an ``http://`` URL, TLS and per-cluster credentials work the same
after a switch as at the start. The TLS options other than the trust store (insecure connections,
hostname checks, the client certificate) are the client's own and apply to every cluster.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from magnetar.client.net.auth import Authentication
from magnetar.client.net.http_lookup import HttpLookup, is_http_url
from magnetar.client.net.service_info import ServiceInfo
from magnetar.client.net.service_url import is_tls_url, service_urls
from magnetar.client.net.tls import TlsOptions

__all__ = ["ServiceTarget", "TlsSettings"]


@dataclass(frozen=True)
class TlsSettings:
    """The client's TLS arguments, kept to build a context for each cluster it switches to."""

    use_tls: bool
    trust_certs_file_path: str | None
    allow_insecure_connection: bool
    validate_hostname: bool
    certificate_file_path: str | None
    private_key_file_path: str | None


@dataclass
class ServiceTarget:
    info: ServiceInfo
    tls: bool
    service_urls: list[str]  # the binary brokers to ask (empty with an HTTP lookup)
    http: HttpLookup | None
    ssl_context: ssl.SSLContext | None
    auth: Authentication | None

    @classmethod
    def resolve(
        cls,
        info: ServiceInfo,
        settings: TlsSettings,
        *,
        default_auth: Authentication | None,
        timeout: float,
    ) -> ServiceTarget:
        """The target for ``info``; credentials and trust store default to the client's own arguments."""
        url = info.service_url
        auth = info.authentication if info.authentication is not None else default_auth
        http = is_http_url(url)
        tls = settings.use_tls or is_tls_url(url) or url.strip().lower().startswith("https://")
        certificate, key = settings.certificate_file_path, settings.private_key_file_path
        if certificate is None and key is None:  # AuthenticationTLS carries the client certificate
            certificate = getattr(auth, "certificate_path", None)
            key = getattr(auth, "private_key_path", None)
        # Built now, so a bad path fails here rather than at the first connection.
        context = (
            TlsOptions(
                info.tls_trust_certs_file_path or settings.trust_certs_file_path,
                settings.allow_insecure_connection,
                settings.validate_hostname,
                certificate,
                key,
            ).context()
            if tls
            else None
        )
        lookup = HttpLookup(url, ssl_context=context, timeout=timeout, authentication=auth) if http else None
        urls = [] if http else service_urls(url, tls=tls)
        return cls(info, tls, urls, lookup, context, auth)
