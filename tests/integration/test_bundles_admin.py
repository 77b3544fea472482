"""Namespace bundles through the admin API and ``magnetar-admin`` on a real standalone: the ranges
as Pulsar's BundlesData, ``namespaces create --bundles``, splits by both algorithms, Pulsar's 412s,
``loadBalancerNamespaceMaximumBundles``, ``ownedNamespaces``, ``brokers shutdown`` ending the
process with exit code 0, and each CLI mistake in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

from magnetar.broker.cluster.ownership import topic_hash
from magnetar.broker.loadbalance.bundle_ranges import BundleRanges
from magnetar.protocol.topic_name import TopicName

MAX_BUNDLES = 6


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone whose namespaces may have at most ``MAX_BUNDLES`` bundles."""
    with run_standalone(
        tmp_path_factory.mktemp("bundles"), "--load-balancer-namespace-maximum-bundles", str(MAX_BUNDLES)
    ) as s:
        yield s


def admin(sa: StandaloneProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.admin", "--admin-url", sa.admin_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def new_namespace(sa: StandaloneProcess, *create_args: str) -> str:
    ns = f"public/b-{uuid.uuid4().hex[:8]}"
    done = admin(sa, "namespaces", "create", ns, *create_args)
    assert done.returncode == 0, done.stderr
    return ns


def ranges(sa: StandaloneProcess, ns: str) -> BundleRanges:
    status, doc = admin_call(sa, "GET", f"/admin/v2/namespaces/{ns}/bundles")
    assert status == 200, doc
    return BundleRanges.from_json(doc)


def test_public_default_has_four_equal_bundles(sa: StandaloneProcess) -> None:
    status, doc = admin_call(sa, "GET", "/admin/v2/namespaces/public/default/bundles")
    assert status == 200
    assert doc == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }


def test_create_with_bundles_and_the_cli_prints_them(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "--bundles", "2")
    done = admin(sa, "namespaces", "bundles", ns)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"], "numBundles": 2}
    body = {"bundles": {"boundaries": ["0x00000000", "0x10000000", "0xffffffff"], "numBundles": 2}}
    status, _ = admin_call(sa, "PUT", f"/admin/v2/namespaces/public/given-{uuid.uuid4().hex[:6]}", body)
    assert status == 204
    status, reason = admin_call(sa, "PUT", "/admin/v2/namespaces/public/bad-bundles", {"bundles": {"numBundles": 0}})
    assert status == 412, reason


def test_split_by_range_halves_the_bundle(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "-b", "2")
    done = admin(sa, "namespaces", "split-bundle", ns, "-b", "0x80000000_0xffffffff", "-san", "range_equally_divide")
    assert done.returncode == 0, done.stderr
    assert ranges(sa, ns).names() == ["0x00000000_0x80000000", "0x80000000_0xbfffffff", "0xbfffffff_0xffffffff"]


def test_split_by_topic_count_needs_two_topics(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "--bundles", "1")
    path = f"/admin/v2/namespaces/{ns}/0x00000000_0xffffffff/split?splitAlgorithmName=topic_count_equally_divide"
    assert admin_call(sa, "PUT", f"/admin/v2/persistent/{ns}/only")[0] == 204
    assert admin_call(sa, "PUT", path)[0] == 204  # as Pulsar: no boundary, nothing split, success
    assert ranges(sa, ns).count == 1
    assert admin_call(sa, "PUT", f"/admin/v2/persistent/{ns}/second")[0] == 204
    assert admin_call(sa, "PUT", path)[0] == 204
    after = ranges(sa, ns)
    assert after.count == 2
    sides = {after.find(topic_hash(TopicName.parse(f"persistent://{ns}/{t}"))) for t in ("only", "second")}
    assert len(sides) == 2  # one topic on each side


