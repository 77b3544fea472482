"""``magnetar-admin broker-stats load-report`` / ``load-balancer`` and ``brokers leader-broker``
against a real standalone: the broker's own load report in Pulsar's LocalBrokerData JSON, sampled
when asked, with the traffic of the topics it serves; the standalone leads its own load manager."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess

import magnetar as mg


def admin(sa: StandaloneProcess, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


LOCAL_BROKER_DATA = {
    "webServiceUrl", "pulsarServiceUrl", "cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut",
    "msgThroughputIn", "msgThroughputOut", "msgRateIn", "msgRateOut", "lastUpdate", "lastStats", "numTopics",
    "numBundles", "numConsumers", "numProducers", "bundles", "brokerVersionString", "loadReportType",
    "maxResourceUsage",
}  # fmt: skip


def test_load_report_is_pulsars_local_broker_data_with_this_brokers_traffic(standalone: StandaloneProcess) -> None:
    assert admin(standalone, "brokers", "leader-broker") == {
        "brokerId": "standalone",
        "serviceUrl": standalone.admin_url,
    }
    report = admin(standalone, "broker-stats", "load-report")
    assert LOCAL_BROKER_DATA <= set(report), sorted(LOCAL_BROKER_DATA - set(report))
    assert report["loadReportType"] == "LocalBrokerData" and report["webServiceUrl"] == standalone.admin_url
    cpu = report["cpu"]
    assert isinstance(cpu, dict) and cpu["limit"] >= 100.0  # 100 per core
    topic = f"persistent://public/default/lr-{uuid.uuid4().hex[:8]}"
    client = mg.Client(standalone.service_url)
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s")
        for i in range(200):
            producer.send(f"m{i}".encode())
        for _ in range(200):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))

        def traffic() -> dict[str, object] | None:
            r = admin(standalone, "broker-stats", "load-report")
            stats = r["lastStats"]
            assert isinstance(stats, dict)
            return r if any(s["topics"] >= 1 and s["producerCount"] == 1 for s in stats.values()) else None

        report = wait_for("the report to show the topic", traffic, timeout=30)
        stats = report["lastStats"]
        assert isinstance(stats, dict)
        (bundle,) = [b for b, s in stats.items() if b.startswith("public/default/") and s["producerCount"] == 1]
        assert bundle in report["bundles"]  # type: ignore[operator]
        assert report["numProducers"] == 1 and report["numConsumers"] == 1
    finally:
        client.close()
    lb = admin(standalone, "broker-stats", "load-balancer")
    assert lb["leaderBroker"] == "standalone" and lb["isLeader"] is True
