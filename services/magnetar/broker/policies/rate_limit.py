"""Publish and dispatch rate limits (Pulsar's ``publishRate``, ``dispatchRate`` and
``subscriptionDispatchRate`` policies): token buckets, and where the broker applies them.

Every limit is a ``TokenBucket`` that refills at the limit's rate and holds at most one period's
worth, and that may be overdrawn: the broker learns the size of what it let through only after
the fact (a producer's frames are already read; an entry read for dispatch may be a batch of many
messages), so it takes what passed and then waits until the debt is paid. Over any long run the
rate is therefore the limit, with a burst of at most one period at the start. This is Pulsar 3.x's
``AsyncTokenBucket`` model (PIP-322).

* Publish: ``PublishLimiter.consume`` is called for every send a connection reads; when the
  topic's bucket is overdrawn the connection stops reading (``ReadThrottle``, the transport's
  ``pause_reading``) until the bucket is back to zero, so a producer is slowed by TCP back
  pressure and nothing is dropped or failed. A connection with producers on several topics stops
  when any of them is over its rate, as in Pulsar.
* Dispatch: a subscription asks its ``DispatchGate`` how many entries it may read this round (the
  whole-topic limit, shared by every subscription of the topic, and the subscription's own); with
  no allowance left it reads nothing and tries again when the buckets allow (a timer, not a
  poll), and what it delivered is taken from both buckets afterwards.

A limit of 0 or -1 (pulsar-admin's default for a flag left out) means "no limit", as in Pulsar;
anything else below 0, or a value that is not an integer, is refused when the policy is stored.
The classes take a ``clock`` so that the tests drive them with a fake one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.policies.rates import (
    PUBLISH_RATE,
    SUBSCRIPTION_DISPATCH_RATE,
    TOPIC_DISPATCH_RATE,
)

if TYPE_CHECKING:
    from magnetar.broker.policies.model import EffectivePolicies

Clock = Callable[[], float]

# The longest a connection stays paused at once: then the next send asks its topic again, so a
# limit raised or removed meanwhile holds within this long even after a large overdraft.
MAX_PAUSE = 1.0


# ---------------------------------------------------------------------- the bucket
class TokenBucket:
    """``rate`` tokens per second, at most ``capacity`` held; ``consume`` may overdraw."""

    __slots__ = ("_clock", "_last", "_tokens", "capacity", "rate")

    def __init__(self, rate: float, capacity: float, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = capacity
        self._last = clock()

    def tokens(self) -> float:
        now = self._clock()
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(self.capacity, self._tokens + elapsed * self.rate)
        self._last = now
        return self._tokens

    def consume(self, n: float) -> float:
        """Take ``n`` tokens (possibly going below zero); the tokens left."""
        self._tokens = self.tokens() - n
        return self._tokens

    def wait_for(self, amount: float) -> float:
        """Seconds until at least ``amount`` tokens are held (0 if they are now)."""
        missing = amount - self.tokens()
        return 0.0 if missing <= 0 else missing / self.rate

    def reconfigure(self, rate: float, capacity: float) -> None:
        """A new limit from now on; tokens held so far are kept (capped to the new capacity)."""
        self.tokens()
        self.rate, self.capacity = rate, capacity
        self._tokens = min(self._tokens, capacity)


def _bucket(old: TokenBucket | None, per_period: float, period: float, clock: Clock) -> TokenBucket | None:
    """The bucket for ``per_period`` units every ``period`` seconds (None: no limit)."""
    if per_period <= 0:
        return None
    if old is None:
        return TokenBucket(per_period / period, per_period, clock)
    old.reconfigure(per_period / period, per_period)
    return old


# ---------------------------------------------------------------------- publish
class PublishLimiter:
    """A topic's publish rate (messages and bytes per second)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._msgs: TokenBucket | None = None
        self._bytes: TokenBucket | None = None
        self._throttled_until = 0.0
        # Pulsar's publishRateLimitedTimes: how often the topic went over its rate.
        self.limited_times = 0

    @property
    def enabled(self) -> bool:
        return self._msgs is not None or self._bytes is not None

    def configure(self, rate: Mapping[str, Any] | None) -> None:
        rate = rate or {}
        self._msgs = _bucket(self._msgs, rate.get("publishThrottlingRateInMsg", -1), 1, self._clock)
        self._bytes = _bucket(self._bytes, rate.get("publishThrottlingRateInByte", -1), 1, self._clock)
        if not self.enabled:
            self._throttled_until = 0.0

    def consume(self, msgs: int, nbytes: int) -> float:
        """Account for a send just read; the seconds its connection should stop reading (0: none)."""
        delay = 0.0
        for bucket, n in ((self._msgs, msgs), (self._bytes, nbytes)):
            if bucket is not None and bucket.consume(n) < 0:
                delay = max(delay, bucket.wait_for(0))
        if delay > 0:
            now = self._clock()
            if now >= self._throttled_until:
                self.limited_times += 1
            self._throttled_until = max(self._throttled_until, now + delay)
        return delay


