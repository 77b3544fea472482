"""Client authentication, named as pulsar-client 3.x's: ``AuthenticationToken`` and the refusals.

A provider says which method it speaks (``auth_method``, the value of ``connect.auth_method``) and
produces the credentials (``auth_data()``) each time a connection is opened and each time the
broker sends ``auth_challenge``. ``AuthenticationToken`` takes a JWT or a callable returning one,
as Pulsar's does; the callable is called again for every new connection and every challenge, which
is how a token that is rotated in a file keeps working (``token_from_file`` builds such a callable).

``AuthenticationTLS(certificate_path, private_key_path)`` authenticates with a client certificate,
as pulsar-client's: the certificate goes in the TLS handshake (mTLS; the client uses it unless
``tls_certificate_file_path`` is given too) and ``connect`` says ``auth_method: "tls"`` with no
data, so a broker with the TLS provider takes the role from the certificate's CN (the broker reads
the certificate from its side of the TLS connection, never from ``connect``). Over a plaintext
``magnetar://`` URL it has no certificate to present and the broker refuses it. Pulsar's other
providers: ``Authentication`` (a C++ plugin library),
``AuthenticationAthenz``, ``AuthenticationOauth2`` and ``AuthenticationBasic`` raise
``Unsupported`` when created, rather than connecting without the credentials a user asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from magnetar.protocol.errors import Unsupported

__all__ = [
    "AuthProvider",
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "tls_from_params",
    "token_from_file",
    "token_from_params",
]

TOKEN_METHOD = "token"
TLS_METHOD = "tls"


class AuthProvider(Protocol):
    """What a connection needs from ``Client(authentication=...)``."""

    @property
    def auth_method(self) -> str | None: ...

    def auth_data(self) -> bytes: ...


class Authentication:
    """Pulsar's base class, which loads a C++ authentication plugin: no such plugins here."""

    def __init__(self, dynamicLibPath: str, authParamsString: str) -> None:
        raise Unsupported(
            f"authentication plugin libraries are not supported ({dynamicLibPath!r}); use AuthenticationToken"
        )

    @property
    def auth_method(self) -> str | None:
        return None

    def auth_data(self) -> bytes:
        return b""


class AuthenticationToken(Authentication):
    """Token (JWT) authentication: ``token`` is the token, or a function returning it.

    A function is called for every new connection and every ``auth_challenge``, never cached, so
    it may re-read a file that a secret manager rotates (``token_from_file(path)``).
    """

    def __init__(self, token: str | Callable[[], str]) -> None:  # no super().__init__: that refuses
        if not (isinstance(token, str) or callable(token)):
            raise ValueError("Argument token is expected to be of type 'str' or a function returning 'str'")
        self._token = token

    @property
    def auth_method(self) -> str | None:
        return TOKEN_METHOD

    def token(self) -> str:
        """The current token (calls the supplier, when one was given)."""
        value = self._token() if callable(self._token) else self._token
        if not isinstance(value, str):
            raise ValueError(f"the token supplier returned {type(value).__name__}, not str")
        return value.strip()

    def auth_data(self) -> bytes:
        return self.token().encode()

    def __repr__(self) -> str:  # never print the token itself
        kind = "supplier" if callable(self._token) else "static"
        return f"AuthenticationToken({kind})"


class AuthenticationTLS(Authentication):
    """mTLS authentication: the client certificate is the credential (module docstring)."""

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        if not isinstance(certificate_path, str) or not isinstance(private_key_path, str):
            raise ValueError("certificate_path and private_key_path must be str")
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    @property
    def auth_method(self) -> str | None:
        return TLS_METHOD

    def auth_data(self) -> bytes:
        return b""  # the certificate is in the TLS handshake, not in connect

    def __repr__(self) -> str:
        return f"AuthenticationTLS({self.certificate_path!r})"


class AuthenticationAthenz(Authentication):
    def __init__(self, auth_params_string: str) -> None:
        raise Unsupported("Athenz authentication is not supported by Magnetar; use AuthenticationToken")


class AuthenticationOauth2(Authentication):
    def __init__(self, auth_params_string: str) -> None:
        raise Unsupported("OAuth2 authentication is not supported by Magnetar yet; use AuthenticationToken")


class AuthenticationBasic(Authentication):
    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        raise Unsupported("basic authentication is not supported by Magnetar; use AuthenticationToken")


def token_from_file(path: str | Path) -> Callable[[], str]:
    """A token supplier that reads ``path`` (a ``file://`` URL or a path) on every call."""
    text = str(path)
    file = Path(text[len("file://") :] if text.startswith("file://") else text)

    def read() -> str:
        return file.read_text().strip()

    return read


def token_from_params(params: str) -> AuthenticationToken:
    """Pulsar's ``--auth-params`` for the token plugin: ``token:<jwt>``, ``file:///path`` or a bare JWT."""
    params = params.strip()
    if params.startswith("token:"):
        return AuthenticationToken(params[len("token:") :])
    if params.startswith("file:"):
        return AuthenticationToken(token_from_file(params))
    if params.startswith("{"):  # Pulsar also accepts {"token": "..."}
        import json

        doc = json.loads(params)
        if isinstance(doc, dict) and isinstance(doc.get("token"), str):
            return token_from_params(doc["token"])
        raise ValueError('token auth params as JSON must be {"token": "..."}')
    return AuthenticationToken(params)


def tls_from_params(params: str) -> AuthenticationTLS:
    """Pulsar's ``--auth-params`` for AuthenticationTls: ``tlsCertFile:/path,tlsKeyFile:/path`` or
    the JSON ``{"tlsCertFile": "...", "tlsKeyFile": "..."}``."""
    params = params.strip()
    fields: dict[str, str] = {}
    if params.startswith("{"):
        import json

        doc = json.loads(params)
        if isinstance(doc, dict):
            fields = {str(k): str(v) for k, v in doc.items()}
    else:
        for part in params.split(","):
            name, sep, value = part.partition(":")
            if sep:
                fields[name.strip()] = value.strip()
    cert, key = fields.get("tlsCertFile"), fields.get("tlsKeyFile")
    if not cert or not key:
        raise ValueError("TLS auth params need tlsCertFile:<path>,tlsKeyFile:<path>")
    return AuthenticationTLS(cert, key)
