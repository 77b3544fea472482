"""JWT signing and verification: moved to ``magnetar.security.tokens`` (bookies verify tokens too);
re-exported here so ``magnetar.broker.auth.tokens`` keeps working."""

from magnetar.security.tokens import (
    TokenError,
    TokenVerifier,
    VerifiedToken,
    create_token,
    parse_relative_time,
    show,
    signing_key,
    verifying_key,
)

__all__ = [
    "TokenError",
    "TokenVerifier",
    "VerifiedToken",
    "create_token",
    "parse_relative_time",
    "show",
    "signing_key",
    "verifying_key",
]
