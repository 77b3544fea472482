"""Authorization across a cluster (WIRE.md R73-R74): two brokers over etcd, authentication and
authorization on, each broker with ``brokerClientAuthenticationParameters`` (its own superuser
token, role ``broker``).

- Forwarding: an admin call sent to the broker that does not own the topic is forwarded to the
  owner with the caller's credentials and authorized there for the caller. To see that, broker 0
  alone counts role ``ops0`` as a superuser: its own middleware lets ``ops0`` through, and only
  the owner (broker 1) can refuse it, which it does because the forwarded request carries
  ``ops0``'s token, not broker 0's superuser token.
- Grants live in the metadata store and each broker caches them behind a watch: a grant made
  through broker 0 admits a new producer on broker 1, a revoke made through broker 1 refuses a
  new producer on broker 0 and closes the producer and consumer already open there.
- Lookups through either broker are authorized (binary and HTTP).
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from itertools import count
from typing import Any

import jwt
import pytest
from tests.protocol.wire import Wire, open_consumer, open_producer, publish
from tests.support.cluster import LocalCluster
from tests.support.polling import wait_for

from magnetar.protocol import commands as c

KEY = secrets.token_bytes(32)
TENANT = "acme"


def token(role: str) -> str:
    return jwt.encode({"sub": role}, KEY, algorithm="HS256")


def call(url: str, role: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token(role)}"}
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status = resp.read(), resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    return status, json.loads(raw) if raw.strip() else None


def ok(url: str, method: str, path: str, body: Any = None) -> Any:
    status, answer = call(url, "admin", method, path, body)
    assert status < 400, (method, path, status, answer)
    return answer


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    secured = [
        "--authentication-enabled",
        "--token-secret-key",
        "data:;base64," + base64.b64encode(KEY).decode(),
        "--authorization-enabled",
        "--broker-client-authentication-parameters",
        f"token:{token('broker')}",
    ]
    cl = LocalCluster(
        tmp_path_factory.mktemp("authz-cluster"),
        bookies=1,
        brokers=2,
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        broker_args=secured,
    )
    cl.brokers[0].argv += ["--super-user-roles", "admin,broker,ops0"]  # ops0: a superuser of broker 0 only
    cl.brokers[1].argv += ["--super-user-roles", "admin,broker"]
    with cl:
        try:
            ok(cl.admin_urls[0], "PUT", f"/admin/v2/tenants/{TENANT}", {"adminRoles": ["alice"]})
            yield cl
        except BaseException:
            print(cl.log_tails())
            raise


def owner_index(cluster: LocalCluster, topic: str) -> int:
    answer = ok(cluster.admin_urls[0], "GET", f"/lookup/v2/topic/persistent/{topic.removeprefix('persistent://')}")
    port = int(answer["brokerUrl"].rsplit(":", 1)[1])
    return cluster.broker_ports.index(port)


def topic_owned_by(cluster: LocalCluster, broker: int) -> str:
    """A created topic, in a fresh namespace of ``TENANT``, whose bundle broker ``broker`` owns.
    Bundles go to brokers by rendezvous hashing of the bundle and the broker id (``host:port``,
    random ports), so the broker is not known in advance: try new namespaces until it fits."""
    for _ in range(40):
        ns = f"{TENANT}/ns-{uuid.uuid4().hex[:8]}"
        ok(cluster.admin_urls[0], "PUT", f"/admin/v2/namespaces/{ns}")
        for i in range(8):
            topic = f"persistent://{ns}/t-{i}"
            if owner_index(cluster, topic) == broker:
                ok(cluster.admin_urls[0], "PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}")
                return topic
    raise AssertionError(f"no topic landed on broker {broker}")


def ns_of(topic: str) -> str:
    return topic.removeprefix("persistent://").rsplit("/", 1)[0]


def wire_as(cluster: LocalCluster, broker: int, role: str) -> Wire:
    wire = Wire(cluster.broker_address(broker).service_url)
    answer = wire.request(c.connect("authz-cluster", auth_method=c.AUTH_METHOD_TOKEN, auth_data=token(role).encode()))
    assert answer["t"] == c.CONNECTED, answer
    return wire


def refused(answer: Any, message: str) -> None:
    assert (answer["t"], answer.get("code"), answer.get("message")) == (c.ERROR, "AuthorizationError", message), answer


def stats(cluster: LocalCluster, topic: str) -> dict[str, Any]:
    result: dict[str, Any] = ok(
        cluster.admin_urls[1], "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats"
    )
    return result


def grants(cluster: LocalCluster, broker: int, ns: str) -> Any:
    return ok(cluster.admin_urls[broker], "GET", f"/admin/v2/namespaces/{ns}/permissions")


def test_forwarded_admin_calls_are_authorized_on_the_owner_for_the_caller(cluster: LocalCluster) -> None:
    topic = topic_owned_by(cluster, 1)
    local = topic.removeprefix("persistent://")
    via_0 = cluster.admin_urls[0]
    # ops0 passes broker 0's own check (a superuser there); broker 1 owns the topic and refuses
    # ops0, so the forwarded requests reached it as ops0, not as broker 0's superuser "broker".
    assert call(via_0, "ops0", "GET", f"/admin/v2/persistent/{local}/stats") == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [GET_STATS] on topic [{topic}]"},
    )
    assert call(via_0, "ops0", "PUT", f"/admin/v2/persistent/{local}/subscription/evil") == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [SUBSCRIBE] on topic [{topic}]"},
    )
    assert call(via_0, "ops0", "DELETE", f"/admin/v2/persistent/{local}") == (
        401,
        {"reason": f"Unauthorized to validateTopicOperation for operation [DELETE_TOPIC] on topic [{topic}]"},
    )
    after = stats(cluster, topic)  # the topic is still there, without the subscription
    assert after["subscriptions"] == {}
    # The same calls by a role broker 1 admits: the tenant admin, and a role with a grant.
    ok(via_0, "POST", f"/admin/v2/namespaces/{ns_of(topic)}/permissions/reader", ["consume"])
    wait_for(  # the owner learns of the grant through its metadata watch
        "broker 1 to see the grant made through broker 0",
        lambda: call(via_0, "reader", "GET", f"/admin/v2/persistent/{local}/stats")[0] == 200,
    )
    status, answer = call(via_0, "reader", "PUT", f"/admin/v2/persistent/{local}/subscription/reader-sub")
    assert status == 204, answer
    status, answer = call(via_0, "reader", "GET", f"/admin/v2/persistent/{local}/stats")
    assert status == 200 and "reader-sub" in answer["subscriptions"], answer
    status, answer = call(via_0, "alice", "DELETE", f"/admin/v2/persistent/{local}/subscription/reader-sub")
    assert status == 204, answer
    assert stats(cluster, topic)["subscriptions"] == {}


def test_grant_on_broker_0_admits_a_new_producer_on_broker_1(cluster: LocalCluster) -> None:
    topic = topic_owned_by(cluster, 1)
    ids = count(1)
    with wire_as(cluster, 1, "writer") as wire:
        # refused first: broker 1 now holds the namespace's grants (none for writer) in its cache
        refused(wire.request(c.producer(topic, next(ids))), "Client is not authorized to Produce")
        ok(cluster.admin_urls[0], "POST", f"/admin/v2/namespaces/{ns_of(topic)}/permissions/writer", ["produce"])

        def admitted() -> bool:
            pid = next(ids)
            answer = wire.request(c.producer(topic, pid))
            if answer["t"] == c.PRODUCER_SUCCESS:
                return bool(publish(wire, pid, 0, b"after the grant")["t"] == c.SEND_RECEIPT)
            refused(answer, "Client is not authorized to Produce")
            return False

        wait_for("broker 1 to see the grant made through broker 0", admitted)
    assert stats(cluster, topic)["msgInCounter"] == 1


def test_revoke_on_broker_1_refuses_and_closes_producers_on_broker_0(cluster: LocalCluster) -> None:
    topic = topic_owned_by(cluster, 0)
    ok(cluster.admin_urls[1], "POST", f"/admin/v2/namespaces/{ns_of(topic)}/permissions/app", ["consume", "produce"])
    with wire_as(cluster, 0, "app") as wire:

        def admitted() -> bool:
            answer = wire.request(c.lookup(topic))
            return bool(answer["t"] == c.LOOKUP_RESPONSE)

        wait_for("broker 0 to see the grant made through broker 1", admitted)
        open_producer(wire, topic, producer_id=1)
        open_consumer(wire, topic, "app-sub", 1)
        assert publish(wire, 1, 0, b"before the revoke")["t"] == c.SEND_RECEIPT
        ok(cluster.admin_urls[1], "DELETE", f"/admin/v2/namespaces/{ns_of(topic)}/permissions/app")
        # as Pulsar's onPoliciesUpdate: the open producer and consumer are closed on broker 0 ...
        assert wire.next(lambda f: f.get("t") == c.CLOSE_PRODUCER) == c.close_producer_pushed(1)
        assert wire.next(lambda f: f.get("t") == c.CLOSE_CONSUMER) == c.close_consumer_pushed(1)
        # ... and the new ones refused
        refused(wire.request(c.producer(topic, 2)), "Client is not authorized to Produce")
        refused(
            wire.request(c.subscribe(topic, "app-sub", 2, c.SUB_EXCLUSIVE)), "Client is not authorized to subscribe"
        )
        refused(wire.request(c.lookup(topic)), "Client is not authorized to Lookup")
    assert "app" not in grants(cluster, 0, ns_of(topic))
    after = stats(cluster, topic)
    assert after["msgInCounter"] == 1 and after["publishers"] == []
    assert after["subscriptions"]["app-sub"]["consumers"] == []


def test_lookups_through_either_broker_are_authorized(cluster: LocalCluster) -> None:
    topic = topic_owned_by(cluster, 1)
    local = topic.removeprefix("persistent://")
    for broker in (0, 1):
        with wire_as(cluster, broker, "looker") as wire:
            refused(wire.request(c.lookup(topic)), "Client is not authorized to Lookup")
            refused(wire.request(c.partitioned_metadata(topic)), "Client is not authorized to Get Partition Metadata")
        assert call(cluster.admin_urls[broker], "looker", "GET", f"/lookup/v2/topic/persistent/{local}") == (
            401,
            {"reason": f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [{topic}]"},
        )
    ok(cluster.admin_urls[0], "POST", f"/admin/v2/persistent/{local}/permissions/looker", ["consume"])
    owner = cluster.broker_address(1).service_url
    for broker in (0, 1):
        with wire_as(cluster, broker, "looker") as wire:

            def looked_up(w: Wire = wire) -> Any:
                answer = w.request(c.lookup(topic))
                return answer if answer["t"] == c.LOOKUP_RESPONSE else None

            answer = wait_for(f"broker {broker} to admit the lookup", looked_up)
            assert answer["broker_url"] == owner, answer
        status, answer = call(cluster.admin_urls[broker], "looker", "GET", f"/lookup/v2/topic/persistent/{local}")
        assert status == 200 and answer["brokerUrl"] == owner, answer
