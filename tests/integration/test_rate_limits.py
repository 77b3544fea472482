"""Publish and dispatch rate limits on a real standalone (issue 9, part 6).

Timing assertions are one-sided and wide: with a limit of R per second, N messages take at least
N/R - 1 s (the bucket starts with one second's worth), which a run without the limit beats by
far; an "unaffected" or "lifted" run is only asserted to beat what the limit would have allowed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from tests.support.admin import create_namespace, topic_stats
from tests.support.metrics import scrape, total
from tests.support.standalone import StandaloneProcess
from tests.support.standalone import admin_call as call

from magnetar.cli import admin as admin_cli
from magnetar.client import aio


@pytest.fixture
def ns(standalone: StandaloneProcess) -> str:
    """A namespace of the test's own, so that namespace policies do not leak between tests."""
    call(standalone, "PUT", "/admin/v2/tenants/rl", {})
    return create_namespace(standalone, "ns-", tenant="rl")


def _set(sa: StandaloneProcess, path: str, body: Any) -> None:
    status, answer = call(sa, "POST", path, body)
    assert status == 204, answer


def _metric(sa: StandaloneProcess, name: str, **labels: str) -> float:
    return total(scrape(sa.admin_url + "/metrics", timeout=10), name, **labels)


def _poll(what: str, check: Any, deadline_s: float = 10.0) -> Any:
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"{what} not seen within {deadline_s} s")
        time.sleep(0.05)


async def _publish(url: str, topic: str, n: int, size: int = 10) -> float:
    """Send ``n`` messages as fast as the producer may (no batching: one entry each); the
    seconds until every receipt is in. Every send must succeed."""
    async with aio.Client(url) as client:
        producer = await client.create_producer(topic, batching_enabled=False, max_pending_messages=n)
        start = time.monotonic()
        receipts = [await producer.send_async(b"x" * size) for _ in range(n)]
        ids = await asyncio.gather(*receipts)
        elapsed = time.monotonic() - start
        assert len(ids) == n and len(set(map(str, ids))) == n
        await producer.close()
        return elapsed


async def _fill(url: str, topic: str, subs: list[str], n: int) -> None:
    """Create ``subs`` at Earliest, then publish a backlog of ``n`` messages."""
    async with aio.Client(url) as client:
        for sub in subs:
            await (
                await client.subscribe(
                    topic, sub, consumer_type=aio.ConsumerType.Shared, initial_position=aio.InitialPosition.Earliest
                )
            ).close()
    await _publish(url, topic, n)


async def _drain(url: str, topic: str, sub: str, n: int, *, then: Any = None, after: int = 0) -> float:
    """Receive and ack ``n`` messages of ``sub``; the seconds it took. ``then`` (if any) is run
    once ``after`` messages are in, and the clock restarts there."""
    async with aio.Client(url) as client:
        consumer = await client.subscribe(topic, sub, consumer_type=aio.ConsumerType.Shared)
        start = time.monotonic()
        for i in range(n):
            if then is not None and i == after:
                await asyncio.to_thread(then)
                start = time.monotonic()
            msg = await consumer.receive(timeout_millis=60_000)
            await consumer.acknowledge(msg)
        elapsed = time.monotonic() - start
        await consumer.close()
        return elapsed


# ---------------------------------------------------------------------- publish
def test_a_namespace_publish_rate_holds_a_fast_producer_to_it_without_failing_a_send(
    standalone: StandaloneProcess, ns: str
) -> None:
    topic = f"persistent://{ns}/pub"
    _set(standalone, f"/admin/v2/namespaces/{ns}/publishRate", {"publishThrottlingRateInMsg": 200})
    assert call(standalone, "GET", f"/admin/v2/namespaces/{ns}/publishRate")[1] == {
        "publishThrottlingRateInMsg": 200,
        "publishThrottlingRateInByte": -1,
    }
    n = 700
    elapsed = asyncio.run(_publish(standalone.service_url, topic, n))
    assert elapsed >= n / 200 - 1 - 0.1, f"{n} messages in {elapsed:.2f} s at a limit of 200/s"
    stats = topic_stats(standalone, topic)
    assert stats["msgInCounter"] == n  # nothing dropped
    assert stats["publishRateLimitedTimes"] > 0
    _poll("the publish throttle metrics", lambda: _metric(standalone, "magnetar_publish_rate_limit_times", topic=topic))
    assert _metric(standalone, "magnetar_broker_publish_throttled_seconds_total") > 1.0


