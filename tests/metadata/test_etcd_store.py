"""Behaviour of the etcd store beyond the shared contract: sessions as leases (expiry after a
kill -9 or a SIGSTOP, loss detected by the owner), watches across processes, failover between
endpoints, survival of an etcd crash, prefixes, and the metadata URL.

Everything runs against real etcd processes and real child Python processes; waits are on watch
notifications or on the store's ``session_lost`` event, bounded by the lease TTL.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from tests.support.etcd import EtcdProcess, run_etcd

from magnetar.metadata.etcd_gateway import JsonLines
from magnetar.metadata.etcd_store import EtcdMetadataStore, SessionLost, parse_etcd_url
from magnetar.metadata.lmdb_store import LmdbMetadataStore
from magnetar.metadata.store import MUST_NOT_EXIST, Notification
from magnetar.metadata.url import open_metadata_store

TTL = 2.0  # etcd's smallest useful lease with its default election timeout
SLACK = 1.5  # etcd checks for expired leases every 500 ms; a loaded machine adds some more


@pytest.fixture
def prefix() -> str:
    return f"/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def etcd_store(etcd_server: EtcdProcess, prefix: str) -> AsyncIterator[EtcdMetadataStore]:
    s = await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=TTL)
    try:
        yield s
    finally:
        await s.close()


class Events:
    """A watch callback that lets the test await a particular notification."""

    def __init__(self) -> None:
        self.seen: list[Notification] = []
        self._changed = asyncio.Event()

    def __call__(self, note: Notification) -> None:
        self.seen.append(note)
        self._changed.set()

    async def wait_for(self, note: Notification, within: float, *, times: int = 1) -> float:
        """Wait until ``note`` has arrived ``times`` times; return when (``time.monotonic()``)."""
        async with asyncio.timeout(within):
            while self.seen.count(note) < times:
                self._changed.clear()
                await self._changed.wait()
        return time.monotonic()


async def spawn_child(etcd: EtcdProcess, prefix: str, body: str) -> asyncio.subprocess.Process:
    """A Python child that opens its own store (its own lease) on ``prefix`` and runs ``body``."""
    source = (
        textwrap.dedent(
            f"""
        import asyncio, os, signal, sys
        from magnetar.metadata.etcd_store import EtcdMetadataStore
        async def main():
            store = await EtcdMetadataStore.connect({etcd.url!r}, prefix={prefix!r}, lease_ttl={TTL!r})
        """
        )
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\nasyncio.run(main())\n"
    )
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", source, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


async def read_line(proc: asyncio.subprocess.Process, within: float = 15.0) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(within):
        line = await proc.stdout.readline()
    if not line:
        assert proc.stderr is not None
        raise AssertionError(f"child ended early: {(await proc.stderr.read()).decode()}")
    return line.decode().strip()


# --- sessions


async def test_ephemeral_key_of_a_killed_process_expires_within_the_lease_ttl(
    etcd_server: EtcdProcess, etcd_store: EtcdMetadataStore, prefix: str
) -> None:
    events = Events()
    etcd_store.watch("/bookies/available", events)
    child = await spawn_child(
        etcd_server,
        prefix,
        """
        await store.put("/bookies/available/b1", b"127.0.0.1:3181", ephemeral=True)
        print("registered", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
    )
    assert await read_line(child) == "registered"
    assert await child.wait() == -signal.SIGKILL
    died = time.monotonic()
    got = await etcd_store.get("/bookies/available/b1")
    assert got is not None and got.stat.ephemeral  # the dead owner's lease still holds it
    gone_at = await events.wait_for(Notification("delete", "/bookies/available/b1"), TTL + SLACK)
    assert gone_at - died <= TTL + SLACK
    assert await etcd_store.get("/bookies/available/b1") is None


async def test_a_live_session_keeps_its_ephemeral_keys_past_the_ttl(etcd_store: EtcdMetadataStore) -> None:
    assert etcd_store.lease_ttl == TTL
    events = Events()
    etcd_store.watch("/bookies", events)
    await etcd_store.put("/bookies/available/b1", b"addr", ephemeral=True)
    # "Nothing expires" has no event to await: waiting out the TTL is the test.
    await asyncio.sleep(TTL * 1.5)
    assert await etcd_store.exists("/bookies/available/b1")
    assert Notification("delete", "/bookies/available/b1") not in events.seen
    assert not etcd_store.session_lost.is_set()


