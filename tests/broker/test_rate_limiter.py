"""The rate limiters of broker/policies/rate_limit.py, driven by a fake clock (and, for the connection
throttle, a real socket pair): the arithmetic the broker's publish and dispatch limits rest on."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from magnetar.broker.policies import rate_limit
from magnetar.broker.policies.model import FIELDS, POLICY_ENDPOINTS, PolicyError, normalize, unenforced
from magnetar.broker.policies.rate_limit import (
    DispatchGate,
    DispatchLimiter,
    PublishLimiter,
    ReadThrottle,
    TokenBucket,
)
from magnetar.broker.policies.rates import normalize_rate


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# ---------------------------------------------------------------------- the bucket
def test_a_bucket_starts_full_refills_at_its_rate_and_caps_at_its_capacity() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10, capacity=10, clock=clock)
    assert bucket.tokens() == 10
    assert bucket.consume(10) == 0
    clock.advance(0.5)
    assert bucket.tokens() == pytest.approx(5)
    clock.advance(60)
    assert bucket.tokens() == 10  # never more than one period's worth


def test_an_overdrawn_bucket_says_how_long_until_the_debt_is_paid() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=100, capacity=100, clock=clock)
    assert bucket.consume(150) == -50
    assert bucket.wait_for(0) == pytest.approx(0.5)
    assert bucket.wait_for(1) == pytest.approx(0.51)
    clock.advance(0.5)
    assert bucket.wait_for(0) == 0


def test_a_reconfigured_bucket_keeps_its_tokens_up_to_the_new_capacity() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=100, capacity=100, clock=clock)
    bucket.reconfigure(10, 10)
    assert bucket.tokens() == 10
    bucket.consume(30)
    bucket.reconfigure(1000, 1000)
    assert bucket.tokens() == -20  # a debt survives a new limit
    clock.advance(0.02)
    assert bucket.tokens() == pytest.approx(0, abs=1e-6)


# ---------------------------------------------------------------------- publish
def test_the_publish_limiter_throttles_past_the_message_rate_and_counts_each_episode() -> None:
    clock = FakeClock()
    limiter = PublishLimiter(clock)
    limiter.configure({"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1})
    assert [limiter.consume(1, 10) for _ in range(100)] == [0.0] * 100  # the first second's burst
    assert limiter.consume(1, 10) == pytest.approx(0.01)
    assert limiter.consume(9, 90) == pytest.approx(0.1)
    assert limiter.limited_times == 1  # one episode, however many sends it covers
    clock.advance(0.1)
    assert limiter.consume(1, 10) == pytest.approx(0.01)
    assert limiter.limited_times == 2


def test_over_a_long_run_the_publish_limiter_lets_through_exactly_its_rate() -> None:
    """A producer that sends whenever it is allowed, in chunks (one read's worth of frames)."""
    clock = FakeClock()
    limiter = PublishLimiter(clock)
    limiter.configure({"publishThrottlingRateInMsg": 500})
    start, sent = clock.now, 0
    while clock.now - start < 60:
        delay = 0.0
        for _ in range(37):
            delay = limiter.consume(1, 100)
            sent += 1
        clock.advance(max(delay, 0.001))
    rate = (sent - 500) / (clock.now - start)  # without the first second's burst
    assert rate == pytest.approx(500, rel=0.01)


def test_the_publish_byte_rate_is_enforced_alongside_the_message_rate() -> None:
    clock = FakeClock()
    limiter = PublishLimiter(clock)
    limiter.configure({"publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": 1000})
    assert limiter.consume(1, 1000) == 0  # the byte bucket's one second, exactly
    assert limiter.consume(1, 500) == pytest.approx(0.5)


def test_zero_minus_one_and_no_policy_mean_no_publish_limit() -> None:
    clock = FakeClock()
    limiter = PublishLimiter(clock)
    for policy in (None, {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 0}):
        limiter.configure(policy)
        assert not limiter.enabled
        assert all(limiter.consume(100, 10**6) == 0 for _ in range(100))
    limiter.configure({"publishThrottlingRateInMsg": 1})
    assert limiter.enabled
    limiter.configure(None)  # removing the policy lifts the limit at once
    assert limiter.consume(10**6, 0) == 0


# ---------------------------------------------------------------------- dispatch
def test_a_dispatch_limiter_allows_its_limit_per_period() -> None:
    clock = FakeClock()
    limiter = DispatchLimiter(clock)
    limiter.configure({"dispatchThrottlingRateInMsg": 50, "ratePeriodInSecond": 5})
    assert limiter.msgs is not None and limiter.bytes is None
    assert limiter.msgs.tokens() == 50
    limiter.consume(50, 0)
    assert limiter.wait() == pytest.approx(0.1)  # 10 msg/s: one message every 0.1 s
    clock.advance(5)
    assert limiter.msgs.tokens() == 50


def test_relative_to_publish_rate_adds_the_topics_publish_rate() -> None:
    clock = FakeClock()
    limiter = DispatchLimiter(clock)
    limiter.configure({"dispatchThrottlingRateInMsg": 10, "ratePeriodInSecond": 2, "relativeToPublishRate": True})
    limiter.publish_rates(100.0, 0.0)
    assert limiter.msgs is not None and limiter.msgs.capacity == 210  # 10 + 100/s over 2 s


async def test_the_gate_cuts_reads_to_the_smaller_limit_and_retries_when_allowed() -> None:
    clock = FakeClock()
    own, topic = DispatchLimiter(clock), DispatchLimiter(clock)
    own.configure({"dispatchThrottlingRateInMsg": 30})
    topic.configure({"dispatchThrottlingRateInMsg": 20, "dispatchThrottlingRateInByte": 1000})
    gate = DispatchGate(own, topic)
    retried = asyncio.Event()
    assert gate.allow(100, retried.set) == 20
    assert gate.stats()["dispatchThrottledMsgEventsByTopicLimit"] == 1
    assert gate.stats()["dispatchThrottledMsgEventsBySubscriptionLimit"] == 1
    gate.consume(20, 200)
    assert gate.allow(100, retried.set) == 0  # topic bucket empty: a timer will retry
    assert gate.allow(100, retried.set) == 0  # no second timer
    await asyncio.wait_for(retried.wait(), 1)  # the topic refills one message in 1/20 s
    gate.consume(0, 5000)  # an entry larger than the byte limit: bytes overdrawn
    clock.advance(1)
    assert gate.allow(10, retried.set) == 0
    assert gate.stats()["dispatchThrottledBytesEventsByTopicLimit"] == 1
    gate.close()


def test_a_gate_without_limits_lets_everything_through() -> None:
    gate = DispatchGate()
    assert gate.allow(100, lambda: None) == 100
    assert set(gate.stats().values()) == {0}


# ---------------------------------------------------------------------- validation
def test_rate_policies_are_validated_with_a_reason() -> None:
    assert normalize("publishMaxMessageRate", {"publishThrottlingRateInMsg": 5}) == {
        "publishThrottlingRateInMsg": 5,
        "publishThrottlingRateInByte": -1,
    }
    assert normalize("topicDispatchRate", {"dispatchThrottlingRateInByte": 1024}) == {
        "dispatchThrottlingRateInMsg": -1,
        "dispatchThrottlingRateInByte": 1024,
        "ratePeriodInSecond": 1,
        "relativeToPublishRate": False,
    }
    # Pulsar's Policies document form, keyed by cluster
    assert (
        normalize_rate("subscriptionDispatchRate", {"standalone": {"dispatchThrottlingRateInMsg": 3}})[
            "dispatchThrottlingRateInMsg"
        ]
        == 3
    )
    bad = [
        ("publishMaxMessageRate", {"publishThrottlingRateInMsg": -5}, "publishThrottlingRateInMsg must be -1"),
        ("publishMaxMessageRate", {"publishThrottlingRateInMsg": 1.5}, "must be an integer"),
        ("publishMaxMessageRate", {"publishThrottlingRateInByte": "10"}, "must be an integer"),
        ("publishMaxMessageRate", 10, "publishRate must be an object"),
        ("topicDispatchRate", {"ratePeriodInSecond": 0}, "ratePeriodInSecond must be a positive integer"),
        ("topicDispatchRate", {"relativeToPublishRate": "yes"}, "relativeToPublishRate must be true or false"),
        ("subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": True}, "must be an integer"),
    ]
    for field, value, reason in bad:
        with pytest.raises(PolicyError, match=reason):
            normalize(field, value)


