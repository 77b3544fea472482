"""Policies reach topics that are already loaded (Pulsar applies policy updates to live topics).

A topic resolves its policies when it is loaded; afterwards the broker watches the namespace and
topic records and re-applies them, so a limit set later holds without unloading the topic.
"""

from __future__ import annotations

import time

import pytest
from tests.support.standalone import StandaloneProcess
from tests.support.standalone import admin_call as call

import magnetar


def _refused_producer(client: magnetar.Client, name: str, deadline_s: float = 10.0) -> magnetar.MagnetarError:
    """Create producers until one is refused (the watch applies the policy asynchronously)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            client.create_producer(name)
        except magnetar.MagnetarError as exc:
            return exc
        if time.monotonic() > end:
            pytest.fail(f"no producer on {name} was refused within {deadline_s} s")
        time.sleep(0.05)


def test_a_namespace_limit_set_after_load_applies_to_the_loaded_topic(standalone: StandaloneProcess) -> None:
    call(standalone, "PUT", "/admin/v2/tenants/live", {})
    call(standalone, "PUT", "/admin/v2/namespaces/live/ns")
    client = magnetar.Client(standalone.service_url)
    try:
        name = "persistent://live/ns/t"
        client.create_producer(name)  # loads the topic with no limit
        client.create_producer(name)
        assert call(standalone, "POST", "/admin/v2/namespaces/live/ns/maxProducersPerTopic", 2)[0] == 204
        exc = _refused_producer(client, name)
        assert type(exc).__name__ == "ProducerBusy" and "maximum of 2 producers" in str(exc)
    finally:
        client.close()


def test_a_topic_level_policy_overrides_the_namespace_on_a_loaded_partition(standalone: StandaloneProcess) -> None:
    call(standalone, "PUT", "/admin/v2/tenants/live2", {})
    call(standalone, "PUT", "/admin/v2/namespaces/live2/ns")
    assert call(standalone, "PUT", "/admin/v2/persistent/live2/ns/p/partitions", 2)[0] == 204
    assert call(standalone, "POST", "/admin/v2/namespaces/live2/ns/maxProducersPerTopic", 5)[0] == 204
    client = magnetar.Client(standalone.service_url)
    try:
        part = "persistent://live2/ns/p-partition-1"
        client.create_producer(part)
        assert call(standalone, "POST", "/admin/v2/persistent/live2/ns/p/maxProducers", 1)[0] == 204
        exc = _refused_producer(client, part)
        assert "maximum of 1 producers" in str(exc)
    finally:
        client.close()
