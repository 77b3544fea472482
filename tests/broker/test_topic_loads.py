"""Topic loads per tenant and per broker (broker/topics/loads.py): a tenant loading many topics
holds at most its share of slots, and another tenant's load starts at once meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.broker.topics.loads import TopicLoadSlots


class Loads:
    """Loads that hold their slot until ``gate`` opens, counted per tenant."""

    def __init__(self, slots: TopicLoadSlots) -> None:
        self.slots = slots
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.gate = asyncio.Event()
        self._changed = asyncio.Event()  # set each time a load takes its slot

    async def hold(self, tenant: str) -> None:
        async with self.slots.slot(tenant):
            self.running[tenant] = self.running.get(tenant, 0) + 1
            self.peak[tenant] = max(self.peak.get(tenant, 0), self.running[tenant])
            self._changed.set()
            await self.gate.wait()
            self.running[tenant] -= 1

    def start(self, tenants: list[str]) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(self.hold(t)) for t in tenants]

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait until ``done()``, re-checking each time a load takes its slot."""
        while not done():
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), 5)


async def test_a_tenant_holds_its_share_and_another_tenant_is_not_queued_behind_it() -> None:
    slots = TopicLoadSlots(per_broker=100, per_tenant=4)
    loads = Loads(slots)
    noisy = loads.start(["noisy"] * 50)
    await loads.until(lambda: loads.running.get("noisy", 0) == 4)
    quiet_started = asyncio.Event()

    async def quiet() -> None:
        async with slots.slot("quiet"):
            quiet_started.set()

    q = asyncio.create_task(quiet())
    await asyncio.wait_for(quiet_started.wait(), 5)  # while the noisy tenant's 46 others wait
    await q
    assert loads.running["noisy"] == 4 and slots.waited >= 46
    loads.gate.set()
    await asyncio.gather(*noisy)
    assert loads.peak["noisy"] == 4, "a tenant never holds more than its share"
    assert slots._tenants == {}, "a tenant with nothing pending keeps no semaphore"


async def test_the_broker_wide_limit_holds_across_tenants() -> None:
    loads = Loads(TopicLoadSlots(per_broker=3, per_tenant=0))
    tasks = loads.start([f"t{i}" for i in range(10)])
    await loads.until(lambda: sum(loads.running.values()) == 3)
    await asyncio.sleep(0.05)  # give the 7 others every chance to start: they must not
    assert sum(loads.running.values()) == 3, "the broker-wide limit is shared by every tenant"
    loads.gate.set()
    await asyncio.gather(*tasks)


async def test_zero_means_no_limit() -> None:
    loads = Loads(TopicLoadSlots(per_broker=0, per_tenant=0))
    tasks = loads.start(["t"] * 50)
    await loads.until(lambda: loads.running.get("t", 0) == 50)
    loads.gate.set()
    await asyncio.gather(*tasks)