def test_rate_policies_have_pulsars_endpoints_and_are_enforced() -> None:
    assert POLICY_ENDPOINTS["publishRate"] == "publishMaxMessageRate"
    assert POLICY_ENDPOINTS["dispatchRate"] == "topicDispatchRate"
    assert POLICY_ENDPOINTS["subscriptionDispatchRate"] == "subscriptionDispatchRate"
    stored: dict[str, Any] = {f: None for f in FIELDS}
    stored["publishMaxMessageRate"] = {"publishThrottlingRateInMsg": 1, "publishThrottlingRateInByte": -1}
    assert unenforced(stored) == []


# ---------------------------------------------------------------------- the connection throttle
class _Counting(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += len(data)


async def test_the_read_throttle_pauses_a_real_connection_until_the_deadline() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    proto = _Counting()
    transport, _ = await loop.connect_accepted_socket(lambda: proto, ours)
    paused_for: list[float] = []
    throttle = ReadThrottle(lambda: proto.transport, paused_for.append)
    try:
        throttle.hold(0.3)
        throttle.hold(0.1)  # a shorter hold from another topic does not shorten the pause
        assert throttle.paused and not transport.is_reading()
        await loop.sock_sendall(theirs, b"x" * 100)
        start = time.monotonic()
        while proto.received == 0:
            await asyncio.sleep(0.01)
            assert time.monotonic() - start < 5
        assert time.monotonic() - start >= 0.25
        assert transport.is_reading() and not throttle.paused
        assert paused_for and paused_for[0] >= 0.25
    finally:
        throttle.close()
        transport.close()
        theirs.close()


async def test_frames_deferred_by_the_throttle_run_in_order_before_reading_resumes() -> None:
    """The rest of a read waits for the pause, runs first when it ends, and may pause again."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    proto = _Counting()
    transport, _ = await loop.connect_accepted_socket(lambda: proto, ours)
    throttle = ReadThrottle(lambda: proto.transport)
    ran: list[list[int]] = []
    resumed = asyncio.Event()

    def run(frames: list[int]) -> None:
        for i, frame in enumerate(frames):
            if throttle.paused:
                throttle.defer(frames[i:], run)
                return
            ran.append([frame, int(transport.is_reading())])
            if frame == 2:
                throttle.hold(0.05)  # over the rate again mid-way
        resumed.set()

    try:
        throttle.hold(0.05)
        run([1, 2, 3])
        assert ran == [] and throttle.paused
        await asyncio.wait_for(resumed.wait(), 5)
        assert ran == [[1, 0], [2, 0], [3, 0]]  # the transport stayed paused while they ran
        end = time.monotonic() + 5
        while not transport.is_reading():
            await asyncio.sleep(0.01)
            assert time.monotonic() < end
        assert not throttle.paused
    finally:
        throttle.close()
        transport.close()
        theirs.close()


async def test_a_long_overdraft_pauses_a_connection_for_at_most_max_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    """So that the next send asks its topic again (a removed limit holds within MAX_PAUSE)."""
    monkeypatch.setattr(rate_limit, "MAX_PAUSE", 0.05)
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    proto = _Counting()
    transport, _ = await loop.connect_accepted_socket(lambda: proto, ours)
    throttle = ReadThrottle(lambda: proto.transport)
    try:
        throttle.hold(3600)
        start = time.monotonic()
        while not transport.is_reading():
            await asyncio.sleep(0.01)
            assert time.monotonic() - start < 5
        assert not throttle.paused
    finally:
        throttle.close()
        transport.close()
        theirs.close()


async def test_the_gate_rearms_its_timer_when_a_limit_is_raised() -> None:
    clock = FakeClock()
    topic = DispatchLimiter(clock)
    topic.configure({"dispatchThrottlingRateInMsg": 1, "ratePeriodInSecond": 60})
    gate = DispatchGate(DispatchLimiter(clock), topic)
    retried = asyncio.Event()
    gate.consume(100, 0)  # a big batch: the next message in about 100 minutes
    assert gate.allow(10, retried.set) == 0
    topic.configure({"dispatchThrottlingRateInMsg": 100_000})  # raised: the debt is paid in 1 ms
    assert gate.allow(10, retried.set) == 0
    await asyncio.wait_for(retried.wait(), 1)
    gate.close()