def test_split_refusals_are_pulsars_412s(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "--bundles", "2")
    status, body = admin_call(sa, "PUT", f"/admin/v2/namespaces/{ns}/0x00000000_0x40000000/split")
    assert status == 412 and "Invalid bundle range" in body["reason"]
    status, body = admin_call(sa, "PUT", f"/admin/v2/namespaces/{ns}/0x00000000_0x80000000/split?splitAlgorithmName=x")
    assert status == 412 and body["reason"].startswith("Unsupported namespace bundle split algorithm")
    status, _ = admin_call(sa, "GET", "/admin/v2/namespaces/public/no-such-ns/bundles")
    assert status == 404


def test_split_stops_at_the_namespace_maximum(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "--bundles", str(MAX_BUNDLES))
    first = ranges(sa, ns).names()[0]
    status, body = admin_call(sa, "PUT", f"/admin/v2/namespaces/{ns}/{first}/split")
    assert status == 412 and "loadBalancerNamespaceMaximumBundles" in body["reason"], body
    assert ranges(sa, ns).count == MAX_BUNDLES


def test_unload_of_a_namespace_and_of_a_bundle(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "--bundles", "2")
    assert admin(sa, "namespaces", "unload", ns).returncode == 0
    assert admin(sa, "namespaces", "unload", ns, "--bundle", "0x00000000_0x80000000").returncode == 0


def test_owned_namespaces_lists_the_bundles_of_loaded_topics(sa: StandaloneProcess) -> None:
    ns = new_namespace(sa, "--bundles", "2")
    assert admin_call(sa, "PUT", f"/admin/v2/persistent/{ns}/owned")[0] == 204
    assert admin_call(sa, "GET", f"/admin/v2/persistent/{ns}/owned/stats")[0] == 200  # loads it
    bundle = ranges(sa, ns).find(topic_hash(TopicName.parse(f"persistent://{ns}/owned")))
    cluster = admin_call(sa, "GET", "/admin/v2/brokers/configuration/runtime")[1]["clusterName"]
    status, owned = admin_call(sa, "GET", f"/admin/v2/brokers/{cluster}/standalone/ownedNamespaces")
    assert status == 200
    assert owned[f"{ns}/{bundle}"]["is_active"] is True


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["namespaces", "unload", "public/default", "-d", "127.0.0.1:1"], "--destinationBroker cannot be set"),
        (["namespaces", "split-bundle", "public/default", "-b", "0x1"], "Invalid bundle range: 0x1"),
        (["namespaces", "create", "public/zero", "-b", "0"], "Invalid number of bundles"),
        (["namespaces", "split-bundle", "public/default", "-b", "0x00000000_0x00000001"], "(HTTP 412)"),
        (["namespaces", "split-bundle", "public/default", "-b", "0x00000000_0x40000000", "-san", "x"], "Unsupported"),
        (["namespaces", "bundles", "public/no-such-ns"], "(HTTP 404)"),
    ],
)
def test_cli_mistakes_are_one_line(sa: StandaloneProcess, args: list[str], says: str) -> None:
    assert says in one_line(admin(sa, *args))


def test_brokers_shutdown_ends_the_standalone_with_exit_code_zero(tmp_path: Path) -> None:
    with run_standalone(tmp_path) as fresh:
        assert admin_call(fresh, "PUT", "/admin/v2/persistent/public/default/before-shutdown")[0] == 204
        done = admin(fresh, "brokers", "shutdown", "--max-concurrent-unload-per-sec", "5")
        assert done.returncode == 0, done.stderr
        assert fresh.proc is not None
        assert fresh.proc.wait(60) == 0, fresh.log_tail()


def test_a_namespace_keeps_the_bundles_it_was_created_with(sa: StandaloneProcess) -> None:
    """The default count is stored at creation, as Pulsar stores it, so a broker started later with
    another defaultNumberOfNamespaceBundles computes the same bundle for every topic."""
    ns = new_namespace(sa)
    status, doc = admin_call(sa, "GET", f"/admin/v2/namespaces/{ns}")
    assert status == 200
    assert doc["bundles"] == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
