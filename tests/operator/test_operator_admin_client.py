"""The operator's admin client against a real standalone broker: calls and their error classes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.operator.harness import free_port
from tests.support.standalone import StandaloneProcess

from magnetar_operator.admin import (
    AdminClient,
    BrokerUnavailable,
    Conflict,
    InvalidRequest,
    NotFound,
    PreconditionFailed,
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
