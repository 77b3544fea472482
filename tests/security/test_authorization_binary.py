"""Authorization on the binary protocol (WIRE.md R70-R72) against a real standalone broker with
authentication and authorization on (the ``secured`` broker of test_authorization_rest.py).

Connections are driven by hand (``tests/protocol/wire.py``) so that the broker's answer is what
is checked: the exact ``AuthorizationError`` and message. Each refusal is also checked for
leaving the data untouched: no message stored, no subscription made, no topic auto-created.
The last tests use the client library, which must raise ``magnetar.AuthorizationError``.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.protocol.wire import Wire, open_consumer, open_producer, publish
from tests.security.test_authorization_rest import SUPERUSER, Secured, start_secured

import magnetar
from magnetar.protocol import commands as c


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from start_secured(tmp_path_factory.mktemp("authz-binary"))


def wire_as(secured: Secured, role: str) -> Wire:
    wire = Wire(secured.sa.service_url)
    answer = wire.request(
        c.connect("authz-tests", auth_method=c.AUTH_METHOD_TOKEN, auth_data=secured.token(role).encode())
    )
    assert answer["t"] == c.CONNECTED, answer
    return wire


def refused(answer: Any, message: str) -> None:
    assert (answer["t"], answer["code"], answer["message"]) == (c.ERROR, "AuthorizationError", message), answer


def stats(secured: Secured, topic: str) -> dict[str, Any]:
    result: dict[str, Any] = secured.ok("GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    return result


def exists(secured: Secured, topic: str) -> bool:
    status, _ = secured.call(SUPERUSER, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    return status == 200


def grant(secured: Secured, ns: str, role: str, *actions: str) -> None:
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/{role}", list(actions))


PRODUCE_REFUSED = "Client is not authorized to Produce"
SUBSCRIBE_REFUSED = "Client is not authorized to subscribe"
LOOKUP_REFUSED = "Client is not authorized to Lookup"


def test_no_grant_refuses_lookup_producer_and_consumer(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns, create=False)  # not created: a refused client must not auto-create it
    with wire_as(secured, "app") as wire:
        refused(wire.request(c.lookup(topic)), LOOKUP_REFUSED)
        refused(wire.request(c.partitioned_metadata(topic)), "Client is not authorized to Get Partition Metadata")
        refused(wire.request(c.producer(topic, 1)), PRODUCE_REFUSED)
        refused(wire.request(c.subscribe(topic, "sub", 1, c.SUB_EXCLUSIVE)), SUBSCRIBE_REFUSED)
        refused(wire.request(c.get_topics_of_namespace(ns)), "Client is not authorized to GetTopicsOfNamespace")
    assert not exists(secured, topic)


def test_produce_only_grant_produces_but_cannot_subscribe(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    grant(secured, ns, "writer", "produce")
    with wire_as(secured, "writer") as wire:
        assert wire.request(c.lookup(topic))["t"] == c.LOOKUP_RESPONSE
        open_producer(wire, topic)
        assert publish(wire, 1, 0, b"hello")["t"] == c.SEND_RECEIPT
        refused(wire.request(c.subscribe(topic, "sub", 1, c.SUB_EXCLUSIVE)), SUBSCRIBE_REFUSED)
    after = stats(secured, topic)
    assert after["msgInCounter"] == 1
    assert after["subscriptions"] == {}


def test_tenant_a_token_on_tenant_b_topic(secured: Secured) -> None:
    ns_b = secured.namespace(secured.tenant_b)
    topic_b = secured.topic(ns_b)
    with wire_as(secured, "alice") as wire:  # tenant a's admin
        refused(wire.request(c.lookup(topic_b)), LOOKUP_REFUSED)
        refused(wire.request(c.producer(topic_b, 1)), PRODUCE_REFUSED)
        refused(wire.request(c.subscribe(topic_b, "alice-sub", 1, c.SUB_SHARED)), SUBSCRIBE_REFUSED)
    with wire_as(secured, "bob") as wire:  # tenant b's admin needs no grant on its own tenant
        open_producer(wire, topic_b)
    after = stats(secured, topic_b)
    assert after["msgInCounter"] == 0 and after["subscriptions"] == {}


def test_superuser_may_do_everything(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_b)
    topic = secured.topic(ns)
    with wire_as(secured, SUPERUSER) as wire:
        open_producer(wire, topic)
        open_consumer(wire, topic, "any-name", 1)
        assert publish(wire, 1, 0, b"x")["t"] == c.SEND_RECEIPT
    assert stats(secured, topic)["msgInCounter"] == 1


def test_prefix_mode(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    grant(secured, ns, "app", "consume")
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/subscriptionAuthMode", "Prefix")
    with wire_as(secured, "app") as wire:
        refused(wire.request(c.subscribe(topic, "other-sub", 1, c.SUB_EXCLUSIVE)), wire_prefix(topic))
        refused(wire.request(c.subscribe(topic, "appsub", 2, c.SUB_EXCLUSIVE)), wire_prefix(topic))
        assert list(stats(secured, topic)["subscriptions"]) == []
        open_consumer(wire, topic, "app-sub", 3)
    assert list(stats(secured, topic)["subscriptions"]) == ["app-sub"]


def wire_prefix(topic: str) -> str:
    """Pulsar's refusal of a subscription outside role ``app``'s prefix."""
    return (
        "Failed to create consumer - The subscription name needs to be prefixed by the authentication role, "
        f"like app-xxxx for topic: {topic}"
    )


def test_subscription_permission_roles(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    grant(secured, ns, "r1", "consume")
    grant(secured, ns, "r2", "consume")
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/subscription/owned", ["r1"])
    with wire_as(secured, "r2") as wire:
        refused(wire.request(c.subscribe(topic, "owned", 1, c.SUB_SHARED)), SUBSCRIBE_REFUSED)
        open_consumer(wire, topic, "unlisted", 2, c.SUB_SHARED)  # subscriptions without a list stay open
    assert sorted(stats(secured, topic)["subscriptions"]) == ["unlisted"]
    with wire_as(secured, "r1") as wire:
        open_consumer(wire, topic, "owned", 1, c.SUB_SHARED)
    assert sorted(stats(secured, topic)["subscriptions"]) == ["owned", "unlisted"]


def test_topic_level_grant_without_namespace_grant(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    granted, other = secured.topic(ns), secured.topic(ns)
    secured.ok("POST", f"/admin/v2/persistent/{granted.removeprefix('persistent://')}/permissions/app", ["produce"])
    with wire_as(secured, "app") as wire:
        open_producer(wire, granted)
        assert publish(wire, 1, 0, b"ok")["t"] == c.SEND_RECEIPT
        refused(wire.request(c.producer(other, 2)), PRODUCE_REFUSED)
    assert stats(secured, granted)["msgInCounter"] == 1
    assert stats(secured, other)["msgInCounter"] == 0


def test_topic_grant_on_a_partitioned_topic_covers_its_partitions(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns, create=False)
    secured.ok("PUT", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/partitions", 2)
    secured.ok("POST", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/permissions/app", ["produce"])
    with wire_as(secured, "app") as wire:
        assert wire.request(c.partitioned_metadata(topic))["partitions"] == 2
        open_producer(wire, f"{topic}-partition-1")


def test_revoke_closes_the_open_producer_and_refuses_the_next(secured: Secured) -> None:
    """As Pulsar's onPoliciesUpdate: a revoke closes the producer already open (``close_producer``
    pushed, later sends refused) and refuses the next one; nothing more is stored."""
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    grant(secured, ns, "app", "produce")
    with wire_as(secured, "app") as wire:
        open_producer(wire, topic, 1)
        assert publish(wire, 1, 0, b"before the revoke")["t"] == c.SEND_RECEIPT
        secured.ok("DELETE", f"/admin/v2/namespaces/{ns}/permissions/app")
        assert wire.next(lambda f: f.get("t") == c.CLOSE_PRODUCER) == c.close_producer_pushed(1)
        assert publish(wire, 1, 1, b"after the revoke")["t"] == c.SEND_ERROR
        refused(wire.request(c.producer(topic, 2)), PRODUCE_REFUSED)
    after = stats(secured, topic)
    assert after["msgInCounter"] == 1 and after["publishers"] == []


def test_a_subscription_rule_set_later_closes_the_consumers_it_refuses(secured: Secured) -> None:
    """Any change of the namespace's grants re-checks open consumers: switching to Prefix mode
    closes the consumer whose subscription lacks the role's prefix, and keeps the one that has it."""
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    grant(secured, ns, "app", "consume")
    with wire_as(secured, "app") as wire:
        open_consumer(wire, topic, "audit", 1)
        open_consumer(wire, topic, "app-audit", 2)
        secured.ok("POST", f"/admin/v2/namespaces/{ns}/subscriptionAuthMode", "Prefix")
        assert wire.next(lambda f: f.get("t") == c.CLOSE_CONSUMER) == c.close_consumer_pushed(1)
        refused(wire.request(c.subscribe(topic, "audit", 3, c.SUB_EXCLUSIVE)), wire_prefix(topic))
        producer_wire = wire_as(secured, SUPERUSER)
        with producer_wire:
            open_producer(producer_wire, topic, 1)
            assert publish(producer_wire, 1, 0, b"to app-audit")["t"] == c.SEND_RECEIPT
        wire.send(c.flow(2, 10))
        message = wire.next(lambda f: f.get("t") == c.MESSAGE)
        assert message["consumer_id"] == 2  # the kept consumer still receives
    subs = stats(secured, topic)["subscriptions"]
    assert subs["audit"]["consumers"] == [] and subs["audit"]["msgBacklog"] == 1


