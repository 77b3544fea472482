"""R27-R28 of WIRE.md: ownership and redirects in a cluster, and the client's reconnection backoff.

R27 needs a real cluster (etcd, one bookie, two brokers as processes). What the client does with
the answers (following redirects, retrying ``ServiceNotReady`` with backoff, re-creating its
producers and consumers after a drop) is tested against the fake broker in
``tests/client/test_client_lookup.py`` and ``tests/client/test_client_reconnect.py``.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from tests.support.cluster import LocalCluster, two_broker_cluster

from magnetar.client import aio
from magnetar.client.net.reconnect import Backoff
from magnetar.client.net.service_url import normalize_url
from magnetar.protocol import commands as c

from .wire import Wire, session


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "cluster")


def _put(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=30) as resp:
        return int(resp.status)


def _lookup(url: str, topic: str) -> tuple[str, bool]:
    with session(url) as wire:
        answer = wire.request(c.lookup(topic))
    assert answer["t"] == c.LOOKUP_RESPONSE, answer
    return normalize_url(answer["broker_url"]), answer["redirect"]


def test_r27_one_owner_redirects_to_it_and_others_refuse_with_service_not_ready(
    cluster: LocalCluster, topic: str
) -> None:
    brokers = [normalize_url(cluster.broker_address(i).service_url) for i in range(2)]
    # Follow the answers from the first broker to the owner (redirect: false names it).
    url, redirect = _lookup(brokers[0], topic)
    hops = 0
    while redirect:
        hops += 1
        assert hops <= 2, "redirect loop"
        url, redirect = _lookup(url, topic)
    owner = url
    assert owner in brokers
    other = next(b for b in brokers if b != owner)
    # Asked directly, the owner names itself; the other broker names the owner, or redirects to it.
    assert _lookup(owner, topic) == (owner, False)
    assert _lookup(other, topic)[0] == owner
    with session(other) as wire:
        refused = wire.request(c.producer(topic, 1))
        assert (refused["t"], refused["code"]) == (c.ERROR, "ServiceNotReady")
        refused = wire.request(c.subscribe(topic, "s", 2, c.SUB_EXCLUSIVE))
        assert (refused["t"], refused["code"]) == (c.ERROR, "ServiceNotReady")
    with session(owner) as wire:
        assert wire.request(c.producer(topic, 1))["t"] == c.PRODUCER_SUCCESS
        assert wire.request(c.subscribe(topic, "s", 2, c.SUB_EXCLUSIVE))["t"] == c.SUCCESS
    with Wire(other) as wire:  # the refusals left the other broker serving
        assert wire.request(c.connect("wire-tests"))["t"] == c.CONNECTED


# ---------------------------------------------------------------------------------------------- R28


def test_r28_client_backoff_starts_at_100ms_and_stops_doubling_at_30s() -> None:
    backoff = aio.Client("magnetar://127.0.0.1:1").new_backoff()
    assert (backoff.initial, backoff.maximum, backoff.jitter) == (0.1, 30.0, 0.1)
    no_jitter = Backoff(backoff.initial, backoff.maximum, rng=lambda: 0.0)
    delays = [no_jitter.next() for _ in range(12)]
    assert delays[:3] == pytest.approx([0.1, 0.2, 0.4]) and delays[-3:] == [30.0, 30.0, 30.0]


def test_r28_backoff_doubles_from_initial_up_to_max_and_resets() -> None:
    b = Backoff(0.1, 1.0, rng=lambda: 0.0)
    assert [round(b.next(), 6) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next() == pytest.approx(0.1)


def test_r28_backoff_jitter_shortens_each_delay_by_at_most_a_tenth() -> None:
    b = Backoff(0.1, 30.0, rng=lambda: 1.0)
    assert [round(b.next(), 6) for _ in range(3)] == [0.09, 0.18, 0.36]
    real = Backoff(0.1, 30.0)
    for base in (0.1, 0.2, 0.4, 0.8):
        assert 0.9 * base <= real.next() <= base


def test_http_lookup_names_the_owner_from_either_broker(cluster: LocalCluster, topic: str) -> None:
    """Pulsar's HTTP lookup: each broker answers with the one owner, the same one the binary lookup
    names. Broker 0 is asked first, while the topic is unowned: for a topic placed on broker 1 it
    must ask broker 1 for it (fresh topics are tried until one is placed there).

    Each try is a topic in a namespace of its own: placement hashes the bundle (namespace and hash
    range) with the broker ids, and a namespace has only 4 bundles, so topics of one namespace all
    landed on broker 0 one time in 16 (the brokers' ids are their random ports). Sixteen namespaces
    make that 1 in 65,536."""
    service = [normalize_url(cluster.broker_address(i).service_url) for i in range(2)]
    for n in range(16):
        namespace = f"lookup-{uuid.uuid4().hex[:8]}"
        status = _put(cluster.admin_urls[0] + f"/admin/v2/namespaces/public/{namespace}")
        assert status == 204, status
        name = f"persistent://public/{namespace}/{topic.rsplit('/', 1)[1]}-{n}"
        path = "/lookup/v2/topic/persistent/" + name.removeprefix("persistent://")
        answers = [cluster.admin_get(path, broker=i) for i in (0, 1, 0)]
        owners = {normalize_url(a["brokerUrl"]) for a in answers}
        assert len(owners) == 1, answers
        owner = owners.pop()
        assert _lookup(owner, name) == (owner, False)
        assert {a["httpUrl"].rstrip("/") for a in answers} == {cluster.admin_urls[service.index(owner)]}
        if owner == service[1]:
            return
    pytest.fail("no topic of 16 was placed on broker 1: the forwarded lookup never ran")
