"""Where S3 credentials come from, and the credentials themselves, whose secret nothing shows.

The order follows Pulsar's S3 offloader, with boto3's own chain last:

1. ``s3ManagedLedgerOffloadCredentialId`` / ``s3ManagedLedgerOffloadCredentialSecret`` given explicitly
   (the offload policies or the broker's settings);
2. a credentials file in the AWS shared-credentials format named by the settings (a Kubernetes Secret
   mounted as a file is one);
3. ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (``AWS_SESSION_TOKEN``) in the environment (a
   Secret exposed as environment variables);
4. the file named by ``AWS_SHARED_CREDENTIALS_FILE``;
5. boto3's default chain (``~/.aws/credentials``, instance or pod identity, ...), resolved by boto3.

``S3Credentials`` keeps where they came from in ``source``: error messages name the source, never
the values. Its ``repr``/``str`` mask the secret and the session token, so a credential object
logged by mistake, or shown in a traceback, gives nothing away.
"""

from __future__ import annotations

import configparser
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.offload.errors import InvalidOffloadConfig

log = logging.getLogger(__name__)

SOURCE_DEFAULT_CHAIN = "boto3's default credential chain"
SOURCE_EXPLICIT = "s3ManagedLedgerOffloadCredentialId/s3ManagedLedgerOffloadCredentialSecret"
SOURCE_ENVIRONMENT = "the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"


@dataclass(frozen=True)
class S3Credentials:
    """An access key and its secret (both None: boto3's default chain finds them), and their source."""

    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    source: str = SOURCE_DEFAULT_CHAIN

    def __repr__(self) -> str:
        secret = "****" if self.secret_access_key else None
        token = "****" if self.session_token else None
        return (
            f"S3Credentials(access_key_id={self.access_key_id!r}, secret_access_key={secret!r}, "
            f"session_token={token!r}, source={self.source!r})"
        )

    __str__ = __repr__


def resolve_s3_credentials(
    *,
    credential_id: str | None = None,
    credential_secret: str | None = None,
    credentials_file: str | Path | None = None,
    profile: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> S3Credentials:
    """The S3 credentials by the order above; ``InvalidOffloadConfig`` if a named source is unusable.

    A source that is named but broken (an id without its secret, a credentials file that is missing
    or lacks the profile) is an error, not a reason to fall through to the next source: falling
    through would hide the mistake behind an "access denied" later, or use credentials nobody meant.
    """
    env = os.environ if environ is None else environ
    if credential_id or credential_secret:
        if not (credential_id and credential_secret):
            missing = (
                "s3ManagedLedgerOffloadCredentialSecret" if credential_id else "s3ManagedLedgerOffloadCredentialId"
            )
            raise InvalidOffloadConfig(f"S3 credentials: {missing} is missing (both the id and the secret are needed)")
        return _chosen(S3Credentials(credential_id, credential_secret, source=SOURCE_EXPLICIT))
    chosen_profile = profile or env.get("AWS_PROFILE") or "default"
    if credentials_file:
        return _chosen(_from_file(Path(credentials_file), chosen_profile))
    key_id, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if key_id or secret:
        if not (key_id and secret):
            missing = "AWS_SECRET_ACCESS_KEY" if key_id else "AWS_ACCESS_KEY_ID"
            raise InvalidOffloadConfig(f"S3 credentials: {missing} is missing from the environment")
        token = env.get("AWS_SESSION_TOKEN") or None
        return _chosen(S3Credentials(key_id, secret, token, source=SOURCE_ENVIRONMENT))
    shared = env.get("AWS_SHARED_CREDENTIALS_FILE")
    if shared:
        return _chosen(_from_file(Path(shared), chosen_profile))
    return _chosen(S3Credentials())


def _from_file(path: Path, profile: str) -> S3Credentials:
    """Read one profile of an AWS shared-credentials file (INI: ``aws_access_key_id`` and so on)."""
    source = f"credentials file {str(path)!r} [profile {profile!r}]"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with path.open() as f:
            parser.read_file(f)
    except FileNotFoundError:
        raise InvalidOffloadConfig(f"S3 credentials: {source} does not exist") from None
    except PermissionError:
        raise InvalidOffloadConfig(f"S3 credentials: {source} is not readable by the broker") from None
    except configparser.Error as e:
        # configparser's message quotes the offending line, which may hold the secret: name only its type
        raise InvalidOffloadConfig(
            f"S3 credentials: {source} is not in the AWS INI format ({type(e).__name__})"
        ) from None
    if not parser.has_section(profile):
        raise InvalidOffloadConfig(f"S3 credentials: {source} has no such profile")
    section = parser[profile]
    key_id = section.get("aws_access_key_id", "").strip()
    secret = section.get("aws_secret_access_key", "").strip()
    if not key_id or not secret:
        missing = "aws_secret_access_key" if key_id else "aws_access_key_id"
        raise InvalidOffloadConfig(f"S3 credentials: {source} lacks {missing}")
    token = section.get("aws_session_token", "").strip() or None
    return S3Credentials(key_id, secret, token, source=source)


def _chosen(credentials: S3Credentials) -> S3Credentials:
    log.info("S3 offload credentials from %s", credentials.source)
    return credentials