def test_a_topic_publish_byte_rate_limits_bytes(standalone: StandaloneProcess, ns: str) -> None:
    topic = f"persistent://{ns}/bytes"
    call(standalone, "PUT", f"/admin/v2/persistent/{ns}/bytes")
    _set(standalone, f"/admin/v2/persistent/{ns}/bytes/publishRate", {"publishThrottlingRateInByte": 20_000})
    n, size = 80, 1000  # 80 kB at 20 kB/s
    elapsed = asyncio.run(_publish(standalone.service_url, topic, n, size))
    assert elapsed >= n * size / 20_000 - 1 - 0.1, f"{n * size} bytes in {elapsed:.2f} s at 20 kB/s"
    assert topic_stats(standalone, topic)["msgInCounter"] == n


def test_a_publish_rate_set_and_removed_on_a_live_topic_takes_effect(standalone: StandaloneProcess, ns: str) -> None:
    topic = f"persistent://{ns}/live-pub"

    async def run() -> tuple[int, float]:
        async with aio.Client(standalone.service_url) as client:
            producer = await client.create_producer(topic, batching_enabled=False)
            await producer.send(b"loaded")
            await asyncio.to_thread(
                _set, standalone, f"/admin/v2/persistent/{ns}/live-pub/publishRate", {"publishThrottlingRateInMsg": 50}
            )
            sent = 0
            end = time.monotonic() + 15
            while topic_stats(standalone, topic)["publishRateLimitedTimes"] == 0:  # the policy reaches the topic
                await asyncio.gather(*[await producer.send_async(b"x") for _ in range(20)])
                sent += 20
                assert time.monotonic() < end, "the publish rate never engaged"
            await asyncio.to_thread(call, standalone, "DELETE", f"/admin/v2/persistent/{ns}/live-pub/publishRate")
            _poll(
                "the removal",
                lambda: call(standalone, "GET", f"/admin/v2/persistent/{ns}/live-pub/publishRate")[1] is None,
            )
            start = time.monotonic()
            await asyncio.gather(*[await producer.send_async(b"y") for _ in range(1000)])
            return sent, time.monotonic() - start

    sent, lifted = asyncio.run(run())
    assert sent >= 50  # it took at least a burst's worth to go over
    assert lifted < 1000 / 50 - 1 - 5, f"1000 messages took {lifted:.2f} s after the limit was removed"


# ---------------------------------------------------------------------- dispatch
def test_a_topic_dispatch_rate_limits_its_consumers_and_not_another_topics(
    standalone: StandaloneProcess, ns: str
) -> None:
    limited, free = f"persistent://{ns}/dispatch", f"persistent://{ns}/free"
    n = 300
    asyncio.run(_fill(standalone.service_url, limited, ["s"], n))
    asyncio.run(_fill(standalone.service_url, free, ["s"], n))
    _set(
        standalone,
        f"/admin/v2/persistent/{ns}/dispatch/dispatchRate",
        {"dispatchThrottlingRateInMsg": 100, "ratePeriodInSecond": 1},
    )

    async def both() -> tuple[float, float]:
        a, b = await asyncio.gather(
            _drain(standalone.service_url, limited, "s", n), _drain(standalone.service_url, free, "s", n)
        )
        return a, b

    slow, fast = asyncio.run(both())
    assert slow >= n / 100 - 1 - 0.1, f"{n} messages dispatched in {slow:.2f} s at 100/s"
    assert fast < n / 100 - 1, f"the unlimited topic took {fast:.2f} s"
    sub = topic_stats(standalone, limited)["subscriptions"]["s"]
    assert sub["dispatchThrottledMsgEventsByTopicLimit"] > 0
    assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] == 0
    assert topic_stats(standalone, free)["subscriptions"]["s"]["dispatchThrottledMsgEventsByTopicLimit"] == 0
    _poll(
        "the dispatch throttle metric",
        lambda: _metric(
            standalone, "magnetar_subscription_dispatch_throttled_events", topic=limited, limit="topic", unit="msg"
        ),
    )


