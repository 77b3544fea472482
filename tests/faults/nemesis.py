"""Faults and observations for the scenarios: which process to hurt, and what the cluster says after.

The nemesis picks its victims from what the cluster is doing *now* (the bookies of the ledger the
producers are writing, the broker that owns the topic), injects the fault through ``Proc``
(kill -9, SIGSTOP/SIGCONT, SIGTERM, restart), and waits on conditions with deadlines: a new
fragment in the ledger's metadata, the ownership key moving, under-replicated markers reaching
zero. ``record()`` prints a scenario's figures and appends them as one JSON line to the file named
by ``FAULTS_REPORT`` (if set), for the closing note.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tests.faults.checker import CheckResult
from tests.faults.workload import QueueWorkload
from tests.support.cluster import LocalCluster, Proc

from magnetar.ledger.metadata_format import LedgerMetadata

T = TypeVar("T")


def record(scenario: str, **figures: Any) -> dict[str, Any]:
    """Print the figures of a scenario and append them to ``$FAULTS_REPORT`` as a JSON line."""
    line = {"scenario": scenario, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **figures}
    text = json.dumps(line, sort_keys=False, default=str)
    print(f"FAULTS {text}", flush=True)
    path = os.environ.get("FAULTS_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return line


async def eventually(probe: Callable[[], Awaitable[T | None]], *, within: float, what: str, interval: float = 0.1) -> T:
    """Poll an async ``probe`` until it returns something truthy (returned), or fail after ``within``."""
    deadline = time.monotonic() + within
    last_error: BaseException | None = None
    while True:
        try:
            value = await probe()
        except Exception as exc:  # the cluster is in flux: a probe may fail for a moment
            value, last_error = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within}s (last error: {last_error!r})")
        await asyncio.sleep(interval)  # polling interval


async def hold_until(deadline: float, *, what: str, interval: float = 0.2) -> None:
    """Keep a fault in place until ``time.monotonic()`` reaches ``deadline`` (the length of the
    fault, not a wait for an event)."""

    async def passed() -> bool:
        return time.monotonic() >= deadline

    await eventually(passed, within=max(0.0, deadline - time.monotonic()) + 5, what=what, interval=interval)


async def hold(seconds: float, *, what: str = "the fault's duration", interval: float = 0.2) -> None:
    """``hold_until`` ``seconds`` from now."""
    await hold_until(time.monotonic() + seconds, what=what, interval=interval)


async def in_thread(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """Run a blocking harness call (start, restart, stop) without stalling the workload."""
    return await asyncio.to_thread(fn, *args, **kw)


# ---------------------------------------------------------------------- what is being written


async def current_ledger(cluster: LocalCluster, wl: QueueWorkload) -> tuple[int, LedgerMetadata]:
    """The ledger the producers were last acknowledged in, with its metadata."""
    last = wl.last_ok()
    assert last is not None and last.pos is not None, "no acknowledged send yet"
    ledger_id = last.pos[0]
    async with cluster.metadata() as md:
        meta = await md.ledger(ledger_id)
    assert meta is not None, f"ledger {ledger_id} has no metadata"
    return ledger_id, meta


async def ledger_metadata(cluster: LocalCluster, ledger_id: int) -> LedgerMetadata | None:
    async with cluster.metadata() as md:
        return await md.ledger(ledger_id)


async def owner_of(cluster: LocalCluster, topic: str) -> Proc | None:
    async with cluster.metadata() as md:
        broker_id = await md.topic_owner(topic)
    return cluster.broker_by_id(broker_id) if broker_id else None


async def underreplicated(cluster: LocalCluster) -> dict[int, bytes]:
    async with cluster.metadata() as md:
        return await md.underreplicated()


async def wait_underreplicated_zero(cluster: LocalCluster, *, within: float) -> float:
    """Wait until no ``/underreplicated/*`` marker is left; returns when (monotonic)."""

    async def none_left() -> bool:
        return not await underreplicated(cluster)

    await eventually(none_left, within=within, what="under-replicated ledgers back to 0", interval=0.25)
    return time.monotonic()


async def wait_new_owner(cluster: LocalCluster, topic: str, old: Proc, *, within: float) -> Proc:
    """Wait until the topic's bundle is owned by a broker other than ``old``."""

    async def moved() -> Proc | None:
        owner = await owner_of(cluster, topic)
        return owner if owner is not None and owner is not old else None

    return await eventually(moved, within=within, what=f"{topic} owned by a broker other than {old.name}")


async def enable_dedup(cluster: LocalCluster, namespace: str = "public/default") -> None:
    """Turn message deduplication on for ``namespace`` (before the workload loads its topic)."""

    def post() -> None:
        req = urllib.request.Request(
            f"{cluster.admin_urls[0]}/admin/v2/namespaces/{namespace}/deduplication",
            data=b"true",
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 204, resp.status

    await in_thread(post)


def acks_in_ledger(wl: QueueWorkload, ledger_id: int) -> list[int]:
    """Entry ids of every acknowledged send in ``ledger_id``."""
    return [op.pos[1] for op in wl.ops if op.status == "ok" and op.pos is not None and op.pos[0] == ledger_id]


async def finish(cluster: LocalCluster, wl: QueueWorkload, scenario: str, **figures: Any) -> CheckResult:
    """Stop the workload, drain, check; keep the history next to the logs; record the figures."""
    await wl.stop()
    await wl.drain()
    res = wl.check()
    wl.dump(cluster.base / "history.json")
    record(scenario, **res.counts(), **wl.stats(), **figures)
    return res


async def acks_beyond_close(cluster: LocalCluster, wl: QueueWorkload) -> list[str]:
    """Acknowledged sends whose entry lies past their ledger's closed end: the broker told the
    producer "stored" for an entry recovery (or the close) left out. Must always be empty."""
    by_ledger: dict[int, list[Any]] = {}
    for op in wl.ops:
        if op.status == "ok" and op.pos is not None and op.pos[0] >= 0:  # not a -1:-1 duplicate
            by_ledger.setdefault(op.pos[0], []).append(op)
    bad: list[str] = []
    async with cluster.metadata() as md:
        for ledger_id, ops in sorted(by_ledger.items()):
            meta = await md.ledger(ledger_id)
            if meta is None or not meta.is_closed:
                continue
            for op in ops:
                if op.pos[1] > meta.last_entry_id:
                    bad.append(f"{op.value} acked at {op.pos} via {op.via}; ledger closed at {meta.last_entry_id}")
    return bad


async def first_ack_outside(wl: QueueWorkload, *, after: float, ledgers: set[int], within: float) -> Any:
    """Wait for the first send acknowledged after ``after`` in a ledger not in ``ledgers`` (a new
    owner's ledger); returns that op."""
    deadline = time.monotonic() + within
    while True:
        fresh = [
            op
            for op in wl.acked_after(after)
            if op.pos is not None and op.pos[0] >= 0 and op.pos[0] not in ledgers and op.t_complete is not None
        ]
        if fresh:
            return min(fresh, key=lambda op: op.t_complete or 0.0)
        if time.monotonic() > deadline:
            raise TimeoutError(f"no acknowledgement in a new ledger within {within}s; events {wl.events[-6:]}")
        await asyncio.sleep(0.05)  # polling interval


def in_flight_at(wl: QueueWorkload, t: float) -> list[Any]:
    """Sends invoked before ``t`` that had not completed by ``t``."""
    return [op for op in wl.ops if op.t_invoke <= t and (op.t_complete is None or op.t_complete > t)]


def outcome_counts(ops: list[Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in ops:
        out[op.status] = out.get(op.status, 0) + 1
    return out


UNDERREPLICATED_GAUGE = "magnetar_bookie_underreplicated_ledgers"


async def wait_gauge(cluster: LocalCluster, want: Callable[[float], bool], *, within: float) -> float | None:
    """Wait until the highest ``magnetar_bookie_underreplicated_ledgers`` any live bookie exports
    satisfies ``want``; returns when (monotonic), or None if it never did (reported, not asserted:
    the gauge is a view of the markers, which are checked directly)."""

    async def probe() -> bool:
        values = await in_thread(cluster.bookie_gauge, UNDERREPLICATED_GAUGE)
        return bool(values) and want(max(values.values()))

    try:
        await eventually(probe, within=within, what="under-replicated gauge", interval=0.25)
    except TimeoutError:
        return None
    return time.monotonic()
