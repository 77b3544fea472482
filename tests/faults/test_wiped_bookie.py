"""A bookie restarted on a wiped data directory refuses to start, with a message that says why (f)."""

from __future__ import annotations

import pytest
from tests.faults.nemesis import record
from tests.support.cluster import LocalCluster, ProcessExited

pytestmark = [pytest.mark.faults, pytest.mark.timeout(120)]


async def cookie(cluster: LocalCluster, bookie_id: str) -> bytes | None:
    async with cluster.metadata() as md:
        found = await md.store.get(f"/bookies/cookies/{bookie_id}")
        return found.value if found is not None else None


def refuse(cluster: LocalCluster, bookie_id: str) -> tuple[int | None, str]:
    with pytest.raises(ProcessExited) as refused:
        cluster.wipe_and_restart_bookie(bookie_id)
    return refused.value.code, cluster.bookie(bookie_id).output()


async def test_a_bookie_on_a_wiped_disk_refuses_to_start_until_reprovisioned(cluster: LocalCluster) -> None:
    victim = cluster.bookies[1]
    before = await cookie(cluster, victim.name)
    code, out = refuse(cluster, victim.name)
    message = next((line for line in out.splitlines() if "wiped" in line), "")
    record("f-wiped-bookie", exit_code=code, message=message.strip())
    assert code not in (None, 0)
    assert "wiped" in out and "--reprovision" in out, out
    assert await cookie(cluster, victim.name) == before, "a refused start must not touch the registered cookie"

    cluster.wipe_and_restart_bookie(victim.name, reprovision=True)  # raises unless its banner says ready
    assert victim.is_ready
    after = await cookie(cluster, victim.name)
    assert after is not None and after != before, "--reprovision registers a new cookie"


async def test_the_refusal_is_one_clear_line_not_a_traceback(cluster: LocalCluster) -> None:
    code, out = refuse(cluster, cluster.bookies[0].name)
    assert "Traceback" not in out, f"the refusal should be a one-line error, not a traceback:\n{out}"
    assert "Unclosed client session" not in out, f"the metadata session was not closed on refusal:\n{out}"
    assert code == 2 or code == 1
