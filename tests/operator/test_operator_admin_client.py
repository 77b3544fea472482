"""The operator's admin client against a real standalone broker: calls and their error classes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from tests.operator.harness import free_port
from tests.support.standalone import StandaloneProcess

from magnetar.client.aio import Client
from magnetar_operator import decommissioning
from magnetar_operator.admin import (
    AdminClient,
    BrokerUnavailable,
    Conflict,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
    ServerError,
    TimedOut,
    error_for,
)


@pytest.fixture
async def admin(broker: StandaloneProcess) -> AsyncIterator[AdminClient]:
    async with AdminClient(broker.admin_url, timeout=5) as client:
        yield client


async def test_tenant_namespace_topic_round_trip(admin: AdminClient) -> None:
    await admin.create_tenant("client-t", {"adminRoles": ["r"], "allowedClusters": []})
    with pytest.raises(Conflict):
        await admin.create_tenant("client-t", {})
    assert (await admin.get_tenant("client-t"))["adminRoles"] == ["r"]
    await admin.create_namespace("client-t", "ns")
    await admin.create_partitioned_topic("client-t", "ns", "p", 2)
    assert await admin.get_partitions("client-t", "ns", "p") == 2
    with pytest.raises(PreconditionFailed, match="only be increased"):
        await admin.update_partitions("client-t", "ns", "p", 1)
    await admin.update_partitions("client-t", "ns", "p", 3)
    await admin.create_topic("client-t", "ns", "plain")
    assert "persistent://client-t/ns/plain" in await admin.list_topics("client-t", "ns")
    with pytest.raises(Conflict, match="still has namespaces"):
        await admin.delete_tenant("client-t")
    await admin.delete_tenant("client-t", force=True)
    assert "client-t" not in await admin.list_tenants()


async def test_errors_carry_the_brokers_reason(admin: AdminClient) -> None:
    with pytest.raises(NotFound, match="tenant nobody does not exist"):
        await admin.create_namespace("nobody", "ns")
    await admin.create_tenant("client-e", {})
    await admin.create_namespace("client-e", "ns")
    bad = {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1}
    with pytest.raises(InvalidRequest) as info:
        await admin.set_namespace_policy("client-e", "ns", "persistence", bad)
    assert info.value.status == 400 and "write quorum" in info.value.reason
    assert not info.value.retryable


async def test_unreachable_broker_is_retryable() -> None:
    async with AdminClient(f"http://127.0.0.1:{free_port()}", timeout=2) as client:
        with pytest.raises(BrokerUnavailable) as info:
            await client.list_tenants()
        assert info.value.retryable
        assert not await client.healthy()


#: The standalone's in-process bookie (the one registered bookie of the session's broker).
STANDALONE_BOOKIE_ID = "standalone-bookie"


async def _standalone_bookie_holds_a_ledger(broker: StandaloneProcess, topic: str) -> None:
    client = Client(broker.service_url)
    try:
        producer = await client.create_producer(topic)
        await producer.send(b"pins a ledger to the only bookie")
    finally:
        await client.close()


async def test_bookie_calls(admin: AdminClient, broker: StandaloneProcess) -> None:
    """list, underreplicated, decommission and forget, each with the outcome the operator acts on."""
    (only,) = await admin.list_bookies()
    assert only.id == STANDALONE_BOOKIE_ID and only.host == "127.0.0.1" and only.port > 0
    assert not only.read_only and not only.decommissioning
    assert await admin.underreplicated_ledgers() == []

    # A bookie that holds nothing drains at once; a removed one is forgotten (twice is fine).
    gone = "client-gone-0.bk.ns.svc:3181"
    report = await admin.decommission_bookie(gone, wait=2)
    assert report.bookie == gone and report.complete and report.ledgers_moved == 0
    assert json.loads(json.dumps(report.to_json()))["ledgersMoved"] == 0
    await admin.forget_bookie(gone)
    await admin.forget_bookie(gone)

    # The standalone's one bookie: still running, and holding ledgers no other bookie could take.
    with pytest.raises(Conflict, match="still running") as running:
        await admin.forget_bookie(STANDALONE_BOOKIE_ID)
    assert not running.value.retryable
    await _standalone_bookie_holds_a_ledger(broker, "persistent://public/default/client-bookie-pin")
    with pytest.raises(PreconditionFailed, match="cannot drain") as impossible:
        await admin.decommission_bookie(STANDALONE_BOOKIE_ID, wait=2)
    assert impossible.value.status == 412
    # Refused before changing anything: the bookie is not flagged as decommissioning.
    (only,) = [b for b in await admin.list_bookies() if b.id == STANDALONE_BOOKIE_ID]
    assert not only.decommissioning


async def test_drain_and_forget_outcomes(admin: AdminClient, broker: StandaloneProcess) -> None:
    """What the BookieEnsemble handler sees of the calls above: DrainResult and forget's bool."""
    gone = "client-drain-1.bk.ns.svc:3181"
    done = await decommissioning.drain(admin, gone, step=2)
    assert done.done and not done.impossible
    assert done.message.startswith(f"bookie {gone} drained: {{") and '"complete": true' in done.message
    assert await decommissioning.forget(admin, gone)

    await _standalone_bookie_holds_a_ledger(broker, "persistent://public/default/client-drain-pin")
    refused = await decommissioning.drain(admin, STANDALONE_BOOKIE_ID, step=2)
    assert refused.impossible and not refused.done
    assert refused.message.startswith(f"bookie {STANDALONE_BOOKIE_ID} cannot be drained: cannot drain")
    assert not await decommissioning.forget(admin, STANDALONE_BOOKIE_ID)  # still running

    async with AdminClient(f"http://127.0.0.1:{free_port()}", timeout=2) as down:
        unreachable = await decommissioning.drain(down, gone, step=1)
        assert not unreachable.done and not unreachable.impossible
        assert "unreachable" in unreachable.message
        assert not await decommissioning.forget(down, gone)


def test_a_gateway_timeout_is_a_retryable_timed_out() -> None:
    """504 is how the broker says "drain still running": its own class, still a server error."""
    exc = error_for(504, "bookie b still referenced by 2 ledger(s)")
    assert isinstance(exc, TimedOut) and isinstance(exc, ServerError) and exc.retryable
    assert type(error_for(503, "x")) is ServerError
    assert type(error_for(418, "x")) is InvalidRequest