def test_a_topic_dispatch_rate_is_shared_by_its_subscriptions(standalone: StandaloneProcess, ns: str) -> None:
    topic = f"persistent://{ns}/shared-limit"
    n = 150
    asyncio.run(_fill(standalone.service_url, topic, ["a", "b"], n))
    _set(standalone, f"/admin/v2/persistent/{ns}/shared-limit/dispatchRate", {"dispatchThrottlingRateInMsg": 100})

    async def both() -> float:
        start = time.monotonic()
        await asyncio.gather(
            _drain(standalone.service_url, topic, "a", n), _drain(standalone.service_url, topic, "b", n)
        )
        return time.monotonic() - start

    elapsed = asyncio.run(both())
    assert elapsed >= 2 * n / 100 - 1 - 0.1, f"2 x {n} messages in {elapsed:.2f} s at 100/s for the topic"


def test_a_subscription_dispatch_rate_limits_each_subscription_and_a_topic_override_lifts_it(
    standalone: StandaloneProcess, ns: str
) -> None:
    limited, exempt = f"persistent://{ns}/per-sub", f"persistent://{ns}/exempt"
    n = 250
    asyncio.run(_fill(standalone.service_url, limited, ["a", "b"], n))
    asyncio.run(_fill(standalone.service_url, exempt, ["a"], n))
    _set(standalone, f"/admin/v2/namespaces/{ns}/subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": 100})
    # topic level overrides namespace level: -1 is "no limit" for this topic
    _set(standalone, f"/admin/v2/persistent/{ns}/exempt/subscriptionDispatchRate", {"dispatchThrottlingRateInMsg": -1})

    async def all_three() -> list[float]:
        url = standalone.service_url
        return list(
            await asyncio.gather(
                _drain(url, limited, "a", n), _drain(url, limited, "b", n), _drain(url, exempt, "a", n)
            )
        )

    a, b, free = asyncio.run(all_three())
    for elapsed in (a, b):
        assert elapsed >= n / 100 - 1 - 0.1, f"{n} messages in {elapsed:.2f} s at 100/s per subscription"
    assert free < n / 100 - 1, f"the exempt topic's subscription took {free:.2f} s"
    subs = topic_stats(standalone, limited)["subscriptions"]
    assert subs["a"]["dispatchThrottledMsgEventsBySubscriptionLimit"] > 0
    assert subs["b"]["dispatchThrottledMsgEventsBySubscriptionLimit"] > 0


def test_a_dispatch_byte_rate_limits_bytes(standalone: StandaloneProcess, ns: str) -> None:
    topic = f"persistent://{ns}/dispatch-bytes"
    n = 300  # 10-byte messages: 3,000 bytes at 1,000 per 2 s
    asyncio.run(_fill(standalone.service_url, topic, ["s"], n))
    body = {"dispatchThrottlingRateInByte": 1000, "ratePeriodInSecond": 2}
    _set(standalone, f"/admin/v2/persistent/{ns}/dispatch-bytes/dispatchRate", body)
    elapsed = asyncio.run(_drain(standalone.service_url, topic, "s", n))
    assert elapsed >= 3000 / 500 - 2 - 0.1, f"3000 bytes in {elapsed:.2f} s at 500 B/s"
    assert topic_stats(standalone, topic)["subscriptions"]["s"]["dispatchThrottledBytesEventsByTopicLimit"] > 0


def test_removing_a_dispatch_rate_lets_a_throttled_consumer_go_at_once(standalone: StandaloneProcess, ns: str) -> None:
    topic = f"persistent://{ns}/live-dispatch"
    n = 400
    asyncio.run(_fill(standalone.service_url, topic, ["s"], n))
    _set(standalone, f"/admin/v2/persistent/{ns}/live-dispatch/dispatchRate", {"dispatchThrottlingRateInMsg": 20})

    def remove() -> None:
        assert call(standalone, "DELETE", f"/admin/v2/persistent/{ns}/live-dispatch/dispatchRate")[0] == 204

    # 40 messages at 20/s (a burst of 20, then 1 s), then the limit goes; the other 360 at 20/s
    # would take 18 s.
    rest = asyncio.run(_drain(standalone.service_url, topic, "s", n, then=remove, after=40))
    assert rest < 360 / 20 - 8, f"the rest took {rest:.2f} s after the limit was removed"


