"""Client authentication, named as pulsar-client 3.x's: ``AuthenticationToken``, ``AuthenticationTLS``,
``AuthenticationBasic`` and ``Authentication(name, params)``.

A provider says which method it speaks (``auth_method``, the value of ``connect.auth_method``),
produces the binary protocol's credentials (``auth_data()``) each time a connection is opened and
each time the broker sends ``auth_challenge``, and the HTTP headers (``http_headers()``) for an
``http://`` service URL's lookups and the admin API. ``AuthenticationToken`` takes a JWT or a
callable returning one, as Pulsar's does; the callable is called again for every new connection
and every challenge, which is how a token that is rotated in a file keeps working
(``token_from_file`` builds such a callable). A callable that raises makes the connection fail
with ``AuthenticationError`` carrying its message, rather than an unrelated exception type.

``AuthenticationTLS(certificate_path, private_key_path)`` authenticates with a client certificate,
as pulsar-client's: the certificate goes in the TLS handshake (mTLS; the client uses it unless
``tls_certificate_file_path`` is given too) and ``connect`` says ``auth_method: "tls"`` with no
data, so a broker with the TLS provider takes the role from the certificate's CN (the broker reads
the certificate from its side of the TLS connection, never from ``connect``). Over a plaintext
``magnetar://`` URL it has no certificate to present and the broker refuses it.

``AuthenticationBasic(username, password, method="basic")`` sends ``username:password`` in
``connect`` and ``Authorization: Basic`` over HTTP, for a broker with Pulsar's
AuthenticationProviderBasic (broker/auth/basic_provider.py).

``Authentication(name, params)`` is pulsar-client's plugin loader. The C++ client it wraps
recognises its built-in plugins by short name or by the Java client's class name, case
insensitively (``tls``, ``token``, ``basic``, ``org.apache.pulsar.client.impl.auth.AuthenticationTls``
...), and so does this one; anything else would be a shared library, which is never loaded here:
such an object is created, as in pulsar-client, and fails at first use with
``AuthenticationError`` (also a ``ConnectError``, what pulsar-client raises then).
``AuthenticationAthenz`` and ``AuthenticationOauth2`` raise ``Unsupported`` when created,
rather than connecting without the credentials a user asked for.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from magnetar.protocol.errors import AuthenticationError, ConnectError, Unsupported
from magnetar.security.credentials import TOKEN_PLUGIN_NAMES  # the servers' token plugin names too

__all__ = [
    "AuthProvider",
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "basic_from_params",
    "builtin_plugin",
    "tls_from_params",
    "token_from_file",
    "token_from_params",
]

TOKEN_METHOD = "token"
TLS_METHOD = "tls"
BASIC_METHOD = "basic"

# The built-in plugins of pulsar-client's C++ AuthFactory: short name and Java client class name.
_JAVA = "org.apache.pulsar.client.impl.auth."
TLS_PLUGIN_NAMES = (TLS_METHOD, _JAVA + "AuthenticationTls")
BASIC_PLUGIN_NAMES = (BASIC_METHOD, _JAVA + "AuthenticationBasic")
ATHENZ_PLUGIN_NAMES = ("athenz", _JAVA + "AuthenticationAthenz")
OAUTH2_PLUGIN_NAMES = ("oauth2token", _JAVA + "oauth2.AuthenticationOAuth2")


class AuthPluginNotLoaded(AuthenticationError, ConnectError):
    """An ``Authentication(name, params)`` whose plugin is not built in: both pulsar-client's
    ``ConnectError`` (what its client raises when such a plugin is used) and ``AuthenticationError``."""


class AuthProvider(Protocol):
    """What a connection needs from ``Client(authentication=...)``."""

    @property
    def auth_method(self) -> str | None: ...

    def auth_data(self) -> bytes: ...

    def http_headers(self) -> dict[str, str]: ...


def _check_str(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"Argument {name} is expected to be of type 'str' and not '{type(value).__name__}'")
    return value


class Authentication:
    """pulsar-client's plugin loader: a built-in plugin by name (module docstring), else an error at use."""

    certificate_path: str | None = None  # from a tls plugin's parameters
    private_key_path: str | None = None

    def __init__(self, dynamicLibPath: str, authParamsString: str) -> None:
        _check_str(dynamicLibPath, "dynamicLibPath")
        _check_str(authParamsString, "authParamsString")
        self.plugin_name = dynamicLibPath
        self._plugin = builtin_plugin(dynamicLibPath, authParamsString)
        if isinstance(self._plugin, AuthenticationTLS):  # the certificate goes in the TLS handshake
            self.certificate_path = self._plugin.certificate_path
            self.private_key_path = self._plugin.private_key_path

    def _loaded(self) -> Authentication:
        if self._plugin is None:
            raise AuthPluginNotLoaded(
                f"authentication plugin {self.plugin_name!r} could not be loaded: the built-in plugins are "
                "tls, token and basic (or Pulsar's class names for them); plugin libraries are not loaded"
            )
        return self._plugin

    @property
    def auth_method(self) -> str | None:
        return self._loaded().auth_method

    def auth_data(self) -> bytes:
        return self._loaded().auth_data()

    def http_headers(self) -> dict[str, str]:
        """The headers that carry the credentials on HTTP (lookups, the admin API)."""
        return self._loaded().http_headers()

    def __repr__(self) -> str:
        return f"Authentication({self.plugin_name!r})"


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
        """The current token (calls the supplier, when one was given); a supplier that fails, or
        returns something other than text, is an ``AuthenticationError`` naming its error."""
        if callable(self._token):
            try:
                value = self._token()
            except Exception as exc:
                raise AuthenticationError(f"the token supplier failed: {exc}") from exc
        else:
            value = self._token
        if not isinstance(value, str):
            raise AuthenticationError(f"the token supplier returned {type(value).__name__}, not str")
        return value.strip()

    def auth_data(self) -> bytes:
        return self.token().encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}

    def __repr__(self) -> str:  # never print the token itself
        kind = "supplier" if callable(self._token) else "static"
        return f"AuthenticationToken({kind})"


