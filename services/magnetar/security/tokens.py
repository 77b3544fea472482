"""Signing and verifying JWTs with PyJWT, the way Pulsar's token provider does.

Verification accepts exactly one algorithm, the configured one (``algorithms=[...]``): that
refuses ``alg: none`` and the old trick of an HS256 token whose "secret" is the broker's public
key. ``exp`` is checked when present (a token without one never expires, as in Pulsar), with no
clock skew (Pulsar's ``allowedTokenClockSkewSeconds`` default 0); ``aud`` is not checked, since
Pulsar checks it only when ``tokenAudienceClaim`` is set, which is not supported here. The role
is one string claim, ``sub`` unless ``tokenAuthClaim`` names another. Every refusal is a
``TokenError`` whose message says why, without echoing the token.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass
from typing import Any

import jwt

from magnetar.security import keys

_RELATIVE = re.compile(r"^\s*(\d+)\s*([smhdwy]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class TokenError(ValueError):
    """A token refused (malformed, bad signature, wrong algorithm, expired, no role claim)."""


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    role: str
    expires_at: float | None  # epoch seconds of ``exp``; None: the token never expires
    claims: dict[str, Any]


def parse_relative_time(text: str) -> int:
    """Seconds in Pulsar's relative time (``30s``, ``10m``, ``1h``, ``3d``, ``2w``, ``10y``)."""
    m = _RELATIVE.match(text)
    if m is None:
        raise ValueError(f"invalid relative time {text!r} (e.g. 30s, 10m, 1h, 3d, 2w, 1y)")
    return int(m.group(1)) * _UNITS[m.group(2)]


def signing_key(algorithm: str, key: bytes) -> Any:
    """The PyJWT key for signing: the secret itself for HS*, the decoded private key otherwise."""
    return key if algorithm in keys.HMAC_ALGORITHMS else keys.private_key(key)


def verifying_key(algorithm: str, key: bytes) -> Any:
    """The PyJWT key for verifying: the secret for HS*, the decoded public key otherwise."""
    return key if algorithm in keys.HMAC_ALGORITHMS else keys.public_key(key)


def create_token(
    algorithm: str, key: bytes, subject: str, expires_in: int | None = None, now: float | None = None
) -> str:
    """A signed token with ``sub`` (and ``exp`` ``expires_in`` seconds from now, when given)."""
    claims: dict[str, Any] = {"sub": subject}
    if expires_in is not None:
        claims["exp"] = int((time.time() if now is None else now) + expires_in)
    return jwt.encode(claims, signing_key(algorithm, key), algorithm=algorithm)


class TokenVerifier:
    """Verifies tokens against one key and one algorithm; built once from the broker's settings."""

    def __init__(self, algorithm: str, key: bytes, role_claim: str = "sub") -> None:
        self.algorithm = algorithm
        self._key = verifying_key(algorithm, key)
        self.role_claim = role_claim or "sub"

    def verify(self, token: str) -> VerifiedToken:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                self._key,
                algorithms=[self.algorithm],
                options={"verify_aud": False, "verify_iss": False},
            )
        except jwt.ExpiredSignatureError:
            raise TokenError("token expired") from None
        except jwt.InvalidAlgorithmError:
            raise TokenError(
                f"token algorithm {_header_alg(token)!r} is not allowed (expected {self.algorithm})"
            ) from None
        except jwt.InvalidSignatureError:
            raise TokenError("token signature is invalid") from None
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"invalid token: {exc}") from None
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise TokenError(f"token has no {self.role_claim!r} claim naming a role")
        exp = claims.get("exp")
        return VerifiedToken(role, float(exp) if isinstance(exp, (int, float)) else None, claims)


def _header_alg(token: str) -> str:
    try:
        return str(jwt.get_unverified_header(token).get("alg"))
    except jwt.InvalidTokenError:
        return "?"


def show(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, claims) of a token, unverified, as ``pulsar tokens show`` prints them."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise TokenError("a token has three dot-separated parts")
    try:
        header, claims = (json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2])
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokenError(f"malformed token: {exc}") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise TokenError("malformed token: header and claims must be JSON objects")
    return header, claims
