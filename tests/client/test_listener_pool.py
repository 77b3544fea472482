"""Message and reader listeners on the client's shared ``message_listener_threads``, against a real standalone."""

from __future__ import annotations

import threading

import pytest
from tests.support.polling import wait_for

import magnetar
from magnetar import ConsumerType, InitialPosition, MessageId


class Collector:
    """Records (thread name, payload) per listener call and signals after ``expected`` calls."""

    def __init__(self, expected: int) -> None:
        self.calls: list[tuple[str, bytes]] = []
        self.expected = expected
        self.done = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, consumer: object, msg: magnetar.Message) -> None:
        with self._lock:
            self.calls.append((threading.current_thread().name, msg.data()))
            if len(self.calls) >= self.expected:
                self.done.set()
        consumer.acknowledge(msg)  # type: ignore[attr-defined]

    @property
    def threads(self) -> set[str]:
        return {name for name, _ in self.calls}


def test_one_listener_thread_serves_every_consumer_of_the_client(standalone, topic):
    a, b = Collector(3), Collector(3)
    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "a", message_listener=a, initial_position=InitialPosition.Earliest)
        client.subscribe(topic, "b", message_listener=b, initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(b"%d" % i)
        assert a.done.wait(10) and b.done.wait(10)
    assert [d for _, d in a.calls] == [b"0", b"1", b"2"]
    assert [d for _, d in b.calls] == [b"0", b"1", b"2"]
    assert len(a.threads | b.threads) == 1  # the default: message_listener_threads=1


def test_consumers_are_spread_over_the_listener_threads_round_robin(standalone, topic):
    collectors = [Collector(2) for _ in range(3)]
    with magnetar.Client(standalone.service_url, message_listener_threads=2) as client:
        for i, c in enumerate(collectors):
            client.subscribe(topic, f"s{i}", message_listener=c, initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"x")
        producer.send(b"y")
        assert all(c.done.wait(10) for c in collectors)
    names = [c.threads for c in collectors]
    assert all(len(n) == 1 for n in names)  # each consumer stays on its thread
    assert names[0] == names[2] != names[1]
    assert len(set().union(*names)) == 2


def test_a_blocked_listener_holds_up_the_consumers_sharing_its_thread(standalone, topic):
    release = threading.Event()
    entered = threading.Event()
    other = Collector(1)

    def blocking(consumer, msg):
        entered.set()
        release.wait(30)
        consumer.acknowledge(msg)

    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "slow", message_listener=blocking, initial_position=InitialPosition.Earliest)
        fast = client.subscribe(topic, "fast", message_listener=other, initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"m")
        assert entered.wait(10)
        # The other consumer's message is handed to the one shared thread, which is busy: its
        # listener has not run.
        pump = fast._listener
        assert pump is not None
        wait_for("the fast consumer's message to reach the listener thread", lambda: pump.in_flight is not None)
        assert other.calls == []
        release.set()
        assert other.done.wait(10)


def test_receive_and_batch_receive_are_refused_while_a_listener_is_set(standalone, topic):
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(topic, "s", message_listener=lambda c, m: None)
        with pytest.raises(magnetar.InvalidConfiguration):
            consumer.receive(10)
        with pytest.raises(magnetar.InvalidConfiguration):
            consumer.batch_receive()
        reader = client.create_reader(topic, MessageId.earliest, reader_listener=lambda r, m: None)
        with pytest.raises(magnetar.InvalidConfiguration):
            reader.read_next(10)


def test_pause_holds_messages_back_until_resume(standalone, topic):
    got = Collector(3)
    with magnetar.Client(standalone.service_url) as client:
        consumer = client.subscribe(
            topic, "p", ConsumerType.Shared, message_listener=got, initial_position=InitialPosition.Earliest
        )
        consumer.pause_message_listener()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(3):
            producer.send(b"%d" % i)
        pump = consumer._listener
        assert pump is not None
        # The pump was already waiting for a message when paused: it holds that one; the others
        # stay in the consumer's receive queue.
        wait_for("the messages to reach the paused consumer", lambda: len(consumer._c._queue) == 2)
        assert pump._resumed is not None and got.calls == []
        consumer.resume_message_listener()
        assert got.done.wait(10)
        assert [d for _, d in got.calls] == [b"0", b"1", b"2"]


def test_a_listener_that_raises_keeps_getting_messages(standalone, topic):
    seen: list[bytes] = []
    done = threading.Event()

    def flaky(consumer, msg):
        seen.append(msg.data())
        if len(seen) == 2:
            done.set()
        raise RuntimeError("listener bug")

    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "f", message_listener=flaky, initial_position=InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"1")
        producer.send(b"2")
        assert done.wait(10)
    assert seen == [b"1", b"2"]


def test_reader_listeners_share_the_pool_and_close_stops_its_threads(standalone, topic):
    got = Collector(2)
    client = magnetar.Client(standalone.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"r0")
    producer.send(b"r1")

    def on_message(reader: magnetar.Reader, msg: magnetar.Message) -> None:
        got.calls.append((threading.current_thread().name, msg.data()))
        if len(got.calls) == 2:
            got.done.set()

    reader = client.create_reader(topic, MessageId.earliest, reader_listener=on_message)
    assert got.done.wait(10)
    thread = reader._listener.thread
    assert {name for name, _ in got.calls} == {thread.name}
    client.close()
    assert not thread.is_alive()  # close() waits for the listener threads to finish
    assert [d for _, d in got.calls] == [b"r0", b"r1"]