class AuthenticationTLS(Authentication):
    """mTLS authentication: the client certificate is the credential (module docstring)."""

    certificate_path: str
    private_key_path: str

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

    def http_headers(self) -> dict[str, str]:
        return {}  # HTTPS presents the certificate in its handshake too

    def __repr__(self) -> str:
        return f"AuthenticationTLS({self.certificate_path!r})"


class AuthenticationAthenz(Authentication):
    def __init__(self, auth_params_string: str) -> None:
        raise Unsupported("Athenz authentication is not supported by Magnetar; use AuthenticationToken")


class AuthenticationOauth2(Authentication):
    def __init__(self, auth_params_string: str) -> None:
        raise Unsupported("OAuth2 authentication is not supported by Magnetar yet; use AuthenticationToken")


class AuthenticationBasic(Authentication):
    """Basic authentication, as pulsar-client's: ``username:password`` in ``connect`` under the
    method ``method`` (``basic`` unless a broker has a provider by another name), and
    ``Authorization: Basic base64(username:password)`` over HTTP. ``auth_params_string``, when
    given, is the JSON ``{"username": ..., "password": ..., "method": ...}`` and the other
    arguments are ignored."""

    username: str
    password: str
    method: str

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:  # no super().__init__: nothing to load
        if auth_params_string is not None:
            other = basic_from_params(_check_str(auth_params_string, "auth_params_string"))
            username, password, method = other.username, other.password, other.method
        self.username = _check_str(username, "username")
        self.password = _check_str(password, "password")
        self.method = _check_str(method, "method")

    @property
    def auth_method(self) -> str | None:
        return self.method

    def auth_data(self) -> bytes:
        return f"{self.username}:{self.password}".encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(self.auth_data()).decode("ascii")}

    def __repr__(self) -> str:  # never print the password
        return f"AuthenticationBasic({self.username!r}, method={self.method!r})"


