"""The admin REST API on a real standalone: tenants, namespaces, topics, policies, stats."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from tests.support.standalone import StandaloneProcess
from tests.support.standalone import admin_call as call

import magnetar
from magnetar.cli.admin import main as admin_main


def test_defaults_exist(standalone: StandaloneProcess) -> None:
    assert "public" in call(standalone, "GET", "/admin/v2/tenants")[1]
    assert "public/default" in call(standalone, "GET", "/admin/v2/namespaces/public")[1]


def test_tenant_namespace_topic_lifecycle(standalone: StandaloneProcess) -> None:
    assert call(standalone, "PUT", "/admin/v2/tenants/acme", {"adminRoles": ["a"], "allowedClusters": ["x"]})[0] == 204
    assert call(standalone, "PUT", "/admin/v2/tenants/acme", {})[0] == 409
    assert call(standalone, "GET", "/admin/v2/tenants/acme")[1] == {
        "adminRoles": ["a"],
        "allowedClusters": ["x"],
    }
    assert call(standalone, "PUT", "/admin/v2/namespaces/nobody/orders")[0] == 404
    assert call(standalone, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(standalone, "PUT", "/admin/v2/persistent/acme/orders/created/partitions", 4)[0] == 204
    assert call(standalone, "GET", "/admin/v2/persistent/acme/orders/created/partitions")[1] == {"partitions": 4}
    topics = call(standalone, "GET", "/admin/v2/persistent/acme/orders")[1]
    assert topics == [f"persistent://acme/orders/created-partition-{i}" for i in range(4)]
    status, body = call(standalone, "POST", "/admin/v2/persistent/acme/orders/created/partitions", 2)
    assert status == 412 and "increased" in body["reason"]
    assert call(standalone, "POST", "/admin/v2/persistent/acme/orders/created/partitions", 6)[0] == 204
    # A partition is a topic clients can use.
    client = magnetar.Client(standalone.service_url)
    try:
        client.create_producer("persistent://acme/orders/created-partition-5").send(b"p5")
    finally:
        client.close()
    assert call(standalone, "DELETE", "/admin/v2/tenants/acme")[0] == 409  # still has namespaces
    assert call(standalone, "DELETE", "/admin/v2/namespaces/acme/orders")[0] == 409  # still has topics
    assert call(standalone, "DELETE", "/admin/v2/persistent/acme/orders/created/partitions?force=true")[0] == 204
    assert call(standalone, "GET", "/admin/v2/persistent/acme/orders")[1] == []
    assert call(standalone, "DELETE", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(standalone, "DELETE", "/admin/v2/tenants/acme")[0] == 204
    assert call(standalone, "GET", "/admin/v2/tenants/acme")[0] == 404


def test_policies_are_validated_and_reported(standalone: StandaloneProcess) -> None:
    call(standalone, "PUT", "/admin/v2/tenants/pol", {})
    assert call(standalone, "PUT", "/admin/v2/namespaces/pol/ns")[0] == 204
    base = "/admin/v2/namespaces/pol/ns"
    status, body = call(
        standalone,
        "POST",
        base + "/persistence",
        {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 3},
    )
    assert status == 400 and "ack quorum" in body["reason"]
    assert (
        call(standalone, "POST", base + "/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1})[0] == 204
    )
    status, body = call(
        standalone,
        "POST",
        base + "/backlogQuota",
        {"limitSize": 10 * 1024 * 1024, "policy": "producer_request_hold"},
    )
    assert status == 412 and "retention" in body["reason"]
    assert call(standalone, "POST", base + "/messageTTL", 30)[0] == 204
    ns = call(standalone, "GET", base)[1]
    assert ns["message_ttl_in_seconds"] == 30
    assert ns["unenforced"] == []  # message TTL is enforced


def test_persistence_policy_applies_to_new_topics(standalone: StandaloneProcess) -> None:
    """Standalone has one bookie: a namespace asking for 3 replicas cannot take writes, and says so."""
    call(standalone, "PUT", "/admin/v2/tenants/rep", {})
    call(standalone, "PUT", "/admin/v2/namespaces/rep/three")
    assert (
        call(
            standalone,
            "POST",
            "/admin/v2/namespaces/rep/three/persistence",
            {"bookkeeperEnsemble": 3, "bookkeeperWriteQuorum": 3, "bookkeeperAckQuorum": 2},
        )[0]
        == 204
    )
    client = magnetar.Client(standalone.service_url)
    try:
        with pytest.raises(magnetar.MagnetarError) as info:
            client.create_producer("persistent://rep/three/t")
        assert "bookie" in str(info.value).lower()
    finally:
        client.close()


def test_topic_stats_report_backlog_and_consumers(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(topic, "stats-sub", receiver_queue_size=5)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(10):
            producer.send(str(i).encode())
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
        path = topic.removeprefix("persistent://")
        # The ack is durable when receive/ack of later messages flows; poll stats until it shows.
        stats = call(standalone, "GET", f"/admin/v2/persistent/{path}/stats")[1]
        assert stats["msgInCounter"] == 10
        assert stats["storageSize"] > 0
        sub = stats["subscriptions"]["stats-sub"]
        assert len(sub["consumers"]) == 1
        assert 9 <= sub["msgBacklog"] <= 10
        assert sub["unackedMessages"] >= 1
        assert [p["msgInCounter"] for p in stats["publishers"]] == [10]
    finally:
        client.close()


def test_lookup_names_the_serving_broker(standalone: StandaloneProcess, topic: str) -> None:
    """Pulsar's HTTP lookup: a standalone broker answers with its own service and admin URLs."""
    path = topic.removeprefix("persistent://")
    status, body = call(standalone, "GET", f"/lookup/v2/topic/persistent/{path}")
    assert status == 200
    assert body["brokerUrl"] == standalone.service_url
    assert body["httpUrl"].rstrip("/") == standalone.admin_url.rstrip("/")


