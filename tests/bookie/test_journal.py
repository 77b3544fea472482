"""The bookie journal (bookie/journal.py, journal_writer.py) and the storage's journal mode.

Records must come back exactly as appended, across segments, and a torn or misplaced record must
end replay rather than pass for data. Both writers (the C extension and its pure-Python twin) run
every journal test. In journal mode an add is acknowledged once the journal holds it and reaches
LMDB later, so every read (entries, LAC, fencing, listings, deletes) must answer from what was
acknowledged, in LMDB or not; and what the journal held when the process was killed must be in
LMDB after the next open, with the journal on or off.
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.bookie import journal_writer
from magnetar.bookie.journal import HEAD, Journal, JournalPosition
from magnetar.bookie.storage import BookieStorage
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.errors import LedgerFenced, NoSuchEntry, NoSuchLedger

from .conftest import entry

SEGMENT = 4096
NEVER = 3600.0  # an LMDB interval no test outlasts: what the test reads is in the overlay only


@pytest.fixture(params=["c", "python"])
def writer_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    kind = str(request.param)
    monkeypatch.setenv(journal_writer.ENV, kind)
    if kind == "c" and journal_writer.implementation() != "c":
        pytest.fail("the C journal writer is not built: `pip install -e .` needs a C compiler and Python headers")
    yield kind


def wait_durable(journal: Journal, seq: int) -> None:
    """Block on the writer's eventfd until ``seq`` is durable (or the writer failed)."""
    while True:
        durable, err = journal.durable()
        if durable >= seq or err:
            return
        ready, _, _ = select.select([journal.eventfd], [], [], 10)
        assert ready, "the journal writer reported nothing within 10 s"
        try:
            os.eventfd_read(journal.eventfd)
        except BlockingIOError:
            pass


def append_all(journal: Journal, bodies: list[bytes]) -> JournalPosition:
    seq, end = 0, journal.position
    for body in bodies:
        seq, end = journal.append(body)
    wait_durable(journal, seq)
    return end


def records(journal: Journal, start: JournalPosition) -> list[bytes]:
    return [body for body, _ in journal.replay(start)]


def test_records_come_back_in_order_across_segments(tmp_path: Path, writer_kind: str) -> None:
    journal = Journal(tmp_path, SEGMENT)
    journal.start(JournalPosition(1, 0))
    bodies = [f"{i}".encode() * 100 for i in range(60)]  # ~12 KiB: several segments
    append_all(journal, bodies)
    assert journal.position.segment >= 3, "the records should have filled several segments"
    assert journal.durable() == (60, 0)
    journal.close()
    assert records(journal, JournalPosition(1, 0)) == bodies


def test_replay_starts_where_asked(tmp_path: Path, writer_kind: str) -> None:
    journal = Journal(tmp_path, SEGMENT)
    journal.start(JournalPosition(1, 0))
    middle = append_all(journal, [b"a", b"b", b"c"])
    append_all(journal, [b"d"])
    journal.close()
    assert records(journal, middle) == [b"d"]
    assert records(journal, JournalPosition(1, 0)) == [b"a", b"b", b"c", b"d"]


def test_a_torn_record_ends_replay(tmp_path: Path, writer_kind: str) -> None:
    journal = Journal(tmp_path, SEGMENT)
    journal.start(JournalPosition(1, 0))
    append_all(journal, [b"kept"])
    torn_at = journal.position.offset
    append_all(journal, [b"x" * 100])
    journal.close()
    with open(journal.path(1), "r+b") as f:  # a power cut that left the record's tail unwritten
        f.seek(torn_at + HEAD.size + 50)
        f.write(bytes(50))
    assert records(journal, JournalPosition(1, 0)) == [b"kept"]


def test_a_record_copied_elsewhere_does_not_pass(tmp_path: Path, writer_kind: str) -> None:
    """The CRC covers the record's position: bytes that landed at the wrong offset are not a record."""
    journal = Journal(tmp_path, SEGMENT)
    journal.start(JournalPosition(1, 0))
    end = append_all(journal, [b"first"]).offset
    journal.close()
    raw = journal.path(1).read_bytes()[:end]
    with open(journal.path(1), "r+b") as f:
        f.seek(end)
        f.write(raw)
    assert records(journal, JournalPosition(1, 0)) == [b"first"]


def test_a_record_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path, writer_kind: str) -> None:
    journal = Journal(tmp_path, SEGMENT)
    journal.start(JournalPosition(1, 0))
    big = os.urandom(3 * SEGMENT)
    append_all(journal, [b"small", big, b"after"])
    journal.close()
    assert records(journal, JournalPosition(1, 0)) == [b"small", big, b"after"]
    assert journal.path(2).stat().st_size >= 3 * SEGMENT + HEAD.size


