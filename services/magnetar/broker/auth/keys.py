"""Token keys: moved to ``magnetar.security.keys`` (bookies verify tokens too); re-exported here."""

from magnetar.security.keys import (
    EC_CURVES,
    HMAC_ALGORITHMS,
    RSA_ALGORITHMS,
    InvalidKey,
    new_key_pair,
    new_secret_key,
    private_key,
    public_key,
    read_key,
)

__all__ = [
    "EC_CURVES",
    "HMAC_ALGORITHMS",
    "RSA_ALGORITHMS",
    "InvalidKey",
    "new_key_pair",
    "new_secret_key",
    "private_key",
    "public_key",
    "read_key",
]