def builtin_plugin(name: str, params: str) -> Authentication | None:
    """The built-in plugin ``name`` (pulsar-client's short name or Java class name, any case) built
    from its parameter string; None for a name that is not built in. Bad parameters: ValueError."""
    key = name.strip().lower()
    if key in (n.lower() for n in TOKEN_PLUGIN_NAMES):
        return token_from_params(params)
    if key in (n.lower() for n in TLS_PLUGIN_NAMES):
        return tls_from_params(params)
    if key in (n.lower() for n in BASIC_PLUGIN_NAMES):
        return basic_from_params(params)
    if key in (n.lower() for n in ATHENZ_PLUGIN_NAMES):
        return AuthenticationAthenz(params)
    if key in (n.lower() for n in OAUTH2_PLUGIN_NAMES):
        return AuthenticationOauth2(params)
    return None


def _param_fields(params: str, plugin: str, *, strip_values: bool) -> dict[str, str]:
    """A plugin's parameter string as its fields: a JSON object, or Pulsar's ``key:value,key:value``
    form (a value may itself hold ``:``, a path or a password; a password keeps its spaces)."""
    params = params.strip()
    if params.startswith("{"):
        try:
            doc = json.loads(params)
        except ValueError as exc:
            raise ValueError(f"{plugin} auth params are not valid JSON: {exc}") from None
        return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}
    fields: dict[str, str] = {}
    for part in params.split(","):
        name, sep, value = part.partition(":")
        if sep:
            fields[name.strip()] = value.strip() if strip_values else value
    return fields


def basic_from_params(params: str) -> AuthenticationBasic:
    """Basic credentials from pulsar-client's JSON ``{"username": ..., "password": ..., "method": ...}``;
    the Java client's ``userId`` key and its ``userId:<name>,password:<secret>`` form are accepted too."""
    fields = _param_fields(params, "basic", strip_values=False)
    username = fields.get("username", fields.get("userId"))
    if username is None:
        raise ValueError("No username provided for basic provider")
    if "password" not in fields:
        raise ValueError("No password provided for basic provider")
    return AuthenticationBasic(username, fields["password"], fields.get("method", BASIC_METHOD))


def token_from_file(path: str | Path) -> Callable[[], str]:
    """A token supplier that reads ``path`` (a ``file://`` URL or a path) on every call."""
    text = str(path)
    file = Path(text[len("file://") :] if text.startswith("file://") else text)

    def read() -> str:
        return file.read_text().strip()

    return read


def token_from_params(params: str) -> AuthenticationToken:
    """Pulsar's ``--auth-params`` for the token plugin: ``token:<jwt>``, ``file:///path``,
    ``env:NAME`` (the C++ client's: the variable is read at every use) or a bare JWT."""
    params = params.strip()
    if params.startswith("token:"):
        return AuthenticationToken(params[len("token:") :])
    if params.startswith("file:"):
        return AuthenticationToken(token_from_file(params))
    if params.startswith("env:"):
        variable = params[len("env:") :]

        def from_env() -> str:
            value = os.environ.get(variable)
            if value is None:
                raise AuthenticationError(f"environment variable {variable} is not set")
            return value

        return AuthenticationToken(from_env)
    if params.startswith("{"):  # Pulsar also accepts {"token": "..."}
        doc = json.loads(params)
        if isinstance(doc, dict) and isinstance(doc.get("token"), str):
            return token_from_params(doc["token"])
        raise ValueError('token auth params as JSON must be {"token": "..."}')
    return AuthenticationToken(params)


def tls_from_params(params: str) -> AuthenticationTLS:
    """Pulsar's ``--auth-params`` for AuthenticationTls: ``tlsCertFile:/path,tlsKeyFile:/path`` or
    the JSON ``{"tlsCertFile": "...", "tlsKeyFile": "..."}``."""
    fields = _param_fields(params, "TLS", strip_values=True)
    cert, key = fields.get("tlsCertFile"), fields.get("tlsKeyFile")
    if not cert or not key:
        raise ValueError("TLS auth params need tlsCertFile:<path>,tlsKeyFile:<path>")
    return AuthenticationTLS(cert, key)
