"""S3 credentials, and where they came from (the only part of them any message may name).

The secret never appears in ``repr`` or ``str`` of ``S3Credentials``, so a credential object logged
by mistake, or shown in a traceback's locals, gives nothing away.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where the credentials came from, as messages name it.
SOURCE_DEFAULT_CHAIN = "boto3's default credential chain"


@dataclass(frozen=True)
class S3Credentials:
    """An access key and its secret (both None: boto3's default chain finds them), and their source."""

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    source: str = SOURCE_DEFAULT_CHAIN

    def __repr__(self) -> str:
        secret = "****" if self.secret_access_key else None
        return (
            f"S3Credentials(access_key_id={self.access_key_id!r}, secret_access_key={secret!r}, source={self.source!r})"
        )

    __str__ = __repr__