# ---------------------------------------------------------------------- admin
def test_rate_policies_are_validated_and_reported_enforced(standalone: StandaloneProcess, ns: str) -> None:
    status, body = call(
        standalone, "POST", f"/admin/v2/namespaces/{ns}/publishRate", {"publishThrottlingRateInMsg": -7}
    )
    assert status == 400 and "publishThrottlingRateInMsg must be -1" in body["reason"]
    status, body = call(standalone, "POST", f"/admin/v2/namespaces/{ns}/dispatchRate", {"ratePeriodInSecond": 0})
    assert status == 400 and "ratePeriodInSecond" in body["reason"]
    status, body = call(
        standalone,
        "POST",
        f"/admin/v2/namespaces/{ns}/subscriptionDispatchRate",
        {"dispatchThrottlingRateInByte": "1k"},
    )
    assert status == 400 and "must be an integer" in body["reason"]
    _set(standalone, f"/admin/v2/namespaces/{ns}/dispatchRate", {"dispatchThrottlingRateInMsg": 5})
    doc = call(standalone, "GET", f"/admin/v2/namespaces/{ns}")[1]
    assert doc["topicDispatchRate"]["dispatchThrottlingRateInMsg"] == 5
    assert doc["unenforced"] == [] or "topicDispatchRate" not in doc["unenforced"]


def test_magnetar_admin_rate_verbs(standalone: StandaloneProcess, ns: str, capsys: pytest.CaptureFixture[str]) -> None:
    def admin(*argv: str) -> str:
        assert admin_cli.main(["--admin-url", standalone.admin_url, *argv]) == 0
        return capsys.readouterr().out

    admin("namespaces", "set-publish-rate", ns, "--msg-publish-rate", "10", "--byte-publish-rate", "1024")
    assert '"publishThrottlingRateInByte": 1024' in admin("namespaces", "get-publish-rate", ns)
    admin("namespaces", "remove-publish-rate", ns)
    assert admin("namespaces", "get-publish-rate", ns) == ""
    admin("namespaces", "set-subscription-dispatch-rate", ns, "-md", "7", "-dt", "3")
    out = admin("namespaces", "get-subscription-dispatch-rate", ns)
    assert '"dispatchThrottlingRateInMsg": 7' in out and '"ratePeriodInSecond": 3' in out
    topic = f"persistent://{ns}/cli"
    admin("topics", "create", topic)
    admin("topics", "set-dispatch-rate", topic, "--msg-dispatch-rate", "9", "--relative-to-publish-rate")
    out = admin("topics", "get-dispatch-rate", topic)
    assert '"dispatchThrottlingRateInMsg": 9' in out and '"relativeToPublishRate": true' in out
    admin("topics", "remove-dispatch-rate", topic)
    assert admin("topics", "get-dispatch-rate", topic) == ""
    assert admin_cli.main(["--admin-url", standalone.admin_url, "topics", "set-publish-rate", topic, "-m", "-3"]) == 1
    assert "publishThrottlingRateInMsg must be -1" in capsys.readouterr().err


def test_removing_a_publish_rate_after_a_large_overdraft_frees_the_connection(
    standalone: StandaloneProcess, ns: str
) -> None:
    """A batch of 100 at 1 msg/s leaves ~100 s of debt; removing the limit must not wait for it."""
    topic = f"persistent://{ns}/overdraft"
    call(standalone, "PUT", f"/admin/v2/persistent/{ns}/overdraft")
    _set(standalone, f"/admin/v2/persistent/{ns}/overdraft/publishRate", {"publishThrottlingRateInMsg": 1})

    async def run() -> float:
        async with aio.Client(standalone.service_url) as client:
            producer = await client.create_producer(topic, batching_max_publish_delay_ms=50)
            await asyncio.gather(*[await producer.send_async(b"x") for _ in range(100)])  # one batch
            late = await producer.send_async(b"y")  # read only once the connection is let go
            assert call(standalone, "DELETE", f"/admin/v2/persistent/{ns}/overdraft/publishRate")[0] == 204
            start = time.monotonic()
            await asyncio.wait_for(late, 30)
            return time.monotonic() - start

    elapsed = asyncio.run(run())
    assert elapsed < 10, f"the send took {elapsed:.2f} s after the limit was removed (the debt was ~100 s)"
    assert topic_stats(standalone, topic)["msgInCounter"] == 101
