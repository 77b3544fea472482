"""WIRE.md R106 (a consumer's properties) and R107 (listing a namespace's topics by domain), spoken by hand."""

from __future__ import annotations

import uuid

from tests.support.standalone import StandaloneProcess

from magnetar.protocol import commands as c

from .wire import admin, open_consumer, open_producer, session, stats


def test_r106_subscribe_properties_are_the_consumer_metadata_in_stats(standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/r106-{uuid.uuid4().hex[:8]}"
    with session(standalone.service_url) as wire:
        open_consumer(wire, topic, "s", 1, c.SUB_SHARED, consumer_name="with", properties={"a": "1", "b": "2"})
        open_consumer(wire, topic, "s", 2, c.SUB_SHARED, consumer_name="without")
        consumers = {
            x["consumerName"]: x["metadata"] for x in stats(standalone, topic)["subscriptions"]["s"]["consumers"]
        }
        assert consumers == {"with": {"a": "1", "b": "2"}, "without": {}}
        for bad in ({"a": 1}, ["a", "b"], {f"k{i}": "v" for i in range(65)}, {"k": "v" * 1025}):
            cmd = c.subscribe(topic, "s", 3, c.SUB_SHARED)
            cmd["properties"] = bad  # type: ignore[typeddict-item]
            answer = wire.request(cmd)
            assert (answer["t"], answer["code"]) == (c.ERROR, "InvalidCommand"), bad


def test_r107_topics_of_a_namespace_by_domain(standalone: StandaloneProcess) -> None:
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    admin(standalone, "PUT", f"/admin/v2/namespaces/{ns}")
    admin(standalone, "PUT", f"/admin/v2/persistent/{ns}/stored")
    with session(standalone.service_url) as wire:
        open_producer(wire, f"non-persistent://{ns}/live", 1)  # loaded while its producer is open
        persistent = wire.request(c.get_topics_of_namespace(ns))
        assert persistent["topics"] == [f"persistent://{ns}/stored"]
        non_persistent = wire.request(c.get_topics_of_namespace(ns, mode=c.TOPICS_NON_PERSISTENT))
        assert non_persistent["topics"] == [f"non-persistent://{ns}/live"]
        both = wire.request(c.get_topics_of_namespace(ns, mode=c.TOPICS_ALL))
        assert sorted(both["topics"]) == [f"non-persistent://{ns}/live", f"persistent://{ns}/stored"]
        bad = c.get_topics_of_namespace(ns)
        bad["mode"] = "SOME"
        answer = wire.request(bad)
        assert (answer["t"], answer["code"]) == (c.ERROR, "InvalidCommand")