def test_admin_cli(standalone: StandaloneProcess, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--admin-url", standalone.admin_url]
    assert admin_main([*url, "tenants", "create", "cli-t"]) == 0
    assert admin_main([*url, "namespaces", "create", "cli-t/ns"]) == 0
    assert admin_main([*url, "topics", "create-partitioned-topic", "persistent://cli-t/ns/x", "-p", "2"]) == 0
    capsys.readouterr()
    assert admin_main([*url, "topics", "list", "cli-t/ns"]) == 0
    assert capsys.readouterr().out.split() == [
        "persistent://cli-t/ns/x-partition-0",
        "persistent://cli-t/ns/x-partition-1",
    ]
    assert admin_main([*url, "tenants", "create", "cli-t"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_metrics_and_health(standalone: StandaloneProcess) -> None:
    with urllib.request.urlopen(standalone.admin_url + "/metrics") as resp:
        text = resp.read().decode()
    assert "magnetar_broker_messages_in" in text
    assert "magnetar_bookie" in text
    with urllib.request.urlopen(standalone.admin_url + "/admin/v2/brokers/health") as resp:
        assert resp.read() == b"ok"
    with urllib.request.urlopen(standalone.admin_url + "/ready") as resp:
        assert resp.status == 200


def test_bookie_admin_on_standalone(standalone: StandaloneProcess, topic: str) -> None:
    client = magnetar.Client(standalone.service_url)
    try:
        client.create_producer(topic).send(b"x")  # a ledger now lives on the only bookie
    finally:
        client.close()
    bookies = call(standalone, "GET", "/admin/v2/bookies")[1]
    assert [b["id"] for b in bookies] == ["standalone-bookie"]
    assert bookies[0]["decommissioning"] is False
    assert call(standalone, "GET", "/admin/v2/bookies/underreplicated")[1] == {"count": 0, "ledgers": []}
    # Draining the only bookie can never finish: refused up front, nothing marked.
    status, body = call(standalone, "POST", "/admin/v2/bookies/standalone-bookie/decommission?timeout=5")
    assert status == 412 and "cannot drain" in body["reason"]
    assert call(standalone, "GET", "/admin/v2/bookies")[1][0]["decommissioning"] is False
    # A running bookie cannot be forgotten; an unknown one can (idempotent clean-up after removal).
    status, body = call(standalone, "DELETE", "/admin/v2/bookies/standalone-bookie")
    assert status == 409 and "still running" in body["reason"]
    assert call(standalone, "DELETE", "/admin/v2/bookies/removed-bookie:3181")[0] == 204


def test_max_producers_and_consumers_per_topic_are_enforced(standalone: StandaloneProcess) -> None:
    call(standalone, "PUT", "/admin/v2/tenants/limits", {})
    call(standalone, "PUT", "/admin/v2/namespaces/limits/ns")
    assert call(standalone, "POST", "/admin/v2/namespaces/limits/ns/maxProducersPerTopic", 1)[0] == 204
    assert call(standalone, "POST", "/admin/v2/namespaces/limits/ns/maxConsumersPerTopic", 1)[0] == 204
    client = magnetar.Client(standalone.service_url)
    try:
        name = "persistent://limits/ns/t"
        client.create_producer(name)
        with pytest.raises(magnetar.MagnetarError) as producer_error:
            client.create_producer(name)
        assert type(producer_error.value).__name__ == "ProducerBusy"
        client.subscribe(name, "a")
        with pytest.raises(magnetar.MagnetarError) as consumer_error:
            client.subscribe(name, "b")
        assert type(consumer_error.value).__name__ == "ConsumerBusy"
        assert "maximum of 1 consumers" in str(consumer_error.value)
    finally:
        client.close()


def test_unload_closes_the_topic_and_clients_carry_on(standalone: StandaloneProcess) -> None:
    """Pulsar's ``topics unload``: the topic is closed (its ledger sealed) and loaded again by the
    clients' reconnection, with nothing lost."""
    name = "persistent://public/default/unload-me"
    client = magnetar.Client(standalone.service_url)
    try:
        consumer = client.subscribe(name, "s")
        producer = client.create_producer(name)
        producer.send(b"before")
        ledgers_before = call(standalone, "GET", "/admin/v2/persistent/public/default/unload-me/stats")[1]["ledgers"]
        assert admin_main(["--admin-url", standalone.admin_url, "topics", "unload", name]) == 0
        producer.send(b"after")  # the producer re-attaches to the reloaded topic
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(2)]
        assert got == [b"before", b"after"]
        stats = call(standalone, "GET", "/admin/v2/persistent/public/default/unload-me/stats")[1]
        assert len(stats["ledgers"]) == len(ledgers_before) + 1  # sealed on unload, a new one on load
        assert call(standalone, "PUT", "/admin/v2/persistent/public/default/nope/unload")[0] == 404
    finally:
        client.close()
