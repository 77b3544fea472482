"""An acknowledged add survives kill -9: the real process is killed while adds are in flight."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from magnetar.bookie.storage import BookieStorage

#: The storage contract: every test here runs against each engine (conftest.STORAGE_ENGINES).
pytestmark = pytest.mark.usefixtures("storage_engine")

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from magnetar.bookie.storage import BookieStorage
    from magnetar.protocol.checksum import crc32c

    async def main(directory):
        storage = BookieStorage(directory)
        acked = 0

        def on_ack(ledger, e, fut):
            nonlocal acked
            if fut.exception() is None:
                os.write(1, f"{ledger} {e}\\n".encode())  # unbuffered: printed means acked
                acked += 1
                if acked == 1500:
                    os.write(1, f"commits {storage.commits}\\n".encode())
                    os.kill(os.getpid(), signal.SIGKILL)

        futures = []
        for e in range(1000):
            for ledger in (1, 2, 3):
                data = f"{ledger}:{e}".encode() * 10
                fut = storage.add_nowait(ledger, e, data, crc32c(data), e - 1)
                fut.add_done_callback(lambda f, ledger=ledger, e=e: on_ack(ledger, e, f))
                futures.append(fut)
            if e % 50 == 0:
                await asyncio.sleep(0)  # let acks arrive while more adds are queued
        await asyncio.gather(*futures)
        os.write(1, b"not killed\\n")

    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.mark.durability
async def test_every_acknowledged_add_survives_kill_9(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    assert proc.returncode == -9, err.decode()
    lines = out.decode().splitlines()
    assert lines[-1].startswith("commits ")
    commits = int(lines[-1].split()[1])
    acked = [tuple(map(int, line.split())) for line in lines[:-1]]
    assert len(acked) == 1500
    assert commits < len(acked) / 5, f"{commits} commits for {len(acked)} acks: no group commit"
    storage = BookieStorage(tmp_path)
    try:
        for ledger, e in acked:
            result = await storage.read(ledger, e)
            assert result.data == f"{ledger}:{e}".encode() * 10
    finally:
        await storage.close()
