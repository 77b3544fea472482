"""Pulsar's offload-policies JSON: field names and defaults, the round trip, each validation mistake
in one line, and the store the policies open (a real SeaweedFS bucket, a real directory)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.seaweedfs import SeaweedFSProcess

from magnetar.offload.errors import InvalidOffloadConfig
from magnetar.offload.filesystem_store import FileSystemStore
from magnetar.offload.s3_store import S3Store
from magnetar.offload.settings import OffloadPolicies, open_store

# Pulsar's OffloadPoliciesImpl defaults, as its admin API shows a policy with nothing set.
PULSAR_DEFAULTS: dict[str, Any] = {
    "offloadersDirectory": "./offloaders",
    "managedLedgerOffloadDriver": None,
    "managedLedgerOffloadMaxThreads": 2,
    "managedLedgerOffloadPrefetchRounds": 1,
    "managedLedgerOffloadThresholdInBytes": None,
    "managedLedgerOffloadThresholdInSeconds": None,
    "managedLedgerOffloadDeletionLagInMillis": None,
    "managedLedgerOffloadedReadPriority": "TIERED_STORAGE_FIRST",
    "s3ManagedLedgerOffloadRegion": None,
    "s3ManagedLedgerOffloadBucket": None,
    "s3ManagedLedgerOffloadServiceEndpoint": None,
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 64 * 1024 * 1024,
    "s3ManagedLedgerOffloadReadBufferSizeInBytes": 1024 * 1024,
    "s3ManagedLedgerOffloadCredentialId": None,
    "s3ManagedLedgerOffloadCredentialSecret": None,
    "s3ManagedLedgerOffloadRole": None,
    "s3ManagedLedgerOffloadRoleSessionName": "pulsar-s3-offload",
    "gcsManagedLedgerOffloadRegion": None,
    "gcsManagedLedgerOffloadBucket": None,
    "gcsManagedLedgerOffloadMaxBlockSizeInBytes": 64 * 1024 * 1024,
    "gcsManagedLedgerOffloadReadBufferSizeInBytes": 1024 * 1024,
    "gcsManagedLedgerOffloadServiceAccountKeyFile": None,
    "fileSystemProfilePath": None,
    "fileSystemURI": None,
    "managedLedgerOffloadBucket": None,
    "managedLedgerOffloadRegion": None,
    "managedLedgerOffloadServiceEndpoint": None,
    "managedLedgerOffloadMaxBlockSizeInBytes": None,
    "managedLedgerOffloadReadBufferSizeInBytes": None,
    "managedLedgerExtraConfigurations": {},
    "s3Driver": False,
    "gcsDriver": False,
    "fileSystemDriver": False,
}

S3_BODY: dict[str, Any] = {
    "managedLedgerOffloadDriver": "aws-s3",
    "s3ManagedLedgerOffloadBucket": "ledgers",
    "s3ManagedLedgerOffloadRegion": "eu-west-1",
    "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 8 * 1024 * 1024,
    "s3ManagedLedgerOffloadReadBufferSizeInBytes": 256 * 1024,
    "managedLedgerOffloadThresholdInBytes": 10 * 1024 * 1024,
    "managedLedgerOffloadDeletionLagInMillis": 3_600_000,
    "s3ManagedLedgerOffloadCredentialId": "AKID",
    "s3ManagedLedgerOffloadCredentialSecret": "policy-secret-77",
}


def test_an_empty_body_shows_pulsars_fields_and_defaults() -> None:
    assert OffloadPolicies.from_json("{}").to_dict() == PULSAR_DEFAULTS
    assert list(OffloadPolicies().to_dict()) == list(PULSAR_DEFAULTS)


def test_json_round_trip_keeps_every_field() -> None:
    policies = OffloadPolicies.from_dict(S3_BODY)

    again = OffloadPolicies.from_json(policies.to_json(include_secret=True))

    assert again == policies
    assert again.to_dict(include_secret=True) == {**PULSAR_DEFAULTS, **S3_BODY, "s3Driver": True}
    assert (again.bucket, again.region, again.max_block_size, again.read_buffer_size) == (
        "ledgers",
        "eu-west-1",
        8 * 1024 * 1024,
        256 * 1024,
    )
    assert (again.threshold_in_bytes, again.deletion_lag_ms) == (10 * 1024 * 1024, 3_600_000)


def test_the_derived_driver_flags_are_written_and_ignored_when_read() -> None:
    body = {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "file:///offload", "s3Driver": True}

    policies = OffloadPolicies.from_dict(body)

    shown = policies.to_dict()
    assert (shown["s3Driver"], shown["fileSystemDriver"], shown["gcsDriver"]) == (False, True, False)


def test_the_secret_is_masked_when_shown() -> None:
    policies = OffloadPolicies.from_dict(S3_BODY)

    assert policies.to_dict()["s3ManagedLedgerOffloadCredentialSecret"] == "****"
    assert "policy-secret-77" not in policies.to_json()
    assert "policy-secret-77" not in repr(policies) and "policy-secret-77" not in str(policies)


def test_the_generic_fields_win_over_the_s3_ones() -> None:
    policies = OffloadPolicies.from_dict(
        {
            **S3_BODY,
            "managedLedgerOffloadBucket": "generic",
            "managedLedgerOffloadRegion": "us-east-2",
            "managedLedgerOffloadServiceEndpoint": "http://store:9000",
            "managedLedgerOffloadMaxBlockSizeInBytes": 16 * 1024 * 1024,
            "managedLedgerOffloadReadBufferSizeInBytes": 4096,
        }
    )

    assert (policies.bucket, policies.region, policies.service_endpoint) == (
        "generic",
        "us-east-2",
        "http://store:9000",
    )
    assert (policies.max_block_size, policies.read_buffer_size) == (16 * 1024 * 1024, 4096)


def test_driver_names_are_case_insensitive_as_in_pulsar() -> None:
    policies = OffloadPolicies.from_dict({**S3_BODY, "managedLedgerOffloadDriver": "s3"}).replace(
        s3ManagedLedgerOffloadServiceEndpoint="http://store:9000"
    )

    assert policies.is_s3_driver and policies.problems() == []


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            {"managedLedgerOffloadDriver": "tape"},
            "managedLedgerOffloadDriver 'tape' is unknown; supported: aws-s3, S3, filesystem",
        ),
        (
            {"managedLedgerOffloadDriver": "google-cloud-storage", "gcsManagedLedgerOffloadBucket": "b"},
            "managedLedgerOffloadDriver 'google-cloud-storage' is not supported by Magnetar; "
            "supported: aws-s3, S3, filesystem",
        ),
        (
            {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadRegion": "eu-west-1"},
            "s3ManagedLedgerOffloadBucket (or managedLedgerOffloadBucket) is required for driver 'aws-s3'",
        ),
        (
            {"managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadBucket": "b"},
            "s3ManagedLedgerOffloadServiceEndpoint (or managedLedgerOffloadServiceEndpoint) is required "
            "for driver 'S3' (an S3-compatible store)",
        ),
        (
            {"managedLedgerOffloadDriver": "aws-s3", "s3ManagedLedgerOffloadBucket": "b"},
            "s3ManagedLedgerOffloadRegion or s3ManagedLedgerOffloadServiceEndpoint is required for driver 'aws-s3'",
        ),
        (
            {**S3_BODY, "s3ManagedLedgerOffloadCredentialSecret": None},
            "s3ManagedLedgerOffloadCredentialId and s3ManagedLedgerOffloadCredentialSecret go together",
        ),
        ({"managedLedgerOffloadDriver": "filesystem"}, "fileSystemURI is required for driver 'filesystem'"),
        (
            {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": "hdfs://nn/offload"},
            "fileSystemURI 'hdfs://nn/offload': only file:// URIs and plain paths are supported",
        ),
        (
            {**S3_BODY, "s3ManagedLedgerOffloadMaxBlockSizeInBytes": -1},
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes must be at least 5242880 (5 MiB, S3's smallest part), not -1",
        ),
        (
            {**S3_BODY, "s3ManagedLedgerOffloadReadBufferSizeInBytes": 0},
            "s3ManagedLedgerOffloadReadBufferSizeInBytes must be positive, not 0",
        ),
        (
            {**S3_BODY, "managedLedgerOffloadMaxThreads": -2},
            "managedLedgerOffloadMaxThreads must be positive, not -2",
        ),
        (
            {**S3_BODY, "managedLedgerOffloadDeletionLagInMillis": -5},
            "managedLedgerOffloadDeletionLagInMillis must not be negative, not -5",
        ),
        (
            {**S3_BODY, "managedLedgerOffloadedReadPriority": "fastest"},
            "managedLedgerOffloadedReadPriority 'fastest' is unknown; one of: tiered-storage-first, bookkeeper-first",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_the_field(body: dict[str, Any], line: str) -> None:
    policies = OffloadPolicies.from_dict(body)

    assert policies.problems() == [line]
    with pytest.raises(InvalidOffloadConfig) as raised:
        policies.validate()
    assert str(raised.value) == line


def test_every_mistake_is_reported_at_once() -> None:
    policies = OffloadPolicies.from_dict(
        {"managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadReadBufferSizeInBytes": -1}
    )

    assert len(policies.problems()) == 3  # no bucket, no endpoint, negative buffer


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"managedLedgerOffloadBuckett": "b"}, "unknown field 'managedLedgerOffloadBuckett'"),
        (
            {"managedLedgerOffloadThresholdInBytes": "10M"},
            'managedLedgerOffloadThresholdInBytes must be an integer, not "10M"',
        ),
        ({"managedLedgerOffloadMaxThreads": True}, "managedLedgerOffloadMaxThreads must be an integer, not true"),
        ({"fileSystemURI": 5}, "fileSystemURI must be a string, not 5"),
    ],
)
def test_unknown_and_mistyped_fields_are_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOffloadConfig) as raised:
        OffloadPolicies.from_json(json.dumps(body))
    assert str(raised.value) == message


def test_a_body_that_is_not_a_json_object_is_refused() -> None:
    with pytest.raises(InvalidOffloadConfig, match="not valid JSON"):
        OffloadPolicies.from_json("{")
    with pytest.raises(InvalidOffloadConfig, match="must be a JSON object, not list"):
        OffloadPolicies.from_json("[]")


def test_open_store_refuses_policies_without_a_driver() -> None:
    with pytest.raises(InvalidOffloadConfig, match="managedLedgerOffloadDriver is not set"):
        open_store(OffloadPolicies())


async def test_open_store_filesystem(tmp_path: Path) -> None:
    policies = OffloadPolicies.from_dict(
        {"managedLedgerOffloadDriver": "filesystem", "fileSystemURI": f"file://{tmp_path}/offload"}
    )

    store = open_store(policies)

    assert isinstance(store, FileSystemStore) and store.root == tmp_path / "offload"
    await store.put("ledger/1", b"data")
    assert (tmp_path / "offload" / "ledger" / "1").read_bytes() == b"data"


async def test_open_store_s3_with_the_policies_credentials(seaweedfs: SeaweedFSProcess) -> None:
    policies = OffloadPolicies.from_dict(
        {
            "managedLedgerOffloadDriver": "S3",
            "s3ManagedLedgerOffloadBucket": "policies-bucket",
            "s3ManagedLedgerOffloadServiceEndpoint": seaweedfs.endpoint,
            "s3ManagedLedgerOffloadRegion": "us-east-1",
            "s3ManagedLedgerOffloadCredentialId": seaweedfs.access_key,
            "s3ManagedLedgerOffloadCredentialSecret": seaweedfs.secret_key,
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes": 5 * 1024 * 1024,
        }
    )

    store = open_store(policies, create_bucket_if_missing=True)
    try:
        assert isinstance(store, S3Store)
        assert store.config.max_block_size == 5 * 1024 * 1024 and store.config.path_style is None
        await store.put("ledger/1", b"data")
        assert await store.read_all("ledger/1") == b"data"
        assert "policies-bucket" in store.location
    finally:
        await store.close()
