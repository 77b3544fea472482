"""The broker's server-side ``ssl.SSLContext``, from Pulsar's TLS settings.

``tlsCertificateFilePath`` and ``tlsKeyFilePath`` are the broker's certificate (chain) and key;
``tlsTrustCertsFilePath`` the CA that client certificates are checked against. As in Pulsar:

- a client certificate is asked for whenever a trust file is given, and is *required* only with
  ``tlsRequireTrustedClientCertOnConnect`` (otherwise a client without one still connects, and
  token authentication decides);
- ``tlsAllowInsecureConnection`` does not check client certificates at all (Python's ssl cannot
  ask for one without verifying it), which only makes sense while testing.

The same context serves the binary TLS listener (``brokerServicePortTls``) and the admin API's
HTTPS listener (``webServicePortTls``). TLS 1.2 is the minimum. TLS between brokers and bookies
is ``bookie/client_security.py`` (the client side) and ``security/tls.py`` (the contexts).
"""

from __future__ import annotations

import ssl

from magnetar.broker.config import BrokerConfig

__all__ = ["TlsConfigError", "server_ssl_context", "tls_enabled"]


class TlsConfigError(ValueError):
    """The TLS settings are incomplete or their files unreadable; the message names the setting."""


def tls_enabled(config: BrokerConfig) -> bool:
    """Whether any TLS listener is asked for (a port given for the binary or the admin listener)."""
    return config.broker_service_port_tls is not None or config.web_service_port_tls is not None


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context for the TLS listeners; raises ``TlsConfigError`` naming what is missing."""
    if not config.tls_certificate_file_path or not config.tls_key_file_path:
        raise TlsConfigError(
            "a TLS port needs tlsCertificateFilePath and tlsKeyFilePath (the broker's certificate and key)"
        )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(config.tls_certificate_file_path, config.tls_key_file_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(
            f"cannot load tlsCertificateFilePath {config.tls_certificate_file_path!r} / "
            f"tlsKeyFilePath {config.tls_key_file_path!r}: {exc}"
        ) from exc
    trust = config.tls_trust_certs_file_path
    if config.tls_require_trusted_client_cert_on_connect and not trust and not config.tls_allow_insecure_connection:
        raise TlsConfigError("tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath (the clients' CA)")
    if trust:
        try:
            ctx.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load tlsTrustCertsFilePath {trust!r}: {exc}") from exc
    if config.tls_allow_insecure_connection:
        ctx.verify_mode = ssl.CERT_NONE  # Python cannot ask for a certificate without checking it
    elif config.tls_require_trusted_client_cert_on_connect:
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif trust:
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
