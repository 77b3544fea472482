"""The ``MetadataStore`` contract, run against every implementation (see conftest.py).

Each test is named after the rule it checks; the rules are the docstrings of
``magnetar.metadata.store``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from magnetar.metadata.store import ANY_VERSION, MUST_NOT_EXIST, MetadataStore, Notification
from magnetar.protocol.errors import BadVersion, NotFound

from .conftest import StoreBackend


async def test_get_of_a_missing_key_is_none(store: MetadataStore) -> None:
    assert await store.get("/nothing/here") is None
    assert not await store.exists("/nothing/here")


async def test_put_then_get_returns_value_and_version(store: MetadataStore) -> None:
    stat = await store.put("/a", b"one")
    got = await store.get("/a")
    assert got is not None
    assert got.value == b"one"
    assert got.version == stat.version
    assert not got.stat.ephemeral
    assert await store.exists("/a")


async def test_every_write_increases_the_version(store: MetadataStore) -> None:
    v1 = (await store.put("/a", b"1")).version
    v2 = (await store.put("/a", b"2")).version
    v3 = (await store.put("/a", b"3", v2)).version
    assert v1 < v2 < v3


async def test_cas_with_the_current_version_succeeds(store: MetadataStore) -> None:
    stat = await store.put("/a", b"1")
    new = await store.put("/a", b"2", stat.version)
    got = await store.get("/a")
    assert got is not None and got.value == b"2" and got.version == new.version


async def test_cas_with_a_stale_version_fails_and_changes_nothing(store: MetadataStore) -> None:
    old = await store.put("/a", b"1")
    await store.put("/a", b"2", old.version)
    with pytest.raises(BadVersion):
        await store.put("/a", b"3", old.version)
    got = await store.get("/a")
    assert got is not None and got.value == b"2"


async def test_cas_on_a_missing_key_fails(store: MetadataStore) -> None:
    with pytest.raises(BadVersion):
        await store.put("/a", b"1", 0)
    assert await store.get("/a") is None


async def test_create_only_succeeds_once(store: MetadataStore) -> None:
    await store.put("/a", b"first", MUST_NOT_EXIST)
    with pytest.raises(BadVersion):
        await store.put("/a", b"second", MUST_NOT_EXIST)
    got = await store.get("/a")
    assert got is not None and got.value == b"first"


async def test_racing_creates_have_exactly_one_winner(store: MetadataStore) -> None:
    results = await asyncio.gather(
        *(store.put("/owner", str(i).encode(), MUST_NOT_EXIST) for i in range(10)), return_exceptions=True
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, BadVersion) for r in results if isinstance(r, BaseException))


async def test_delete_of_a_missing_key_raises_not_found(store: MetadataStore) -> None:
    with pytest.raises(NotFound):
        await store.delete("/a")


async def test_delete_with_a_wrong_version_fails_and_keeps_the_key(store: MetadataStore) -> None:
    stat = await store.put("/a", b"1")
    with pytest.raises(BadVersion):
        await store.delete("/a", stat.version + 1000)
    assert await store.exists("/a")
    await store.delete("/a", stat.version)
    assert not await store.exists("/a")


async def test_delete_any_version(store: MetadataStore) -> None:
    await store.put("/a", b"1")
    await store.delete("/a", ANY_VERSION)
    assert await store.get("/a") is None


async def test_a_recreated_key_never_reuses_an_old_version(store: MetadataStore) -> None:
    old = await store.put("/a", b"1")
    await store.delete("/a")
    new = await store.put("/a", b"2")
    assert new.version != old.version
    with pytest.raises(BadVersion):
        await store.put("/a", b"3", old.version)


async def test_children_are_direct_sorted_unique_and_implicit(store: MetadataStore) -> None:
    for path in ["/t/b", "/t/a/x/y", "/t/a/z", "/t/c", "/t/a", "/t/a-1", "/tx/q", "/t"]:
        await store.put(path, b"")
    assert await store.children("/t") == ["a", "a-1", "b", "c"]
    assert await store.children("/t/a") == ["x", "z"]
    assert await store.children("/t/a/x") == ["y"]
    assert await store.children("/t/b") == []
    assert await store.children("/missing") == []
    assert await store.children("/") == ["t", "tx"]


async def test_children_follow_deletes(store: MetadataStore) -> None:
    await store.put("/t/a/deep", b"")
    await store.put("/t/b", b"")
    await store.delete("/t/a/deep")
    assert await store.children("/t") == ["b"]


async def test_invalid_paths_are_refused(store: MetadataStore) -> None:
    for bad in ["relative", "/trailing/", "/double//slash", ""]:
        with pytest.raises(ValueError):
            await store.put(bad, b"")


class _Recorder:
    """Collects notifications and lets a test await the n-th one instead of sleeping."""

    def __init__(self) -> None:
        self.events: list[Notification] = []
        self._changed = asyncio.Event()

    def __call__(self, note: Notification) -> None:
        self.events.append(note)
        self._changed.set()

    async def wait_for(self, count: int) -> list[Notification]:
        async with asyncio.timeout(5):
            while len(self.events) < count:
                self._changed.clear()
                await self._changed.wait()
        return self.events


async def wait_until_gone(store: MetadataStore, path: str, *, within: float) -> None:
    """Await the deletion of ``path`` through a watch (no polling); fail if it outlives ``within``
    seconds plus a second of slack for the store to notice."""
    gone = asyncio.Event()
    unsubscribe = store.watch(path, lambda note: gone.set() if note.kind == "delete" else None)
    try:
        if not await store.exists(path):  # checked after subscribing, so a deletion can't slip between
            return
        async with asyncio.timeout(within + 1.0):
            await gone.wait()
        assert not await store.exists(path)
    finally:
        unsubscribe()


async def test_watch_reports_puts_and_deletes_at_and_below_the_prefix(store: MetadataStore) -> None:
    rec = _Recorder()
    store.watch("/a", rec)
    await store.put("/ab", b"not mine")  # a sibling that merely shares the string prefix
    await store.put("/a", b"1")
    await store.put("/a/b/c", b"2")
    await store.delete("/a/b/c")
    events = await rec.wait_for(3)
    assert events == [
        Notification("put", "/a"),
        Notification("put", "/a/b/c"),
        Notification("delete", "/a/b/c"),
    ]


async def test_watch_callback_sees_the_committed_value(store: MetadataStore) -> None:
    seen: list[bytes | None] = []
    done = asyncio.Event()

    def on_change(note: Notification) -> None:
        async def read() -> None:
            got = await store.get(note.path)
            seen.append(got.value if got else None)
            done.set()

        asyncio.get_running_loop().create_task(read())

    store.watch("/k", on_change)
    await store.put("/k", b"v")
    async with asyncio.timeout(5):
        await done.wait()
    assert seen == [b"v"]


async def test_unsubscribed_watch_hears_nothing(store: MetadataStore) -> None:
    gone = _Recorder()
    kept = _Recorder()
    unsubscribe = store.watch("/a", gone)
    store.watch("/a", kept)
    unsubscribe()
    await store.put("/a", b"1")
    await kept.wait_for(1)
    assert gone.events == []


async def test_ephemeral_keys_vanish_on_close_and_watchers_hear_it(backend: StoreBackend) -> None:
    store = await backend.fresh()
    rec = _Recorder()
    store.watch("/bookies", rec)
    stat = await store.put("/bookies/available/b1", b"addr", ephemeral=True)
    await store.put("/bookies/cookies/b1", b"cookie")
    assert stat.ephemeral
    got = await store.get("/bookies/available/b1")
    assert got is not None and got.stat.ephemeral
    await store.close()
    events = await rec.wait_for(3)
    assert Notification("delete", "/bookies/available/b1") in events
    reopened = await backend.reopen()
    try:
        assert await reopened.get("/bookies/available/b1") is None
        assert await reopened.get("/bookies/cookies/b1") is not None
    finally:
        await reopened.close()


async def test_overwriting_an_ephemeral_key_with_a_persistent_one_keeps_it(backend: StoreBackend) -> None:
    store = await backend.fresh()
    await store.put("/k", b"e", ephemeral=True)
    await store.put("/k", b"p")
    await store.close()
    reopened = await backend.reopen()
    try:
        got = await reopened.get("/k")
        assert got is not None and got.value == b"p" and not got.stat.ephemeral
    finally:
        await reopened.close()


async def test_ephemeral_keys_of_a_killed_session_are_gone_after_reopen(backend: StoreBackend) -> None:
    first = await backend.fresh()
    await first.close()  # the child opens the same data; this store must not hold it meanwhile
    child = backend.child_prelude() + textwrap.dedent(
        """
        import asyncio, os, signal
        async def main():
            store = await open_store()
            await store.put("/ownership/t/ns/0x0", b"broker-1", ephemeral=True)
            await store.put("/tenants/t", b"persistent")
            print("written", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        asyncio.run(main())
        """
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", child, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == -9, err.decode()
    assert out == b"written\n"
    reopened = await backend.reopen()
    try:
        # LMDB deletes them on open; etcd once the dead session's lease expires (within its TTL).
        await wait_until_gone(reopened, "/ownership/t/ns/0x0", within=backend.session_timeout)
        got = await reopened.get("/tenants/t")
        assert got is not None and got.value == b"persistent"
    finally:
        await reopened.close()


async def test_data_persists_across_reopen(backend: StoreBackend) -> None:
    store = await backend.fresh()
    stat = await store.put("/ledgers/1", b"meta")
    await store.increment("/counters/ledger-id")
    await store.close()
    reopened = await backend.reopen()
    try:
        got = await reopened.get("/ledgers/1")
        assert got is not None and got.value == b"meta" and got.version == stat.version
        await reopened.put("/ledgers/1", b"meta2", stat.version)  # CAS still works after reopen
        assert await reopened.increment("/counters/ledger-id") == 2
    finally:
        await reopened.close()


async def test_concurrent_increments_hand_out_distinct_values(store: MetadataStore) -> None:
    values = await asyncio.gather(*(store.increment("/counters/ledger-id") for _ in range(40)))
    assert sorted(values) == list(range(1, 41))
    got = await store.get("/counters/ledger-id")
    assert got is not None and got.value == b"40"


async def test_increment_of_a_non_counter_fails(store: MetadataStore) -> None:
    await store.put("/counters/x", b"not a number")
    with pytest.raises(ValueError):
        await store.increment("/counters/x")
