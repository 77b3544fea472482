"""Pulsar's AuthenticationProviderTls: the role is the client certificate's Common Name.

A client authenticates with its TLS client certificate (mTLS) instead of a token: the TLS
listener checks the certificate against ``tlsTrustCertsFilePath`` during the handshake, and this
provider takes the role from the verified certificate's subject CN, as Pulsar does. It needs a
trust file (without one no client certificate is asked for) and refuses to run with
``tlsAllowInsecureConnection`` (Python's ssl then asks for no certificate at all).

The certificate never comes from the client's ``connect``: ``with_peer_certificate`` replaces
``auth_data`` of an ``auth_method: "tls"`` connect by the TLS layer's own view of the peer (a
``PeerCertificate``, a type msgpack cannot produce), so a client cannot claim a certificate it
did not present. Over a plaintext connection, or a TLS one without a client certificate, there is
nothing to take a role from and the connect is refused with ``AuthenticationError``. On HTTPS the
admin API does the same when a request carries no ``Authorization`` header (broker/auth/http.py).
A certificate's role does not expire during a connection (Pulsar does not re-check it either).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.auth.authenticated import Authenticated
from magnetar.broker.config import BrokerConfig
from magnetar.protocol.errors import AuthenticationError

METHOD = "tls"
TLS_PROVIDER_NAMES = (METHOD, "org.apache.pulsar.broker.authentication.AuthenticationProviderTls")


@dataclass(frozen=True, slots=True)
class PeerCertificate:
    """The verified client certificate of a TLS connection, as ``SSLSocket.getpeercert()`` gives it
    (an empty mapping: no certificate was presented)."""

    cert: Mapping[str, Any]


def peer_certificate(transport: asyncio.BaseTransport | None) -> PeerCertificate:
    """The certificate the TLS layer verified for ``transport`` (empty when none, or plaintext)."""
    cert = transport.get_extra_info("peercert") if transport is not None else None
    return PeerCertificate(cert if isinstance(cert, Mapping) else {})


def with_peer_certificate(cmd: Any, transport: asyncio.BaseTransport | None) -> Any:
    """``connect`` as the TLS provider must see it: for ``auth_method: "tls"`` the credentials are
    the connection's verified certificate, whatever the client sent in ``auth_data``."""
    if isinstance(cmd, dict) and cmd.get("auth_method") == METHOD:
        return {**cmd, "auth_data": peer_certificate(transport)}
    return cmd


def common_name(cert: Mapping[str, Any]) -> str | None:
    """The subject's CN (the last one, as Pulsar's ``getCommonName``), or None."""
    found = None
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                found = str(value)
    return found


class TlsProvider:
    """The role of a verified client certificate: its subject CN."""

    method = METHOD

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TlsProvider:
        if not config.tls_trust_certs_file_path:
            raise ValueError(
                "the tls authentication provider needs tlsTrustCertsFilePath (the CA of the client certificates)"
            )
        if config.tls_allow_insecure_connection:
            raise ValueError(
                "the tls authentication provider cannot work with tlsAllowInsecureConnection "
                "(no client certificate is checked then)"
            )
        if config.broker_service_port_tls is None and config.web_service_port_tls is None:
            raise ValueError(
                "the tls authentication provider needs a TLS port (brokerServicePortTls/webServicePortTls)"
            )
        return cls()

    def authenticate(self, data: object) -> Authenticated:
        if not isinstance(data, PeerCertificate) or not data.cert:
            raise AuthenticationError(
                "Failed to authenticate: no client certificate was presented over TLS (auth_method tls)"
            )
        role = common_name(data.cert)
        if not role:
            raise AuthenticationError("Failed to authenticate: the client certificate has no Common Name (CN)")
        return Authenticated(role, self.method, None)