async def test_close_revokes_the_lease_so_ephemeral_keys_vanish_at_once(
    etcd_server: EtcdProcess, etcd_store: EtcdMetadataStore, prefix: str
) -> None:
    owner = await EtcdMetadataStore.connect(etcd_server.url, prefix=prefix, lease_ttl=60)
    await owner.put("/ownership/t/ns/0x0", b"broker-1", ephemeral=True)
    assert await etcd_store.exists("/ownership/t/ns/0x0")
    await owner.close()
    assert not await etcd_store.exists("/ownership/t/ns/0x0")  # no 60 s TTL to wait out


async def test_session_lost_fires_when_the_lease_is_revoked_behind_the_stores_back(
    etcd_server: EtcdProcess, etcd_store: EtcdMetadataStore
) -> None:
    called = asyncio.Event()
    etcd_store.on_session_lost(called.set)
    await etcd_store.put("/ownership/t/ns/0x0", b"me", ephemeral=True)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{etcd_server.endpoint}/v3/lease/revoke", json={"ID": str(etcd_store.lease_id)}) as resp:
            assert resp.status == 200, await resp.text()
    async with asyncio.timeout(TTL + SLACK):  # the next keepalive, at most TTL/3 away, notices
        await etcd_store.session_lost.wait()
        await called.wait()
    assert "expired or was revoked" in etcd_store.session_lost_reason
    assert not await etcd_store.exists("/ownership/t/ns/0x0")
    with pytest.raises(SessionLost):
        await etcd_store.put("/ownership/t/ns/0x1", b"me", ephemeral=True)
    stat = await etcd_store.put("/tenants/t", b"still writable")  # persistent keys need no session
    assert not stat.ephemeral


async def test_a_process_paused_past_its_ttl_loses_its_key_and_learns_it_lost_the_session(
    etcd_server: EtcdProcess, etcd_store: EtcdMetadataStore, prefix: str
) -> None:
    events = Events()
    etcd_store.watch("/ownership", events)
    child = await spawn_child(
        etcd_server,
        prefix,
        """
        await store.put("/ownership/t/ns/0x0", b"broker-1", ephemeral=True)
        print("owner", flush=True)
        await store.session_lost.wait()
        print("lost", await store.exists("/ownership/t/ns/0x0"), flush=True)
        try:
            await store.put("/ownership/t/ns/0x0", b"broker-1", ephemeral=True)
            print("re-acquired", flush=True)
        except Exception as exc:
            print("refused", type(exc).__name__, flush=True)
        await store.close()
        """,
    )
    try:
        assert await read_line(child) == "owner"
        os.kill(child.pid, signal.SIGSTOP)
        await events.wait_for(Notification("delete", "/ownership/t/ns/0x0"), TTL + SLACK)
        # Another broker takes the bundle while the old owner is frozen.
        await etcd_store.put("/ownership/t/ns/0x0", b"broker-2", MUST_NOT_EXIST, ephemeral=True)
        os.kill(child.pid, signal.SIGCONT)
        assert await read_line(child) == "lost True"  # the key it sees is broker-2's
        assert await read_line(child) == "refused SessionLost"
        assert await child.wait() == 0
        got = await etcd_store.get("/ownership/t/ns/0x0")
        assert got is not None and got.value == b"broker-2"  # the old owner's close did not touch it
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


# --- watches


async def test_watch_hears_changes_made_by_another_process(
    etcd_server: EtcdProcess, etcd_store: EtcdMetadataStore, prefix: str
) -> None:
    events = Events()
    etcd_store.watch("/ledgers", events)
    child = await spawn_child(
        etcd_server,
        prefix,
        """
        await store.put("/ledgers/7", b"meta")
        await store.put("/ledgersX", b"a sibling, not below /ledgers")
        await store.delete("/ledgers/7")
        await store.close()
        """,
    )
    assert await child.wait() == 0
    await events.wait_for(Notification("delete", "/ledgers/7"), 10)
    assert events.seen == [Notification("put", "/ledgers/7"), Notification("delete", "/ledgers/7")]


