"""Where S3 credentials come from (Pulsar's order, then boto3's chain), and that the secret is never
shown: not by the credential object, not in an error, not in any log line, refused or accepted."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.support.seaweedfs import SeaweedFSProcess

from magnetar.offload.credentials import (
    SOURCE_DEFAULT_CHAIN,
    SOURCE_ENVIRONMENT,
    SOURCE_EXPLICIT,
    S3Credentials,
    resolve_s3_credentials,
)
from magnetar.offload.errors import InvalidOffloadConfig, ObjectStoreAccessDenied
from magnetar.offload.s3_store import MIN_BLOCK_SIZE, S3Store, S3StoreConfig

ENV_SECRET = "env-secret-value-9f8e7d"
FILE_SECRET = "file-secret-value-1a2b3c"


def credentials_file(tmp_path: Path, key_id: str, secret: str, profile: str = "default") -> Path:
    path = tmp_path / "credentials"
    path.write_text(f"[{profile}]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n")
    return path


def test_explicit_keys_come_first(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "env-id", "AWS_SECRET_ACCESS_KEY": ENV_SECRET}

    found = resolve_s3_credentials(
        credential_id="id",
        credential_secret="explicit-secret",
        credentials_file=credentials_file(tmp_path, "file-id", FILE_SECRET),
        environ=env,
    )

    assert (found.access_key_id, found.secret_access_key, found.source) == ("id", "explicit-secret", SOURCE_EXPLICIT)


def test_a_credentials_file_named_by_the_settings_comes_before_the_environment(tmp_path: Path) -> None:
    path = credentials_file(tmp_path, "file-id", FILE_SECRET, profile="offload")
    env = {"AWS_ACCESS_KEY_ID": "env-id", "AWS_SECRET_ACCESS_KEY": ENV_SECRET}

    found = resolve_s3_credentials(credentials_file=path, profile="offload", environ=env)

    assert (found.access_key_id, found.secret_access_key) == ("file-id", FILE_SECRET)
    assert str(path) in found.source and "offload" in found.source


def test_environment_keys_then_the_shared_credentials_file_then_boto3s_chain(tmp_path: Path) -> None:
    path = credentials_file(tmp_path, "file-id", FILE_SECRET)
    env = {"AWS_ACCESS_KEY_ID": "env-id", "AWS_SECRET_ACCESS_KEY": ENV_SECRET, "AWS_SHARED_CREDENTIALS_FILE": str(path)}

    from_env = resolve_s3_credentials(environ=env)
    from_shared_file = resolve_s3_credentials(environ={"AWS_SHARED_CREDENTIALS_FILE": str(path)})
    from_chain = resolve_s3_credentials(environ={})

    assert (from_env.secret_access_key, from_env.source) == (ENV_SECRET, SOURCE_ENVIRONMENT)
    assert from_shared_file.secret_access_key == FILE_SECRET and str(path) in from_shared_file.source
    assert from_chain == S3Credentials() and from_chain.source == SOURCE_DEFAULT_CHAIN


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"credential_id": "id"}, "s3ManagedLedgerOffloadCredentialSecret is missing"),
        ({"credential_secret": "s"}, "s3ManagedLedgerOffloadCredentialId is missing"),
        ({"environ": {"AWS_ACCESS_KEY_ID": "id"}}, "AWS_SECRET_ACCESS_KEY is missing from the environment"),
        ({"credentials_file": "/nonexistent/credentials"}, "'/nonexistent/credentials' .* does not exist"),
    ],
)
def test_a_named_but_unusable_source_is_one_clear_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidOffloadConfig, match=message) as raised:
        resolve_s3_credentials(**kwargs)  # type: ignore[arg-type]

    assert "\n" not in str(raised.value)


def test_a_credentials_file_without_the_profile_or_the_secret_is_refused(tmp_path: Path) -> None:
    path = credentials_file(tmp_path, "file-id", FILE_SECRET)
    no_secret = tmp_path / "no-secret"
    no_secret.write_text("[default]\naws_access_key_id = x\n")
    broken = tmp_path / "broken"
    broken.write_text(f"aws_secret_access_key = {FILE_SECRET}\n")  # no section header

    with pytest.raises(InvalidOffloadConfig, match="has no such profile"):
        resolve_s3_credentials(credentials_file=path, profile="other", environ={})
    with pytest.raises(InvalidOffloadConfig, match="lacks aws_secret_access_key"):
        resolve_s3_credentials(credentials_file=no_secret, environ={})
    with pytest.raises(InvalidOffloadConfig, match="not in the AWS INI format") as raised:
        resolve_s3_credentials(credentials_file=broken, environ={})
    assert FILE_SECRET not in str(raised.value)


def test_the_credential_object_masks_its_secret() -> None:
    credentials = S3Credentials("AKID", "very-secret", "session-token-xyz", source="s")

    for shown in (repr(credentials), str(credentials), f"{credentials}", repr([credentials])):
        assert "very-secret" not in shown and "session-token-xyz" not in shown
        assert "AKID" in shown


async def test_a_wrong_secret_is_access_denied_naming_the_source_and_never_the_secret(
    seaweedfs: SeaweedFSProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # botocore's request logging too
    wrong_secret = "wrong-secret-5e4d3c2b1a"
    config = S3StoreConfig(
        bucket=seaweedfs.bucket,
        region="us-east-1",
        endpoint=seaweedfs.endpoint,
        max_block_size=MIN_BLOCK_SIZE,
        max_attempts=1,
    )
    wrong_file = credentials_file(tmp_path, seaweedfs.access_key, wrong_secret)
    right_file = tmp_path / "right" / "credentials"
    right_file.parent.mkdir()
    right_file.write_text(
        f"[default]\naws_access_key_id = {seaweedfs.access_key}\naws_secret_access_key = {seaweedfs.secret_key}\n"
    )
    refused = S3Store(config, resolve_s3_credentials(credentials_file=wrong_file, environ={}))
    accepted = S3Store(config, resolve_s3_credentials(credentials_file=right_file, environ={}))
    try:
        for attempt in (refused.put("denied", b"x"), refused.read_all("denied"), refused.info("denied")):
            with pytest.raises(ObjectStoreAccessDenied) as raised:
                await attempt
            message = str(raised.value)
            assert str(wrong_file) in message, message
            assert wrong_secret not in message and "\n" not in message

        await accepted.put("accepted", b"y")
        assert await accepted.read_all("accepted") == b"y"
    finally:
        await refused.close()
        await accepted.close()

    assert any(r.name.startswith("botocore") for r in caplog.records), "botocore's request logging was captured"
    for secret in (wrong_secret, seaweedfs.secret_key):
        assert secret not in caplog.text
        assert all(secret not in repr(record.args) for record in caplog.records)
