"""``ssl.SSLContext`` builders for the bookie port, server side and client side.

They live in this low layer so that the bookie layer can use them; the broker's listeners
(``node/tls.py``) use the same server context. The rules: TLS 1.2 at least; a server asks for a client
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
    certificate: str | None,
    key: str | None,
    trust: str | None = None,
    *,
    require_client_cert: bool = False,
    allow_insecure: bool = False,
) -> ssl.SSLContext:
    """A listener's context (the broker's TLS ports and the bookie port share it).

    ``allow_insecure`` (``tlsAllowInsecureConnection``) accepts any client certificate: Python
    cannot ask for one without checking it, so none is asked for."""
    if not certificate or not key:
        raise TlsFilesError("a TLS port needs tlsCertificateFilePath and tlsKeyFilePath (its certificate and key)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certificate, key)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFilesError(
            f"cannot load tlsCertificateFilePath {certificate!r} / tlsKeyFilePath {key!r}: {exc}"
        ) from exc
    if require_client_cert and not trust and not allow_insecure:
        raise TlsFilesError("tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath (the clients' CA)")
    if trust:
        try:
            ctx.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as exc:
            raise TlsFilesError(f"cannot load tlsTrustCertsFilePath {trust!r}: {exc}") from exc
    if allow_insecure:
        ctx.verify_mode = ssl.CERT_NONE
    elif require_client_cert:
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif trust:
        ctx.verify_mode = ssl.CERT_OPTIONAL
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