def publish_delay(topic: Any, msgs: int, nbytes: int) -> float:
    """``PublishLimiter.consume`` for ``topic``, or 0 for a topic without rate limits."""
    limits = getattr(topic, "rate_limits", None)
    return limits.publish.consume(msgs, nbytes) if limits is not None else 0.0


class ReadThrottle:
    """Stops reading from one connection until a deadline (the latest any topic asked for).

    Pausing the transport stops further reads, but frames of the read being processed would
    still go through (one read can carry hundreds of sends): the connection hands them to
    ``defer`` and they run, in order, when the pause ends, before reading resumes. Only what this
    throttle paused is resumed: if reading was paused for another reason it is left alone.
    ``on_resume`` gets the seconds reading was paused (a metric)."""

    def __init__(
        self,
        transport: Callable[[], asyncio.Transport | None],
        on_resume: Callable[[float], None] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._transport = transport
        self._on_resume = on_resume
        self._clock = clock
        self._until = 0.0
        self._paused_at: float | None = None  # when this throttle paused the transport
        self._holding = False  # frames wait (the transport stays paused meanwhile)
        self._timer: asyncio.TimerHandle | None = None
        self._deferred: tuple[list[Any], Callable[[list[Any]], None]] | None = None

    @property
    def paused(self) -> bool:
        return self._holding

    def hold(self, delay: float) -> None:
        """Stop reading for ``delay`` seconds from now (or longer, if already held longer)."""
        if delay <= 0:
            return
        now = self._clock()
        self._until = max(self._until, now + min(delay, MAX_PAUSE))
        if self._paused_at is None:
            transport = self._transport()
            if transport is None or transport.is_closing() or not transport.is_reading():
                return  # closed, or paused by someone else: theirs to resume
            transport.pause_reading()
            self._paused_at = now
        self._holding = True
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(self._until - now, self._resume)

    def defer(self, frames: list[Any], run: Callable[[list[Any]], None]) -> None:
        """Keep ``frames`` (the rest of a read) for ``run`` when the pause ends."""
        self._deferred = (frames, run)

    def _resume(self) -> None:
        self._timer = None
        now = self._clock()
        if now < self._until:  # woke a little early
            self._timer = asyncio.get_running_loop().call_later(self._until - now, self._resume)
            return
        self._holding = False
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            frames, run = deferred
            run(frames)  # may go over the rate again: then it holds (and defers) anew
            if self._holding:
                return
        paused_at, self._paused_at = self._paused_at, None
        transport = self._transport()
        if paused_at is None or transport is None or transport.is_closing():
            return
        transport.resume_reading()
        if self._on_resume is not None:
            self._on_resume(self._clock() - paused_at)

    def close(self) -> None:
        self._deferred = None
        self._holding = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# ---------------------------------------------------------------------- dispatch
class DispatchLimiter:
    """A dispatch rate: messages and bytes per ``ratePeriodInSecond``, optionally on top of the
    topic's current publish rate (``relativeToPublishRate``, Pulsar's PIP-52)."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.msgs: TokenBucket | None = None
        self.bytes: TokenBucket | None = None
        self._rate: Mapping[str, Any] = {}
        self._publish = (0.0, 0.0)

    @property
    def enabled(self) -> bool:
        return self.msgs is not None or self.bytes is not None

    def configure(self, rate: Mapping[str, Any] | None) -> None:
        self._rate = rate or {}
        self._rebuild()

    def publish_rates(self, msg_rate: float, byte_rate: float) -> None:
        """The topic's publish rates changed (sampled once a second); matters only when relative."""
        self._publish = (msg_rate, byte_rate)
        if self._rate.get("relativeToPublishRate"):
            self._rebuild()

    def _rebuild(self) -> None:
        r = self._rate
        period = float(r.get("ratePeriodInSecond", 1))
        msgs = float(r.get("dispatchThrottlingRateInMsg", -1))
        nbytes = float(r.get("dispatchThrottlingRateInByte", -1))
        if r.get("relativeToPublishRate"):
            msgs = msgs + self._publish[0] * period if msgs > 0 else msgs
            nbytes = nbytes + self._publish[1] * period if nbytes > 0 else nbytes
        self.msgs = _bucket(self.msgs, msgs, period, self._clock)
        self.bytes = _bucket(self.bytes, nbytes, period, self._clock)

    def consume(self, msgs: int, nbytes: int) -> None:
        if self.msgs is not None:
            self.msgs.consume(msgs)
        if self.bytes is not None:
            self.bytes.consume(nbytes)

    def wait(self) -> float:
        """Seconds until at least one message may go (0: now)."""
        return max(
            self.msgs.wait_for(1) if self.msgs is not None else 0.0,
            self.bytes.wait_for(1) if self.bytes is not None else 0.0,
        )


class DispatchGate:
    """What one subscription may dispatch: its own limit and the topic's, both at once.

    Counts Pulsar's ``dispatchThrottled{Msg,Bytes}EventsBy{Subscription,Topic}Limit``: one event
    each time a limit cut a read short or stopped it."""

    def __init__(self, own: DispatchLimiter | None = None, topic: DispatchLimiter | None = None) -> None:
        self.own = own or DispatchLimiter()
        self.topic = topic
        self.events = {"msg_subscription": 0, "bytes_subscription": 0, "msg_topic": 0, "bytes_topic": 0}
        self._timer: asyncio.TimerHandle | None = None

    def _limiters(self) -> Iterable[tuple[str, DispatchLimiter]]:
        if self.own.enabled:
            yield "subscription", self.own
        if self.topic is not None and self.topic.enabled:
            yield "topic", self.topic

    def allow(self, wanted: int, retry: Callable[[], None]) -> int:
        """How many of ``wanted`` entries may be read now. 0 means none: then ``retry`` is called
        once the limits allow again (one timer at a time)."""
        allowed, wait = wanted, 0.0
        for level, limiter in self._limiters():
            if limiter.msgs is not None:
                tokens = int(limiter.msgs.tokens())
                if tokens < allowed:
                    self.events[f"msg_{level}"] += 1
                    allowed = max(0, tokens)
            if limiter.bytes is not None and limiter.bytes.tokens() < 1:
                self.events[f"bytes_{level}"] += 1
                allowed = 0
            if allowed <= 0:
                wait = max(wait, limiter.wait())
        if allowed > 0:
            return allowed
        loop = asyncio.get_running_loop()
        due = loop.time() + max(wait, 0.001)
        if self._timer is None or self._timer.when() > due + 0.001:  # none yet, or a limit was raised
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._retry, retry)
        return 0

    def _retry(self, retry: Callable[[], None]) -> None:
        self._timer = None
        retry()

    def consume(self, msgs: int, nbytes: int) -> None:
        self.own.consume(msgs, nbytes)
        if self.topic is not None:
            self.topic.consume(msgs, nbytes)

    def stats(self) -> dict[str, int]:
        e = self.events
        return {
            "dispatchThrottledMsgEventsBySubscriptionLimit": e["msg_subscription"],
            "dispatchThrottledBytesEventsBySubscriptionLimit": e["bytes_subscription"],
            "dispatchThrottledMsgEventsByTopicLimit": e["msg_topic"],
            "dispatchThrottledBytesEventsByTopicLimit": e["bytes_topic"],
        }

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# ---------------------------------------------------------------------- per topic
class GatedSubscription(Protocol):
    """A subscription as its topic's limits see it (``subscriptions.Subscription``, which builds
    its ``DispatchGate`` from this module: the subscriptions package sits above the policies)."""

    @property
    def dispatch_gate(self) -> DispatchGate: ...
    def schedule(self) -> None:
        """Dispatch again now if it can (a throttled subscription after its limit was raised)."""
        ...


