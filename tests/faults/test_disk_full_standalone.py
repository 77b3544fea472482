"""Disk full on a standalone: its one bookie and its metadata store share a small filesystem.

A cluster replaces a full bookie; a standalone has nowhere else to write, so what matters is what
its producer sees while the disk is full and that the SAME producer writes again once space is
freed, as a Pulsar standalone's does when its bookie leaves read-only mode:

(a) while full, sends are refused: the broker answers ``PersistenceError`` / "Not enough
    non-faulty bookies available" (BookKeeper's words), which a Pulsar producer retries until its
    send timeout, so the send fails with ``Timeout`` naming that answer;
(b) within 10 s of freeing the space, the same producer's sends succeed (no new client, no new
    producer);
(c) every acknowledged message is read back: 0 acknowledged lost.

Each phase waits on the producer's own send results with a deadline, not on a timer.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.faults.nemesis import record
from tests.faults.smallfs import can_mount, fill_to, skip_or_fail, small_fs
from tests.support.standalone import StandaloneProcess

import magnetar as mg

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

DISK_MB = 96
SEND_TIMEOUT_MS = 3000
RECOVERY_S = 10.0


@pytest.fixture
def standalone_on_small_disk(tmp_path: Path) -> Iterator[StandaloneProcess]:
    reason = can_mount()
    if reason is not None:
        skip_or_fail(reason)
    with small_fs(tmp_path / "disk", DISK_MB) as disk:
        sa = StandaloneProcess(disk / "data", tmp_path / "standalone.log")
        sa.start()
        try:
            yield sa
        finally:
            sa.stop()


def _send(producer: mg.Producer, value: bytes) -> BaseException | None:
    """One send's outcome: None once acknowledged, else its error."""
    try:
        producer.send(value)
    except mg.PulsarException as exc:
        return exc
    return None


def test_a_full_standalone_refuses_sends_and_the_same_producer_writes_again_once_space_is_freed(
    standalone_on_small_disk: StandaloneProcess,
) -> None:
    sa = standalone_on_small_disk
    disk = sa.data_dir.parent
    topic = f"persistent://public/default/full-{uuid.uuid4().hex[:8]}"
    client = mg.Client(sa.service_url)
    acked: list[bytes] = []
    n = 0

    def next_value() -> bytes:
        nonlocal n
        n += 1
        return b"%08d" % n + b"." * 1000

    try:
        check = client.subscribe(topic, "check", initial_position=mg.InitialPosition.Earliest)
        producer = client.create_producer(topic, send_timeout_millis=SEND_TIMEOUT_MS, batching_enabled=False)
        for _ in range(50):
            value = next_value()
            assert _send(producer, value) is None
            acked.append(value)

        filler = fill_to(disk, 1.0)
        t_fill = time.monotonic()
        refusal: BaseException | None = None
        while refusal is None:  # the bookie turns read-only within its disk check: about a second
            assert time.monotonic() - t_fill < 60, "sends were never refused on a full disk"
            value = next_value()
            refusal = _send(producer, value)
            if refusal is None:
                acked.append(value)
        t_refused = time.monotonic()
        # A second send while full is refused the same way (the producer keeps retrying, as Pulsar's).
        second = _send(producer, next_value())

        (disk / "filler").unlink()
        t_free = time.monotonic()
        recovered: float | None = None
        errors_after_free: list[str] = []
        while recovered is None:
            assert time.monotonic() - t_free < RECOVERY_S, (
                f"the same producer still fails {time.monotonic() - t_free:.1f} s after freeing "
                f"{filler} bytes: {len(errors_after_free)} sends failed, the last with {errors_after_free[-1:]}"
            )
            value = next_value()
            error = _send(producer, value)
            if error is None:
                acked.append(value)
                recovered = time.monotonic() - t_free
            else:
                errors_after_free.append(f"{type(error).__name__}: {error}")
        for _ in range(20):
            value = next_value()
            assert _send(producer, value) is None
            acked.append(value)

        seen: set[bytes] = set()
        want = set(acked)
        deadline = time.monotonic() + 60
        while not want <= seen and time.monotonic() < deadline:
            try:
                msg = check.receive(timeout_millis=5000)
            except mg.Timeout:
                continue
            seen.add(msg.data())
            check.acknowledge(msg)
        lost = sorted(want - seen)
    finally:
        client.close()
    record(
        "disk-full-standalone",
        disk_mb=DISK_MB,
        free_bytes=shutil.disk_usage(disk).free,
        filler_bytes=filler,
        refused_after_fill_s=round(t_refused - t_fill, 3),
        recovered_after_free_s=round(recovered, 3),
        errors_after_free=len(errors_after_free),
        acknowledged=len(acked),
        lost=len(lost),
    )
    for error in (refusal, second):
        assert isinstance(error, mg.Timeout), repr(error)
        assert "Not enough non-faulty bookies available" in str(error) or "No space left" in str(error), error
    assert not lost, f"{len(lost)} acknowledged messages lost, first {lost[:3]!r}"
