"""The object-store contract, run over both drivers (S3 on a real SeaweedFS, and the filesystem),
and each driver's own failure behaviour: a stopped store, a crash in the middle of a write."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from tests.offload.conftest import PrefixedStore, require_weed, s3_store_for
from tests.support.polling import wait_for
from tests.support.seaweedfs import SeaweedFSProcess, run_seaweedfs

from magnetar.offload.blob_store import CRC32C_METADATA_KEY, put_verified, stored_crc32c, verify_object
from magnetar.offload.errors import CorruptObject, ObjectNotFound, ObjectStoreUnavailable
from magnetar.offload.filesystem_store import TEMP_PREFIX, FileSystemStore
from magnetar.offload.s3_store import MIN_BLOCK_SIZE
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import RetryableError

REPO = Path(__file__).resolve().parents[2]


async def test_put_info_read_list_delete(any_store: PrefixedStore) -> None:
    store, key = any_store.store, any_store.key("ledger-1")
    data = os.urandom(300_000)  # several read buffers

    info = await store.put(key, data, {"ledger-id": "1"})

    assert info.size == len(data)
    assert info.metadata["ledger-id"] == "1"
    again = await store.info(key)
    assert again is not None and again.size == len(data) and again.metadata["ledger-id"] == "1"
    assert await store.read_all(key) == data
    assert await store.read(key, 0, 10) == data[:10]
    assert await store.read(key, 65_530, 200_007) == data[65_530:200_007]
    assert await store.read(key, 299_990, 400_000) == data[299_990:]  # cut at the end
    assert await store.read(key, 5, 5) == b""
    assert await store.read(key, 400_000, 400_010) == b""  # wholly past the end
    assert await store.list(any_store.prefix) == [key]

    await store.delete(key)

    assert await store.info(key) is None
    assert await store.list(any_store.prefix) == []


async def test_list_returns_only_keys_under_the_prefix_sorted(any_store: PrefixedStore) -> None:
    store = any_store.store
    for name in ("b/2", "a/1", "b/1", "c"):
        await store.put(any_store.key(name), name.encode())

    assert await store.list(any_store.key("b/")) == [any_store.key("b/1"), any_store.key("b/2")]
    assert await store.list(any_store.key("b")) == [any_store.key("b/1"), any_store.key("b/2")]
    assert await store.list(any_store.key("x/")) == []
    assert await store.list(any_store.prefix) == [any_store.key(n) for n in ("a/1", "b/1", "b/2", "c")]


async def test_an_absent_object_is_not_found_and_deleting_it_is_fine(any_store: PrefixedStore) -> None:
    store, key = any_store.store, any_store.key("absent")

    assert await store.info(key) is None
    await store.put(any_store.key("file"), b"a file, not a directory")
    assert await store.info(any_store.key("file/below")) is None
    with pytest.raises(ObjectNotFound, match="absent"):
        await store.read(key, 0, 10)
    with pytest.raises(ObjectNotFound):
        await store.read_all(key)
    await store.delete(key)


async def test_a_put_replaces_the_object_and_its_metadata(any_store: PrefixedStore) -> None:
    store, key = any_store.store, any_store.key("replaced")
    await store.put(key, b"first", {"v": "1"})

    await store.put(key, b"second!", {"v": "2"})

    info = await store.info(key)
    assert info is not None and info.size == 7 and info.metadata["v"] == "2"
    assert await store.read_all(key) == b"second!"


async def test_an_object_of_several_max_block_size_parts_reads_back_byte_exact(
    any_store: PrefixedStore, tmp_path: Path
) -> None:
    store, key = any_store.store, any_store.key("big")
    data = os.urandom(2 * MIN_BLOCK_SIZE + 12_345)  # three parts of the 5 MiB block size
    source = tmp_path / "big.bin"
    source.write_bytes(data)

    info = await store.put(key, source, {"kind": "ledger"})

    assert info.size == len(data)
    assert await store.read_all(key) == data
    boundary = MIN_BLOCK_SIZE
    assert await store.read(key, boundary - 1000, boundary + 1000) == data[boundary - 1000 : boundary + 1000]
    if any_store.driver == "s3":
        assert info.etag.endswith("-3"), f"expected a 3-part multipart upload, ETag {info.etag}"


async def test_a_readable_stream_is_stored_whole(any_store: PrefixedStore, tmp_path: Path) -> None:
    store, key = any_store.store, any_store.key("streamed")
    data = os.urandom(MIN_BLOCK_SIZE + 777)
    (tmp_path / "s.bin").write_bytes(data)

    with (tmp_path / "s.bin").open("rb") as stream:
        await store.put(key, stream)

    assert await store.read_all(key) == data


async def test_put_verified_records_the_crc32c_and_checks_it(any_store: PrefixedStore) -> None:
    store, key = any_store.store, any_store.key("verified")
    data = os.urandom(200_000)

    info = await put_verified(store, key, data, {"ledger-id": "7"})

    assert info.size == len(data)
    assert stored_crc32c(info) == crc32c(data)
    assert info.metadata[CRC32C_METADATA_KEY] == str(crc32c(data))
    assert info.metadata["ledger-id"] == "7"
    assert (await verify_object(store, key, len(data), crc32c(data))).size == len(data)


@pytest.mark.parametrize("altered", ["same size, other bytes", "truncated"])
async def test_put_verified_detects_an_object_altered_before_the_read_back(
    any_store: PrefixedStore, altered: str
) -> None:
    store, key = any_store.store, any_store.key("altered")
    data = os.urandom(150_000)
    other = bytes(b ^ 0x01 for b in data[:10]) + data[10:] if altered.startswith("same") else data[:-1]

    async def alter() -> None:
        await store.put(key, other)

    with pytest.raises(CorruptObject, match="altered"):
        await put_verified(store, key, data, before_verify=alter)

    assert await store.info(key) is None, "the bad object must be deleted"


async def test_create_bucket_if_missing(seaweedfs: SeaweedFSProcess) -> None:
    bucket = f"created-{uuid.uuid4().hex[:10]}"
    plain = s3_store_for(seaweedfs, bucket=bucket)
    creating = s3_store_for(seaweedfs, bucket=bucket, create_bucket=True)
    try:
        with pytest.raises(ObjectNotFound, match="bucket does not exist"):
            await plain.read_all("k")

        await creating.put("k", b"v")

        assert await plain.read_all("k") == b"v"
    finally:
        await plain.close()
        await creating.close()


async def test_a_stopped_s3_store_is_unavailable_in_bounded_time_then_works_after_restart(tmp_path: Path) -> None:
    require_weed()
    with run_seaweedfs(tmp_path / "weed") as weed:
        store = s3_store_for(weed, read_timeout=1.0)
        try:
            await store.put("kept", b"before the outage")

            weed.pause()  # connections are accepted, nothing answers
            started = time.monotonic()
            with pytest.raises(ObjectStoreUnavailable, match="ReadTimeoutError"):
                await store.read_all("kept")
            assert time.monotonic() - started < 15
            weed.resume()
            assert await store.read_all("kept") == b"before the outage"

            weed.kill9()

            for attempt in (store.read_all("kept"), store.put("new", b"during"), store.info("kept")):
                started = time.monotonic()
                with pytest.raises(ObjectStoreUnavailable, match="unreachable") as raised:
                    await attempt
                assert time.monotonic() - started < 20
                assert isinstance(raised.value, RetryableError)

            weed.restart()

            assert await store.read_all("kept") == b"before the outage"
            await store.put("new", b"after")
            assert await store.read_all("new") == b"after"
        finally:
            await store.close()


_WRITER = """
import asyncio, sys
from magnetar.offload.filesystem_store import FileSystemStore
asyncio.run(FileSystemStore(sys.argv[1]).put("ledgers/7", sys.stdin.buffer, {"ledger-id": "7"}))
"""


async def test_filesystem_crash_during_a_write_leaves_no_object_under_the_key(tmp_path: Path) -> None:
    root = tmp_path / "offload"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "services"), os.environ.get("PYTHONPATH", "")]))
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, str(root), stdin=asyncio.subprocess.PIPE, env=env
    )
    try:
        assert writer.stdin is not None
        writer.stdin.write(os.urandom(3 * 1024 * 1024))
        await writer.stdin.drain()

        def partial_temp_file() -> bool:
            temps = list((root / "ledgers").glob(f"{TEMP_PREFIX}7.*")) if (root / "ledgers").is_dir() else []
            return any(t.stat().st_size >= 2 * 1024 * 1024 for t in temps)

        wait_for("the writer's temporary file to hold 2 MiB", partial_temp_file)
    finally:
        if writer.returncode is None:
            writer.kill()
        await writer.wait()

    store = FileSystemStore(root)
    assert await store.info("ledgers/7") is None
    assert await store.list() == []
    with pytest.raises(ObjectNotFound):
        await store.read_all("ledgers/7")
    assert not (root / "ledgers" / "7").exists()
    # the next write of the key succeeds over the leftovers
    await store.put("ledgers/7", b"whole")
    assert await store.read_all("ledgers/7") == b"whole"
    assert await store.list() == ["ledgers/7"]