class TopicRateLimits:
    """A topic's limiters, kept in step with its effective policies (a ``policy_listener``)."""

    def __init__(
        self,
        policies: EffectivePolicies,
        subscriptions: Callable[[], Iterable[GatedSubscription]],
        clock: Clock = time.monotonic,
    ) -> None:
        self._subscriptions = subscriptions
        self.publish = PublishLimiter(clock)
        self.dispatch = DispatchLimiter(clock)
        self._sub_rate: Mapping[str, Any] | None = None
        self.apply(policies)

    def apply(self, policies: EffectivePolicies) -> None:
        self.publish.configure(policies.get(PUBLISH_RATE))
        self.dispatch.configure(policies.get(TOPIC_DISPATCH_RATE))
        self._sub_rate = policies.get(SUBSCRIPTION_DISPATCH_RATE)
        for sub in self._subscriptions():
            self.attach(sub)
            sub.schedule()  # a raised or removed limit lets a throttled subscription go on now

    def attach(self, sub: GatedSubscription) -> None:
        """Give ``sub`` this topic's limits (idempotent; called for every new subscription)."""
        sub.dispatch_gate.topic = self.dispatch
        sub.dispatch_gate.own.configure(self._sub_rate)

    def publish_rates(self, msg_rate: float, byte_rate: float) -> None:
        self.dispatch.publish_rates(msg_rate, byte_rate)
        for sub in self._subscriptions():
            sub.dispatch_gate.own.publish_rates(msg_rate, byte_rate)
