"""Authentication providers and the broker's set of them (Pulsar's AuthenticationService).

A provider turns (``auth_method``, ``auth_data``) into a role, or refuses with
``AuthenticationError``. Three exist, as Pulsar's: the token provider (``token``,
``AuthenticationProviderToken``), the TLS provider (``tls``, ``AuthenticationProviderTls``,
``tls_provider.py``: the role is the verified client certificate's CN) and the Basic provider
(``basic``, ``AuthenticationProviderBasic``, ``basic_provider.py``: user and password from an
htpasswd file). Any other name is refused at start-up, so that a configuration asking for it does
not silently run without it.

``anonymousUserRole``, as Pulsar's ServerCnx: a ``connect`` without credentials, or naming a
method no provider speaks, gets that role (when it is set) instead of a refusal; credentials for
a provider that is on are always checked, and a refusal stays a refusal.
``authentication_for`` builds the set once per broker (keys are read and decoded then, so a bad
key stops the broker at start rather than refusing every client later) and caches it on the
broker object.

What the role may do is ``broker/authz``'s business, not a provider's.
"""

from __future__ import annotations

import weakref
from typing import Protocol

from magnetar.broker.auth import keys
from magnetar.broker.auth.authenticated import Authenticated
from magnetar.broker.auth.basic_provider import BASIC_PROVIDER_NAMES, BasicProvider
from magnetar.broker.auth.tls_provider import TLS_PROVIDER_NAMES, TlsProvider
from magnetar.broker.auth.tokens import TokenError, TokenVerifier
from magnetar.broker.config import BrokerConfig
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError

__all__ = ["Authenticated", "Authentication", "AuthenticationProvider", "TokenProvider", "authentication_for"]

# The method of a connection that got ``anonymousUserRole`` (Pulsar's "none").
ANONYMOUS_METHOD = "none"
# Names ``authenticationProviders`` may hold for the token provider.
TOKEN_PROVIDER_NAMES = ("token", "org.apache.pulsar.broker.authentication.AuthenticationProviderToken")


class AuthenticationProvider(Protocol):
    method: str

    def authenticate(self, data: object) -> Authenticated: ...


class TokenProvider:
    """Pulsar's AuthenticationProviderToken: ``auth_data`` is a JWT (bytes or str)."""

    method = c.AUTH_METHOD_TOKEN

    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TokenProvider:
        if config.token_secret_key and config.token_public_key:
            raise ValueError("set tokenSecretKey or tokenPublicKey, not both")
        if config.token_secret_key:
            return cls(TokenVerifier("HS256", keys.read_key(config.token_secret_key), config.token_auth_claim))
        if config.token_public_key:
            alg = config.token_public_alg
            if alg not in keys.RSA_ALGORITHMS and alg not in keys.EC_CURVES:
                raise ValueError(f"tokenPublicAlg {alg!r} is not a public-key algorithm (RS256, ES256, ...)")
            return cls(TokenVerifier(alg, keys.read_key(config.token_public_key), config.token_auth_claim))
        raise ValueError("token authentication needs tokenSecretKey or tokenPublicKey")

    def authenticate(self, data: object) -> Authenticated:
        if not isinstance(data, (bytes, str)) or not data:
            raise AuthenticationError("Authentication required: no credentials were given")
        try:
            token = data.decode() if isinstance(data, bytes) else data
        except UnicodeDecodeError:
            raise AuthenticationError("Failed to authenticate: the token is not UTF-8 text") from None
        try:
            verified = self.verifier.verify(token.strip())
        except TokenError as exc:
            raise AuthenticationError(f"Failed to authenticate: {exc}") from None
        return Authenticated(verified.role, self.method, verified.expires_at)


class Authentication:
    """The providers of one broker, by method."""

    def __init__(
        self,
        providers: list[AuthenticationProvider],
        refresh_check_seconds: float,
        anonymous_user_role: str | None = None,
    ) -> None:
        self.providers = {p.method: p for p in providers}
        self.refresh_check_seconds = refresh_check_seconds
        self.anonymous_user_role = anonymous_user_role or None

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Authentication | None:
        """None when authentication is off; ValueError (or ``keys.InvalidKey``) for bad settings."""
        if not config.authentication_enabled:
            return None
        names = config.authentication_providers or ["token"]
        providers: list[AuthenticationProvider] = []
        for name in names:
            if name in TOKEN_PROVIDER_NAMES:
                providers.append(TokenProvider.from_config(config))
            elif name in TLS_PROVIDER_NAMES:
                providers.append(TlsProvider.from_config(config))
            elif name in BASIC_PROVIDER_NAMES:
                providers.append(BasicProvider.from_config(config))
            else:
                raise ValueError(f"authentication provider {name!r} is not supported (supported: token, tls, basic)")
        if config.authentication_refresh_check_seconds <= 0:
            raise ValueError("authenticationRefreshCheckSeconds must be positive")
        return cls(providers, config.authentication_refresh_check_seconds, config.anonymous_user_role)

    def anonymous(self) -> Authenticated | None:
        """The anonymous role's authentication, when ``anonymousUserRole`` is set."""
        role = self.anonymous_user_role
        return Authenticated(role, ANONYMOUS_METHOD, None) if role is not None else None

    def authenticate(self, method: object, data: object) -> Authenticated:
        provider = self.providers.get(method) if isinstance(method, str) else None
        if provider is None and (anonymous := self.anonymous()) is not None:
            return anonymous  # no credentials, or for no provider of this broker: Pulsar's ServerCnx
        if method is None and data is None:
            raise AuthenticationError("Authentication required: no credentials were given")
        if provider is None:
            raise AuthenticationError(
                f"Authentication method {method!r} is not supported (supported: {', '.join(sorted(self.providers))})"
            )
        return provider.authenticate(data)  # each provider checks its own kind of credentials


_BUILT: weakref.WeakKeyDictionary[object, Authentication | None] = weakref.WeakKeyDictionary()


def authentication_for(owner: object, config: BrokerConfig) -> Authentication | None:
    """The broker's providers, built on first use and kept as long as ``owner`` (the broker)."""
    try:
        return _BUILT[owner]
    except KeyError:
        built = _BUILT[owner] = Authentication.from_config(config)
        return built
