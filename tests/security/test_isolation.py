"""Namespace isolation policies (broker groups) on a real cluster: etcd, one bookie, five brokers.

Brokers 0 and 1 are group A (tenant ``iso-a``), 2 and 3 group B (tenant ``iso-b``), broker 4 is
shared (no policy's primary). Broker names are ``127.0.0.1:<port>``, so the policies' primary
regexes name ports. Owners are read from the metadata store (the ownership keys), never inferred
from the client. The kill -9 scenario has its own cluster (``test_isolation_faults.py``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.protocol.wire import session
from tests.support.cluster import LocalCluster, wait_until

import magnetar
from magnetar.protocol import commands as c

CLUSTER = "local"  # ``magnetar broker --cluster`` default
POLICIES = f"/admin/v2/clusters/{CLUSTER}/namespaceIsolationPolicies"


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.strip() else None


def group_regex(cluster: LocalCluster, indexes: list[int]) -> str:
    ports = "|".join(str(cluster.broker_ports[i]) for i in indexes)
    return rf"127\.0\.0\.1:({ports})"


def policy(namespaces: str, primary: str, min_limit: int = 1) -> dict[str, Any]:
    return {
        "namespaces": [namespaces],
        "primary": [primary],
        "secondary": [],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": str(min_limit), "usage_threshold": "100"},
        },
    }


def setup_groups(cluster: LocalCluster, a: list[int], b: list[int], namespaces: list[str]) -> None:
    admin = cluster.admin_urls[0]
    for name, tenant, members in (("group-a", "iso-a", a), ("group-b", "iso-b", b)):
        status, _ = call(admin, "POST", f"{POLICIES}/{name}", policy(f"{tenant}/.*", group_regex(cluster, members)))
        assert status == 204
        assert call(admin, "PUT", f"/admin/v2/tenants/{tenant}", {"adminRoles": [], "allowedClusters": [CLUSTER]})[
            0
        ] in (204, 409)
        for ns in namespaces:
            assert call(admin, "PUT", f"/admin/v2/namespaces/{tenant}/{ns}")[0] in (204, 409)


async def owners(cluster: LocalCluster) -> dict[str, str]:
    async with cluster.metadata() as md:
        return await md.ownership()


def owners_now(cluster: LocalCluster) -> dict[str, str]:
    import asyncio

    return asyncio.run(owners(cluster))


def http_lookup(cluster: LocalCluster, topic: str, broker: int) -> tuple[int, Any]:
    path = topic.removeprefix("persistent://")
    return call(cluster.admin_urls[broker], "GET", f"/lookup/v2/topic/persistent/{path}")


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].rstrip("/"))


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    base = tmp_path_factory.mktemp("isolation")
    with LocalCluster(base, bookies=1, brokers=5, ensemble_size=1, write_quorum=1, ack_quorum=1) as cluster:
        try:
            setup_groups(cluster, [0, 1], [2, 3], ["ns1", "ns2"])
            yield cluster
        except BaseException:
            print(cluster.log_tails())
            raise


def test_every_bundle_of_each_tenant_lands_in_its_group(groups: LocalCluster) -> None:
    a_ports = {groups.broker_ports[i] for i in (0, 1)}
    b_ports = {groups.broker_ports[i] for i in (2, 3)}
    for tenant, ports in (("iso-a", a_ports), ("iso-b", b_ports)):
        for ns in ("ns1", "ns2"):
            for i in range(24):  # 4 bundles a namespace: 24 names reach every one of them
                topic = f"persistent://{tenant}/{ns}/t-{i}"
                status, answer = http_lookup(groups, topic, broker=i % 5)  # asked through any broker
                assert status == 200, answer
                assert port_of(answer["brokerUrl"]) in ports, (topic, answer)
    held = owners_now(groups)
    for tenant, ports in (("iso-a", a_ports), ("iso-b", b_ports)):
        mine = {
            p: o for p, o in held.items() if p.startswith((f"/ownership/{tenant}/ns1/", f"/ownership/{tenant}/ns2/"))
        }
        assert len(mine) == 8, mine  # every bundle of both namespaces was placed
        assert {int(owner.rsplit(":", 1)[1]) for owner in mine.values()} <= ports, mine
    # Served for real: a message goes through the owner of a tenant-a and of a tenant-b topic.
    with magnetar.Client(groups.service_url, operation_timeout_seconds=30) as client:
        for tenant in ("iso-a", "iso-b"):
            topic = f"persistent://{tenant}/ns1/served"
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"hello " + tenant.encode())
            assert consumer.receive(timeout_millis=10_000).data() == b"hello " + tenant.encode()


def test_a_broker_outside_the_group_refuses_the_topic(groups: LocalCluster) -> None:
    ns = f"fresh{uuid.uuid4().hex[:6]}"  # nothing of it is owned yet
    assert call(groups.admin_urls[0], "PUT", f"/admin/v2/namespaces/iso-a/{ns}")[0] == 204
    topic = f"persistent://iso-a/{ns}/direct"
    b_broker = groups.broker_address(2).service_url
    with session(b_broker) as wire:
        answer = wire.request(c.producer(topic, 1))
        assert answer["t"] == c.ERROR and answer["code"] == "ServiceNotReady", answer
        assert f"may not own namespace iso-a/{ns}: namespace isolation policy group-a" in answer["message"]
        answer = wire.request(c.subscribe(topic, "s", 1, c.SUB_EXCLUSIVE))
        assert answer["t"] == c.ERROR and answer["code"] == "ServiceNotReady", answer
        # A lookup on that broker redirects to a group-A broker instead.
        answer = wire.request(c.lookup(topic))
        assert answer["t"] == c.LOOKUP_RESPONSE and answer["redirect"] is True, answer
        assert port_of(answer["broker_url"]) in {groups.broker_ports[0], groups.broker_ports[1]}
    # Nothing was loaded or taken: no ownership, no topic created by the refused producer.
    assert not [p for p in owners_now(groups) if p.startswith(f"/ownership/iso-a/{ns}/")]
    assert call(groups.admin_urls[2], "GET", f"/admin/v2/persistent/iso-a/{ns}") == (200, [])


def test_a_namespace_without_a_policy_goes_to_shared_brokers(groups: LocalCluster) -> None:
    admin = groups.admin_urls[0]
    assert call(admin, "PUT", "/admin/v2/namespaces/public/shared1")[0] in (204, 409)
    shared = groups.broker_ports[4]
    for i in range(24):
        status, answer = http_lookup(groups, f"persistent://public/shared1/t-{i}", broker=i % 4)
        assert status == 200, answer
        assert port_of(answer["brokerUrl"]) == shared, answer
    held = owners_now(groups)
    mine = {p: o for p, o in held.items() if p.startswith("/ownership/public/shared1/")}
    assert len(mine) == 4 and set(mine.values()) == {f"127.0.0.1:{shared}"}, mine


def test_policies_rest_round_trip_and_bad_policies_refused(groups: LocalCluster) -> None:
    admin = groups.admin_urls[3]
    before = call(admin, "GET", POLICIES)
    assert before[0] == 200 and set(before[1]) == {"group-a", "group-b"}
    assert before[1]["group-a"] == policy("iso-a/.*", group_regex(groups, [0, 1]))
    # Written through one broker, read through another (the metadata store holds them).
    new = policy("elsewhere/.*", r"nohost\.example:1")
    assert call(groups.admin_urls[1], "POST", f"{POLICIES}/spare", new) == (204, None)
    assert call(admin, "GET", f"{POLICIES}/spare") == (200, new)
    bad_bodies = {
        "invalid regex": {**new, "primary": ["127.0.0.1:(("]},
        "no primary": {**new, "primary": []},
        "no namespaces": {**new, "namespaces": []},
        "unknown failover type": {**new, "auto_failover_policy": {"policy_type": "nope", "parameters": {}}},
        "min_limit not a number": {
            **new,
            "auto_failover_policy": {"policy_type": "min_available", "parameters": {"min_limit": "x"}},
        },
    }
    reasons = {
        "invalid regex": "primary regex '127.0.0.1:((' is invalid",
        "no primary": "primary must name at least one regular expression",
        "no namespaces": "namespaces must name at least one regular expression",
        "unknown failover type": "auto_failover_policy.policy_type must be min_available",
        "min_limit not a number": "parameter min_limit must be an integer",
    }
    for what, body in bad_bodies.items():
        status, answer = call(admin, "POST", f"{POLICIES}/spare", body)
        assert status == 400, what
        assert answer["reason"].startswith("Invalid format of input policy data. policy: spare"), answer
        assert reasons[what] in answer["reason"], (what, answer)
    assert call(admin, "GET", f"{POLICIES}/spare") == (200, new)  # untouched by the refusals
    assert call(admin, "GET", "/admin/v2/clusters/other/namespaceIsolationPolicies")[0] == 404
    brokers = call(admin, "GET", f"{POLICIES}/brokers")[1]
    by_name = {b["brokerName"]: b for b in brokers}
    assert by_name[f"127.0.0.1:{groups.broker_ports[0]}"]["policyName"] == "group-a"
    assert by_name[f"127.0.0.1:{groups.broker_ports[0]}"]["isPrimary"] is True
    assert by_name[f"127.0.0.1:{groups.broker_ports[4]}"]["policyName"] is None
    one = call(admin, "GET", f"{POLICIES}/brokers/127.0.0.1:{groups.broker_ports[2]}")
    assert one[0] == 200 and one[1]["policyName"] == "group-b"
    assert call(admin, "DELETE", f"{POLICIES}/spare") == (204, None)
    assert call(admin, "GET", f"{POLICIES}/spare")[0] == 404
    assert call(admin, "GET", POLICIES) == before


def cli(groups: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", groups.admin_urls[4], *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=dict(os.environ))


def test_cli_round_trip_as_pulsar_admin(groups: LocalCluster) -> None:
    group = "ns-isolation-policy"
    done = cli(
        groups,
        group,
        "set",
        CLUSTER,
        "cli-pol",
        "--namespaces",
        "cli-t/a,cli-t/b",
        "--primary",
        r"nohost\.example",
        "--secondary",
        r"other\.example:[0-9]{1,5}",
        "--auto-failover-policy-type",
        "min_available",
        "--auto-failover-policy-params",
        "min_limit=2,usage_threshold=80",
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(cli(groups, group, "get", CLUSTER, "cli-pol").stdout)
    assert got == {
        "namespaces": ["cli-t/a", "cli-t/b"],
        "primary": [r"nohost\.example"],
        "secondary": [r"other\.example:[0-9]{1,5}"],
        "auto_failover_policy": {
            "policy_type": "min_available",
            "parameters": {"min_limit": "2", "usage_threshold": "80"},
        },
    }
    assert "cli-pol" in json.loads(cli(groups, group, "list", CLUSTER).stdout)
    listed = json.loads(cli(groups, group, "brokers", CLUSTER).stdout)
    assert len({b["brokerName"] for b in listed}) == 5
    one = json.loads(cli(groups, group, "broker", CLUSTER, "--broker", f"127.0.0.1:{groups.broker_ports[1]}").stdout)
    assert one["policyName"] == "group-a"
    bad = cli(
        groups,
        group,
        "set",
        CLUSTER,
        "cli-pol",
        "--namespaces",
        "cli-t/.*",
        "--primary",
        "((",
        "--auto-failover-policy-type",
        "min_available",
        "--auto-failover-policy-params",
        "min_limit=1",
    )
    assert bad.returncode == 1
    assert re.search(r"error: Invalid format of input policy data\. policy: cli-pol.*\(HTTP 400\)", bad.stderr)
    assert json.loads(cli(groups, group, "get", CLUSTER, "cli-pol").stdout) == got  # unchanged
    assert cli(groups, group, "delete", CLUSTER, "cli-pol").returncode == 0
    assert "cli-pol" not in json.loads(cli(groups, group, "list", CLUSTER).stdout)


def test_admin_calls_through_a_broker_outside_the_group_are_forwarded_to_it(groups: LocalCluster) -> None:
    ns = f"adm{uuid.uuid4().hex[:6]}"
    shared = groups.admin_urls[4]
    assert call(shared, "PUT", f"/admin/v2/namespaces/iso-b/{ns}")[0] == 204
    assert call(shared, "PUT", f"/admin/v2/persistent/iso-b/{ns}/made")[0] == 204
    status, stats = call(shared, "GET", f"/admin/v2/persistent/iso-b/{ns}/made/stats")  # loads it on its owner
    assert status == 200 and stats["publishers"] == [], stats
    held = {o for p, o in owners_now(groups).items() if p.startswith(f"/ownership/iso-b/{ns}/")}
    assert len(held) == 1 and held <= {f"127.0.0.1:{groups.broker_ports[i]}" for i in (2, 3)}, held


def test_a_policy_change_moves_owned_bundles_to_the_new_group(groups: LocalCluster) -> None:
    """R79: brokers 0 and 1 are already primaries (group A), so the shared set does not change."""
    admin = groups.admin_urls[4]
    assert call(admin, "PUT", "/admin/v2/tenants/iso-m", {"adminRoles": [], "allowedClusters": [CLUSTER]})[0] == 204
    assert call(admin, "PUT", "/admin/v2/namespaces/iso-m/ns")[0] == 204
    assert call(admin, "POST", f"{POLICIES}/mover", policy("iso-m/.*", group_regex(groups, [0])))[0] == 204
    topic = "persistent://iso-m/ns/moving"
    first, second = (f"127.0.0.1:{groups.broker_ports[i]}" for i in (0, 1))
    with magnetar.Client(groups.service_url, operation_timeout_seconds=30) as client:
        client.subscribe(topic, "keep").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        producer.close()
    assert {o for p, o in owners_now(groups).items() if p.startswith("/ownership/iso-m/")} == {first}

    assert call(admin, "POST", f"{POLICIES}/mover", policy("iso-m/.*", group_regex(groups, [1])))[0] == 204
    wait_until(
        lambda: first not in {o for p, o in owners_now(groups).items() if p.startswith("/ownership/iso-m/")},
        timeout=20,
        what="broker 0 gave the bundle up",
    )
    with magnetar.Client(groups.service_url, operation_timeout_seconds=30) as client:
        consumer = client.subscribe(topic, "keep")
        assert [consumer.receive(timeout_millis=10_000).data() for _ in range(5)] == [
            f"m{i}".encode() for i in range(5)
        ]
    assert {o for p, o in owners_now(groups).items() if p.startswith("/ownership/iso-m/")} == {second}
    assert call(admin, "DELETE", f"{POLICIES}/mover")[0] == 204