async def test_prefixes_keep_stores_apart(etcd_server: EtcdProcess, etcd_store: EtcdMetadataStore) -> None:
    other = await EtcdMetadataStore.connect(etcd_server.url, prefix=f"/other-{uuid.uuid4().hex[:8]}", lease_ttl=TTL)
    try:
        events = Events()
        other.watch("/", events)
        await etcd_store.put("/tenants/a", b"mine")
        await other.put("/tenants/b", b"theirs")
        await events.wait_for(Notification("put", "/tenants/b"), 5)
        assert events.seen == [Notification("put", "/tenants/b")]
        assert await etcd_store.children("/tenants") == ["a"]
        assert await other.children("/tenants") == ["b"]
    finally:
        await other.close()


# --- endpoints and failures


async def test_requests_fail_over_to_the_next_endpoint(etcd_server: EtcdProcess, prefix: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    store = await EtcdMetadataStore.connect(f"etcd://{dead},127.0.0.1:{etcd_server.client_port}{prefix}", lease_ttl=TTL)
    try:
        events = Events()
        store.watch("/k", events)
        stat = await store.put("/k", b"v", MUST_NOT_EXIST)
        got = await store.get("/k")
        assert got is not None and got.version == stat.version
        await events.wait_for(Notification("put", "/k"), 5)
        assert store.endpoints[0].endswith(dead)
    finally:
        await store.close()


async def test_store_and_session_survive_an_etcd_crash_and_restart(etcd_server: EtcdProcess, tmp_path: Path) -> None:
    with run_etcd(tmp_path, etcd_server.binary) as etcd:  # a private etcd: crashing the shared one would hurt others
        store = await EtcdMetadataStore.connect(etcd.url, lease_ttl=10)
        try:
            events = Events()
            store.watch("/", events)
            await store.put("/bookies/available/b1", b"addr", ephemeral=True)
            before = await store.put("/ledgers/1", b"meta")
            await asyncio.to_thread(etcd.restart)  # kill -9, then start on the same data and ports
            got = await store.get("/ledgers/1")
            assert got is not None and got.version == before.version
            await store.put("/ledgers/1", b"meta2", before.version)
            # The watch reconnected and resumed where it was: the CAS after the crash is reported once.
            await events.wait_for(Notification("put", "/ledgers/1"), 10, times=2)
            assert events.seen == [
                Notification("put", "/bookies/available/b1"),
                Notification("put", "/ledgers/1"),
                Notification("put", "/ledgers/1"),
            ]
            assert await store.exists("/bookies/available/b1")  # etcd keeps leases across restarts
            assert not store.session_lost.is_set()
        finally:
            await store.close()


# --- URLs and codecs


def test_etcd_urls_name_endpoints_and_an_optional_prefix() -> None:
    assert parse_etcd_url("etcd://127.0.0.1:2379") == (["http://127.0.0.1:2379"], None)
    assert parse_etcd_url("etcd://a:1,b:2/magnetar/c1") == (["http://a:1", "http://b:2"], "/magnetar/c1")
    for bad in ["http://a:1", "etcd://", "etcd://a:1/bad//prefix"]:
        with pytest.raises(ValueError):
            parse_etcd_url(bad)


async def test_open_metadata_store_picks_the_implementation_from_the_url(
    etcd_server: EtcdProcess, tmp_path: Path, prefix: str
) -> None:
    opened = await open_metadata_store(etcd_server.url + prefix, lease_ttl=TTL)
    try:
        assert isinstance(opened, EtcdMetadataStore) and opened.prefix == prefix
    finally:
        await opened.close()
    lmdb_store = await open_metadata_store(f"lmdb://{tmp_path / 'meta'}")
    try:
        assert isinstance(lmdb_store, LmdbMetadataStore)
    finally:
        await lmdb_store.close()
    for bad in ["zk://host:2181", "lmdb://relative/path", "/just/a/path"]:
        with pytest.raises(ValueError, match=r"metadata URL|not an etcd URL|absolute"):
            await open_metadata_store(bad)


def test_stream_decoder_reassembles_messages_split_across_chunks() -> None:
    decoder = JsonLines()
    key = base64.b64encode(b"/k").decode()
    wire = f'{{"result":{{"events":[{{"kv":{{"key":"{key}"}}}}]}}}}\n{{"result":{{}}}}\n'.encode()
    out = []
    for i in range(0, len(wire), 7):
        out += decoder.feed(wire[i : i + 7])
    assert out == [{"result": {"events": [{"kv": {"key": key}}]}}, {"result": {}}]
