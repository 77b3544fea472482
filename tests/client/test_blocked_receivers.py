"""A blocking ``receive()`` sleeps on a lock that the loop thread's delivery releases (blocked_receivers.py).

The unit tests drive ``BlockedReceivers`` from plain threads (the "loop thread" here is the test's
own thread calling ``wake`` after queueing, exactly as ``Consumer._deliver`` does); the last ones go
through a real standalone.
"""

from __future__ import annotations

import random
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar.client.consumer.blocked_receivers import BlockedReceivers
from magnetar.protocol.errors import AlreadyClosed, MagnetarError, Timeout

DEADLINE = 20.0
# A poll longer than any test: a lost wake-up leaves its receiver asleep past the join's deadline
# instead of being repaired by the next poll.
NO_POLL = DEADLINE * 3


def no_error() -> MagnetarError | None:
    return None


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` in a thread; its outcome (value or exception) lands in the returned list."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # the outcome under test may be an exception
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def outcomes(threads: list[tuple[threading.Thread, list[Any]]]) -> list[Any]:
    """Every thread's outcome, each thread given up to DEADLINE to finish."""
    got: list[Any] = []
    for t, out in threads:
        t.join(DEADLINE)
        got.extend(out)
    return got


def test_a_queued_item_is_taken_without_waiting() -> None:
    blocked = BlockedReceivers()
    assert blocked.take(deque([1, 2]), no_error, 0, lambda: True) == 1
    assert not blocked


def test_a_delivery_wakes_the_sleeper() -> None:
    blocked = BlockedReceivers()
    queue: deque[str] = deque()
    t, out = in_thread(lambda: blocked.take(queue, no_error, None, lambda: True, NO_POLL))
    wait_for("the receiver to sleep", lambda: bool(blocked))
    queue.append("m")
    blocked.wake(1)
    t.join(DEADLINE)
    assert out == ["m"]
    assert not blocked  # nothing left registered


def test_an_empty_queue_times_out_and_leaves_nothing_registered() -> None:
    blocked = BlockedReceivers()
    start = time.monotonic()
    with pytest.raises(Timeout, match=re.escape("no message received within 0.05s")):
        blocked.take(deque(), no_error, 50, lambda: True)
    assert time.monotonic() - start >= 0.05
    assert not blocked


def test_the_consumers_error_wakes_every_sleeper() -> None:
    blocked = BlockedReceivers()
    queue: deque[int] = deque()
    error: list[MagnetarError] = []

    def the_error() -> MagnetarError | None:
        return error[0] if error else None

    threads = [in_thread(lambda: blocked.take(queue, the_error, None, lambda: True, NO_POLL)) for _ in range(3)]
    wait_for("three sleepers", lambda: len(blocked._locks) == 3)
    error.append(AlreadyClosed("consumer is closed"))
    blocked.wake_all()
    for t, out in threads:
        t.join(DEADLINE)
        assert len(out) == 1 and isinstance(out[0], AlreadyClosed), out


def test_a_queued_message_is_handed_out_before_the_error() -> None:
    blocked = BlockedReceivers()
    closed = AlreadyClosed("consumer is closed")
    assert blocked.take(deque([7]), lambda: closed, None, lambda: True) == 7
    with pytest.raises(AlreadyClosed):
        blocked.take(deque(), lambda: closed, None, lambda: True)


def test_a_dead_loop_thread_ends_the_wait() -> None:
    blocked = BlockedReceivers()
    with pytest.raises(AlreadyClosed, match="closed while waiting"):
        blocked.take(deque(), no_error, None, lambda: False)  # woken by the poll, not by a delivery
    assert not blocked


def test_two_messages_delivered_at_once_reach_two_sleepers() -> None:
    blocked = BlockedReceivers()
    queue: deque[int] = deque()
    threads = [in_thread(lambda: blocked.take(queue, no_error, None, lambda: True, NO_POLL)) for _ in range(2)]
    wait_for("two sleepers", lambda: len(blocked._locks) == 2)
    queue.extend([1, 2])
    blocked.wake(1)  # one wake-up for two messages: the first receiver passes one on
    got = outcomes(threads)
    assert sorted(got) == [1, 2]


def test_a_wake_up_taken_by_a_leaving_receiver_is_passed_on() -> None:
    """A sleeper woken with nothing to take (as when a faster thread took the message first) goes
    back to sleep; the messages that come next still reach both sleepers."""
    blocked = BlockedReceivers()
    queue: deque[int] = deque()
    threads = [in_thread(lambda: blocked.take(queue, no_error, None, lambda: True, NO_POLL)) for _ in range(2)]
    wait_for("two sleepers", lambda: len(blocked._locks) == 2)
    blocked.wake(1)  # a wake-up with nothing queued: the woken one must go back to sleep
    wait_for("both asleep again", lambda: len(blocked._locks) == 2)
    queue.extend([1, 2])
    blocked.wake(2)
    got = outcomes(threads)
    assert sorted(got) == [1, 2]


def test_racing_deliveries_lose_no_wake_up() -> None:
    """One message at a time, each queued at a varied point of the receiver's way to sleep (just
    before it registers, just after, while it re-checks the queue): every one must wake it. The
    next message is only queued once the previous one was taken, so a lost wake-up cannot be
    repaired by a later delivery; it shows as a receiver asleep past the deadline."""
    blocked = BlockedReceivers()
    queue: deque[int] = deque()
    taken = threading.Semaphore(0)
    got: list[int] = []
    n = 3_000

    def receive_all() -> None:
        pauses = random.Random(14)
        for _ in range(n):
            got.append(blocked.take(queue, no_error, None, lambda: True, NO_POLL))
            taken.release()
            for _ in range(pauses.randrange(20_000)):  # the next message lands at a varied point of the next take
                pass

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the race's window is a few bytecodes
    try:
        t, out = in_thread(receive_all)
        for i in range(n):
            queue.append(i)
            if blocked:
                blocked.wake(1)
            assert taken.acquire(timeout=DEADLINE), f"message {i} queued and its receiver never woken"
        t.join(DEADLINE)
    finally:
        sys.setswitchinterval(before)
    assert out == [None] and got == list(range(n))


# ---------------------------------------------------------------- through a standalone


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.service_url)
    yield c
    c.close()


def test_blocked_receivers_of_one_consumer_each_get_a_message(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    threads = [in_thread(lambda: consumer.receive(int(DEADLINE * 1000)).data()) for _ in range(3)]
    wait_for("three receivers asleep", lambda: len(consumer._c._blocked._locks) == 3)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(b"m%d" % i)
    got = outcomes(threads)
    assert sorted(got) == [b"m0", b"m1", b"m2"]


def test_closing_the_consumer_wakes_its_blocked_receiver(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "sub")
    t, out = in_thread(lambda: consumer.receive())
    wait_for("the receiver asleep", lambda: bool(consumer._c._blocked))
    consumer.close()
    t.join(DEADLINE)
    assert len(out) == 1 and isinstance(out[0], pulsar.AlreadyClosed), out


def test_a_blocking_reader_wakes_for_a_message(client: pulsar.Client, topic: str) -> None:
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    t, out = in_thread(lambda: reader.read_next(int(DEADLINE * 1000)).data())
    wait_for("the reader asleep", lambda: bool(reader._r.consumer._blocked))
    client.create_producer(topic).send(b"x")
    t.join(DEADLINE)
    assert out == [b"x"]
    with pytest.raises(pulsar.Timeout):
        reader.read_next(50)


@pytest.mark.parametrize("on_call", [1, 2], ids=["before-registering", "while-registered"])
def test_a_signal_at_any_point_raises_interrupted_and_leaves_nothing_registered(on_call: int) -> None:
    """``error()`` is asked once before the receiver registers and once after: a KeyboardInterrupt
    (what a Ctrl-C raises from a handler) on either call becomes ``Interrupted``, and the list of
    sleepers is left as it was, so that no later delivery wakes a receiver that has gone."""
    blocked = BlockedReceivers()
    calls = 0

    def interrupted_on_call() -> MagnetarError | None:
        nonlocal calls
        calls += 1
        if calls == on_call:
            raise KeyboardInterrupt
        return None

    with pytest.raises(pulsar.Interrupted):
        blocked.take(deque(), interrupted_on_call, None, lambda: True, NO_POLL)
    assert calls == on_call and not blocked


def test_an_interrupted_receiver_hands_its_wake_up_on() -> None:
    """The delivery's wake-up goes to the oldest sleeper; if a signal takes that one away before it
    takes the message, the next sleeper must get the message (else it sleeps on, message queued)."""
    blocked = BlockedReceivers()
    queue: deque[int] = deque()
    others: list[tuple[threading.Thread, list[Any]]] = []
    calls = 0

    def deliver_then_interrupt() -> MagnetarError | None:
        nonlocal calls
        calls += 1
        if calls == 2:  # registered: a second receiver sleeps behind it, one message comes
            others.append(in_thread(lambda: blocked.take(queue, no_error, None, lambda: True, NO_POLL)))
            wait_for("the second receiver asleep", lambda: len(blocked._locks) == 2)
            queue.append(1)
            blocked.wake(1)  # the oldest: this receiver
            raise KeyboardInterrupt
        return None

    with pytest.raises(pulsar.Interrupted):
        blocked.take(queue, deliver_then_interrupt, None, lambda: True, NO_POLL)
    assert outcomes(others) == [1]
