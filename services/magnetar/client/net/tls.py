"""The client's ``ssl.SSLContext``, from pulsar-client's TLS options, and the TLS URL schemes.

pulsar-client's semantics, kept exactly because users' configurations depend on them:

- TLS is on for ``magnetar+ssl://`` (or Pulsar's ``pulsar+ssl://``) service URLs, or with
  ``use_tls=True`` whatever the scheme;
- the broker's certificate chain is always verified against ``tls_trust_certs_file_path`` (the
  system's trust store when it is None; pulsar-client uses certifi's, the same idea), unless
  ``tls_allow_insecure_connection=True``, which accepts any certificate;
- the host name is checked against the certificate only with ``tls_validate_hostname=True``
  (pulsar-client's default is False: a chain from the trusted CA is enough);
- ``tls_certificate_file_path`` / ``tls_private_key_file_path`` give a client certificate for
  brokers that require one (``tlsRequireTrustedClientCertOnConnect``).

A failed handshake (unknown CA, wrong host name, a plaintext port) is not worth retrying until the
operation timeout: it becomes ``ConnectError`` (pulsar-client's name), which is not retryable.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

from magnetar.protocol.errors import ConnectError

__all__ = ["TLS_SCHEMES", "ConnectError", "TlsOptions", "handshake_error"]

TLS_SCHEMES = ("magnetar+ssl://", "pulsar+ssl://")


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """pulsar-client's TLS arguments; ``context()`` builds the ``SSLContext`` they describe."""

    trust_certs_file_path: str | None = None
    allow_insecure_connection: bool = False
    validate_hostname: bool = False
    certificate_file_path: str | None = None
    private_key_file_path: str | None = None

    def context(self) -> ssl.SSLContext:
        """A client context; missing or unreadable files raise ``ValueError`` naming the option."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.allow_insecure_connection:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = self.validate_hostname
            ctx.verify_mode = ssl.CERT_REQUIRED
            if self.trust_certs_file_path:
                try:
                    ctx.load_verify_locations(cafile=self.trust_certs_file_path)
                except (OSError, ssl.SSLError) as exc:
                    raise ValueError(f"tls_trust_certs_file_path {self.trust_certs_file_path!r}: {exc}") from exc
            else:
                ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if self.certificate_file_path or self.private_key_file_path:
            if not (self.certificate_file_path and self.private_key_file_path):
                raise ValueError("tls_certificate_file_path and tls_private_key_file_path go together")
            try:
                ctx.load_cert_chain(self.certificate_file_path, self.private_key_file_path)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"client certificate {self.certificate_file_path!r}: {exc}") from exc
        return ctx


def handshake_error(url: str, exc: ssl.SSLError) -> ConnectError:
    """The one-line error for a failed TLS handshake with ``url``, saying what to check."""
    # "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: <why> (_ssl.c:1006)" -> no source line
    reason = re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(exc))
    hint = ""
    if isinstance(exc, ssl.SSLCertVerificationError):
        if "hostname" in str(reason).lower() or "ip address mismatch" in str(reason).lower():
            hint = " (the certificate does not name this host; tls_validate_hostname=False skips that check)"
        else:
            hint = " (is tls_trust_certs_file_path the CA that signed the broker's certificate?)"
    elif "wrong version number" in str(exc).lower() or "record layer" in str(exc).lower():
        hint = " (is this a TLS port? plaintext brokers take magnetar:// URLs)"
    return ConnectError(f"TLS handshake with {url} failed: {reason}{hint}")
