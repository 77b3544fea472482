"""Who may use a bookie: token authentication of its clients, and TLS on its port (WIRE.md R80-R86).

With ``authenticationEnabled`` a connection's first frame must be ``bk_auth`` carrying a token
that verifies against the bookie's key (``tokenSecretKey`` or ``tokenPublicKey``/``tokenPublicAlg``,
role claim ``tokenAuthClaim``: the broker's settings and the broker's verifier,
``magnetar.security.tokens``). When ``superUserRoles`` is non-empty only those roles may use the
bookie (a bookie stores every tenant's data, so in a shared cluster only the brokers, the bookies'
own autorecovery and the jobs should reach it); when empty, any valid token may.

Expiry: a bookie does not re-challenge. A connection authenticated with a token that has ``exp``
is closed when it expires (after answering what it already accepted); the client opens a new one
with a fresh token from its supplier. ``TcpBookieClient`` does that ahead of time (it reads the
token's ``exp`` and reconnects shortly before it), so a rotated token causes no failed request.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError
from magnetar.security import keys, tls
from magnetar.security.tokens import TokenError, TokenVerifier

# Names ``authenticationProviders`` may hold for the token provider (as the broker's).
TOKEN_PROVIDER_NAMES = ("token", "org.apache.pulsar.broker.authentication.AuthenticationProviderToken")


@dataclass(frozen=True)
class BookieSecurity:
    """A bookie's server-side security settings (bookkeeper.conf-style names in the docs)."""

    authentication_enabled: bool = False
    authentication_providers: list[str] = field(default_factory=list)
    token_secret_key: str | None = None
    token_public_key: str | None = None
    token_public_alg: str = "RS256"
    token_auth_claim: str = "sub"
    super_user_roles: list[str] = field(default_factory=list)
    tls_enabled: bool = False
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_require_trusted_client_cert_on_connect: bool = False

    def authenticator(self) -> BookieAuthenticator | None:
        """None with authentication off; ``ValueError``/``keys.InvalidKey`` for bad settings."""
        return BookieAuthenticator.from_settings(self) if self.authentication_enabled else None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server context with TLS on (``tls.TlsFilesError`` for bad files), else None."""
        if not self.tls_enabled:
            return None
        return tls.server_context(
            self.tls_certificate_file_path,
            self.tls_key_file_path,
            self.tls_trust_certs_file_path,
            require_client_cert=self.tls_require_trusted_client_cert_on_connect,
        )


@dataclass(frozen=True, slots=True)
class BookieClientIdentity:
    role: str
    expires_at: float | None  # epoch seconds; None: the token never expires


class BookieAuthenticator:
    def __init__(self, verifier: TokenVerifier, super_user_roles: list[str]) -> None:
        self.verifier = verifier
        self.super_user_roles = frozenset(super_user_roles)

    @classmethod
    def from_settings(cls, s: BookieSecurity) -> BookieAuthenticator:
        for name in s.authentication_providers or ["token"]:
            if name not in TOKEN_PROVIDER_NAMES:
                raise ValueError(f"bookie authentication provider {name!r} is not supported (supported: token)")
        if s.token_secret_key and s.token_public_key:
            raise ValueError("set tokenSecretKey or tokenPublicKey, not both")
        if s.token_secret_key:
            verifier = TokenVerifier("HS256", keys.read_key(s.token_secret_key), s.token_auth_claim)
        elif s.token_public_key:
            alg = s.token_public_alg
            if alg not in keys.RSA_ALGORITHMS and alg not in keys.EC_CURVES:
                raise ValueError(f"tokenPublicAlg {alg!r} is not a public-key algorithm (RS256, ES256, ...)")
            verifier = TokenVerifier(alg, keys.read_key(s.token_public_key), s.token_auth_claim)
        else:
            raise ValueError("bookie token authentication needs tokenSecretKey or tokenPublicKey")
        return cls(verifier, s.super_user_roles)

    def authenticate(self, method: object, data: object) -> BookieClientIdentity:
        """The client's identity, or ``AuthenticationError`` saying why not (never the token)."""
        if method != c.AUTH_METHOD_TOKEN:
            raise AuthenticationError(f"Authentication method {method!r} is not supported by the bookie (token)")
        if not isinstance(data, (bytes, str)) or not data:
            raise AuthenticationError("Authentication required: no credentials were given")
        try:
            token = data.decode() if isinstance(data, bytes) else data
            verified = self.verifier.verify(token.strip())
        except UnicodeDecodeError:
            raise AuthenticationError("Failed to authenticate: the token is not UTF-8 text") from None
        except TokenError as exc:
            raise AuthenticationError(f"Failed to authenticate: {exc}") from None
        if self.super_user_roles and verified.role not in self.super_user_roles:
            raise AuthenticationError(
                f"Role {verified.role!r} may not use this bookie (not in the bookie's superUserRoles)"
            )
        return BookieClientIdentity(verified.role, verified.expires_at)