def test_a_failed_write_is_reported_and_nothing_after_it_is_durable(tmp_path: Path, writer_kind: str) -> None:
    path = tmp_path / "segment"
    path.write_bytes(bytes(SEGMENT))
    fd = os.open(path, os.O_RDONLY)  # every pwrite fails (EBADF)
    writer = journal_writer.make_writer(fd, 0)
    try:
        seq = writer.append(b"lost")
        while writer.state()[1] == 0:
            select.select([writer.eventfd], [], [], 10)
        durable, err = writer.state()
        assert durable < seq and err != 0
        with pytest.raises(OSError):
            writer.switch(fd, 0)  # no moving on silently after a failure
    finally:
        writer.close()
        os.close(fd)
    assert type(writer).__module__.endswith("_journal_writer" if writer_kind == "c" else "journal_writer")


# ---------------------------------------------------------------- the storage in journal mode


async def test_reads_answer_from_the_overlay_before_lmdb_has_anything(tmp_path: Path, writer_kind: str) -> None:
    storage = BookieStorage(tmp_path, journal=True, lmdb_interval=NEVER)
    try:
        for e in range(3):
            await storage.add(7, e, *entry(f"e{e}".encode()), lac=e - 1)
        await storage.add(8, 0, *entry(b"other"), lac=NO_ENTRY)
        await storage.add(9, 0, *entry(b"doomed"), lac=NO_ENTRY)
        assert storage.ops_committed == 0, "the interval is an hour: nothing may be in LMDB yet"
        result = await storage.read(7, 2)
        assert (result.data, result.lac) == (b"e2", 1)
        assert await storage.read_lac(7) == 1
        assert await storage.last_entry(7) == 2
        assert storage.entry_ids(7) == [0, 1, 2]
        assert await storage.ledgers() == [7, 8, 9]
        assert await storage.fence(7) == 1
        assert await storage.is_fenced(7)
        with pytest.raises(LedgerFenced):
            await storage.add(7, 3, *entry(b"late"), lac=2)
        await storage.add(7, 3, *entry(b"recovery"), lac=2, recovery=True)
        assert (await storage.read(7, 3)).data == b"recovery"
        await storage.delete_ledger(9)
        with pytest.raises(NoSuchLedger):
            await storage.read(9, 0)
        with pytest.raises(NoSuchEntry):
            await storage.read(8, 1)
        assert await storage.ledgers() == [7, 8]
        assert storage.ops_committed == 0
        assert storage.verify_all().entries == 5  # waits for LMDB: 7:0-3 and 8:0, not the deleted 9:0
        assert storage.ops_committed > 0
        assert (await storage.read(7, 3)).data == b"recovery"
    finally:
        await storage.close()


KILLED = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from magnetar.bookie.storage import BookieStorage
    from magnetar.protocol.checksum import crc32c

    async def main(directory, segment_bytes):
        storage = BookieStorage(directory, journal=True, lmdb_interval=3600, journal_segment_bytes=segment_bytes)
        for e in range(200):
            data = f"k{e}".encode() * 20
            await storage.add(5, e, data, crc32c(data), e - 1)
        await storage.fence(6)
        os.write(1, f"acked {storage.ops_committed}\\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


@pytest.mark.parametrize("reopen_with_journal", [True, False])
async def test_kill_9_before_anything_reached_lmdb_loses_nothing(
    tmp_path: Path, writer_kind: str, reopen_with_journal: bool
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED, str(tmp_path), str(SEGMENT), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == -9, err.decode()
    assert out.decode().split() == ["acked", "0"], "nothing was in LMDB when the process died"
    storage = BookieStorage(tmp_path, journal=reopen_with_journal)
    try:
        assert storage.replayed == 201  # 200 adds over several 4 KiB segments, and the fence
        for e in range(200):
            assert (await storage.read(5, e)).data == f"k{e}".encode() * 20
        assert await storage.read_lac(5) == 198 and await storage.is_fenced(6)
        with pytest.raises(LedgerFenced):
            await storage.add(6, 0, *entry(b"x"), lac=NO_ENTRY)
    finally:
        await storage.close()
    again = BookieStorage(tmp_path, journal=True)  # replayed once: nothing is replayed twice
    try:
        assert again.replayed == 0
        assert (await again.read(5, 199)).data == b"k199" * 20
    finally:
        await again.close()


async def test_refused_adds_leave_no_lmdb_reader_slots_behind(tmp_path: Path, writer_kind: str) -> None:
    """The bookie fuzzer's find: a refusal kept its frame, and the frame its read transaction,
    alive in a cycle (op -> future -> exception -> traceback -> frame -> op); py-lmdb keeps a
    finished read transaction's slot until the object is freed, so after 126 refusals every read
    failed with MDB_READERS_FULL. With the cycle collector off, as between this project's rare
    sweeps (MAGNETAR_GC_*), 300 refusals must leave the reader table as it was."""
    first = BookieStorage(tmp_path, journal=True)
    await first.fence(3)
    await first.close()
    storage = BookieStorage(tmp_path, journal=True)  # the fence is in LMDB: each refusal reads it there
    gc.disable()
    try:
        for e in range(300):
            with pytest.raises(LedgerFenced):
                await storage.add(3, e, *entry(b"late"), lac=e - 1)
        assert storage._env.info()["num_readers"] <= 2
        with pytest.raises(NoSuchEntry):
            await storage.read(3, 0)  # reads still work
    finally:
        gc.enable()
        await storage.close()