def test_wildcard_grants_need_the_setting(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    grant(secured, ns, "svc.*", "produce")
    with wire_as(secured, "svc.orders") as wire:  # authorizationAllowWildcardsMatching is off here
        refused(wire.request(c.producer(topic, 1)), PRODUCE_REFUSED)
    assert stats(secured, topic)["msgInCounter"] == 0


def test_client_raises_authorization_error(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    topic = secured.topic(ns)
    client = magnetar.Client(secured.sa.service_url, authentication=magnetar.AuthenticationToken(secured.token("app")))
    try:
        with pytest.raises(magnetar.AuthorizationError, match=r"^Client is not authorized to Get Partition Metadata$"):
            client.create_producer(topic)
        with pytest.raises(magnetar.AuthorizationError):
            client.subscribe(topic, "app-sub")
        grant(secured, ns, "app", "produce", "consume")
        consumer = client.subscribe(topic, "app-sub")
        client.create_producer(topic).send(b"granted")
        assert consumer.receive(timeout_millis=10_000).data() == b"granted"
    finally:
        client.close()


# ---------------------------------------------------------------------- settings
def test_authorization_without_authentication_refuses_to_start(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "standalone",
            "--data-dir",
            str(tmp_path),
            "--authorization-enabled",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode != 0
    assert "authorizationEnabled needs authenticationEnabled" in run.stderr, run.stderr
    assert not any(tmp_path.iterdir())  # stopped before anything was written


def test_wildcards_with_the_setting(tmp_path: Path) -> None:
    for secured in start_secured(tmp_path, "--authorization-allow-wildcards-matching"):
        ns = secured.namespace(secured.tenant_a)
        topic = secured.topic(ns)
        grant(secured, ns, "svc.*", "produce")
        grant(secured, ns, "*.reader", "consume")
        with wire_as(secured, "svc.orders") as wire:
            open_producer(wire, topic)
            refused(wire.request(c.subscribe(topic, "s", 1, c.SUB_EXCLUSIVE)), SUBSCRIBE_REFUSED)
        with wire_as(secured, "audit.reader") as wire:
            open_consumer(wire, topic, "s", 1)
        with wire_as(secured, f"x{uuid.uuid4().hex[:4]}.svc") as wire:  # '*' only at either end
            refused(wire.request(c.producer(topic, 1)), PRODUCE_REFUSED)
        assert list(stats(secured, topic)["subscriptions"]) == ["s"]
