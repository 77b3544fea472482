"""``ssl.SSLContext`` builders for the bookie port, server side and client side.

The bookie layer cannot use ``node/tls.py`` (a node module, above it), so the two contexts the data
plane needs live here, with the rules of the broker's: TLS 1.2 at least; a server asks for a client
certificate when it has a trust file and requires one only with
``tlsRequireTrustedClientCertOnConnect``; a client always verifies the bookie's certificate against
its trust file (or the system store) and its host name against the address the bookie registered,
and presents its own certificate when given one (Pulsar's ``bookkeeperTLSClientAuthentication``).
A bad file raises ``TlsFilesError`` naming the setting, so the process stops at start-up.
"""

from __future__ import annotations

import ssl


class TlsFilesError(ValueError):
    """A TLS file setting is missing or unreadable (the message names it)."""


def server_context(
    certificate: str | None, key: str | None, trust: str | None = None, *, require_client_cert: bool = False
) -> ssl.SSLContext:
    if not certificate or not key:
        raise TlsFilesError("TLS on the bookie port needs tlsCertificateFilePath and tlsKeyFilePath")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFilesError(f"cannot load tlsCertificateFilePath/tlsKeyFilePath: {exc}") from exc
    if require_client_cert and not trust:
        raise TlsFilesError("tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath (the clients' CA)")
    if trust:
        try:
            ctx.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as exc:
            raise TlsFilesError(f"cannot load tlsTrustCertsFilePath {trust!r}: {exc}") from exc
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(
    trust: str | None, certificate: str | None = None, key: str | None = None, *, check_hostname: bool = True
) -> ssl.SSLContext:
    """The context a bookie client connects with; ``trust`` None uses the system's CAs."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if trust:
        try:
            ctx.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as exc:
            raise TlsFilesError(f"cannot load bookkeeperTLSTrustCertsFilePath {trust!r}: {exc}") from exc
    ctx.check_hostname = check_hostname
    if certificate or key:
        if not (certificate and key):
            raise TlsFilesError("a client certificate needs both bookkeeperTLSCertificateFilePath and KeyFilePath")
        try:
            ctx.load_cert_chain(certificate, key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsFilesError(f"cannot load bookkeeperTLSCertificateFilePath/KeyFilePath: {exc}") from exc
    return ctx
