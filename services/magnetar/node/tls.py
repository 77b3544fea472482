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
from magnetar.security import tls

__all__ = ["TlsConfigError", "server_ssl_context", "tls_enabled"]


# The error of a bad TLS setting (a ``ValueError`` naming the setting), shared with the bookie port.
TlsConfigError = tls.TlsFilesError


def tls_enabled(config: BrokerConfig) -> bool:
    """Whether any TLS listener is asked for (a port given for the binary or the admin listener)."""
    return config.broker_service_port_tls is not None or config.web_service_port_tls is not None


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context for the TLS listeners; raises ``TlsConfigError`` naming what is missing."""
    return tls.server_context(
        config.tls_certificate_file_path,
        config.tls_key_file_path,
        config.tls_trust_certs_file_path,
        require_client_cert=config.tls_require_trusted_client_cert_on_connect,
        allow_insecure=config.tls_allow_insecure_connection,
    )
