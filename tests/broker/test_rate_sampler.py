"""The broker samples the rates of the topics with traffic only (broker/topics/rate_sampler.py).

A real ``PersistentTopic`` on a real managed ledger (tests/broker/conftest.py): a subscription
brings it into the sampled set, it stays while a consumer is connected or a rate is not 0, and it
leaves at the first sample that finds it idle; closing its managed ledger makes it leave too. With
every loaded topic sampled each second (the old tick), ``join`` would never be called and the
first test fails.
"""

from __future__ import annotations

from tests.broker.conftest import FakeSink, consumer

from magnetar.broker.topics.non_persistent import NonPersistentTopic
from magnetar.broker.topics.persistent import PersistentTopic
from magnetar.broker.topics.producer import ServerProducer
from magnetar.broker.topics.rate_sampler import RateSampler
from magnetar.managed_ledger import ManagedLedger
from magnetar.protocol import commands as c


class _Counted:
    """A topic whose ``sample_rates`` answers from a list, counting its calls."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.samples = 0

    def sample_rates(self) -> bool:
        self.samples += 1
        return self.answers.pop(0)


def test_only_topics_that_joined_are_sampled_and_idle_ones_leave() -> None:
    sampler = RateSampler()
    busy, idle, never = _Counted(True, True, False), _Counted(False), _Counted(True)
    sampler.join(busy)
    sampler.join(idle)
    sampler.tick()
    assert (busy.samples, idle.samples, never.samples) == (1, 1, 0)
    assert busy in sampler and idle not in sampler and len(sampler) == 1
    sampler.tick()
    sampler.tick()
    assert busy.samples == 3 and busy not in sampler and len(sampler) == 0
    sampler.tick()
    assert busy.samples == 3, "an idle topic is not sampled again until it rejoins"


async def test_a_topic_joins_on_traffic_and_leaves_once_idle_or_closed(ml: ManagedLedger) -> None:
    sampler = RateSampler()
    topic = PersistentTopic("persistent://public/default/rates", ml)
    topic.on_traffic = sampler.join
    assert topic not in sampler, "a loaded topic without traffic is not sampled"

    sink = FakeSink()
    first = consumer(sink, 1, permits=10)
    sub = await topic.subscribe("s", c.SUB_SHARED, first, earliest=True)
    assert topic in sampler, "a subscription is traffic: the topic joins the sampled set"
    sampler.tick()
    assert topic in sampler, "a topic with a connected consumer stays sampled"

    sub.remove_consumer(first)
    sampler.tick()
    assert topic not in sampler, "idle (rates 0, no consumer): the topic leaves the sampled set"
    assert topic.rate_in.msg_rate == 0 and topic.rate_out.msg_rate == 0

    second = consumer(sink, 2, permits=10)
    await topic.subscribe("s", c.SUB_SHARED, second, earliest=True)
    assert topic in sampler, "traffic after an idle spell brings it back"
    await ml.close()
    sampler.tick()
    assert topic not in sampler, "a closed topic leaves even with a consumer still attached"


async def test_a_non_persistent_topic_joins_on_traffic_and_counts_drops_as_they_happen() -> None:
    """A real ``NonPersistentTopic`` (it has no storage): a publish brings it into the sampled set,
    a drop (no consumer with permits) reaches ``on_drop`` at once, and it leaves once idle or
    closed. With the old tick (every loaded non-persistent topic sampled, drops counted by walking
    them each second) ``join`` and ``on_drop`` are never called."""
    sampler = RateSampler()
    drops: list[int] = []
    topic = NonPersistentTopic("non-persistent://public/default/rates")
    topic.on_traffic = sampler.join
    topic.on_drop = drops.append
    producer = ServerProducer(producer_id=1, name="p", connection_id=1)
    sink = FakeSink()
    hungry = consumer(sink, 1, permits=0)
    sub = await topic.subscribe("s", c.SUB_SHARED, hungry, earliest=False)
    assert topic in sampler, "a subscription is traffic: the topic joins the sampled set"

    await topic.publish(producer, {"n": 3}, b"abc")  # no permits: three messages dropped
    assert drops == [3] and sub.msg_drop == 3
    sampler.tick()
    assert topic in sampler and topic.drop_rate.msg_rate > 0

    sub.remove_consumer(hungry)  # the last consumer: Pulsar drops the subscription
    sampler.tick()
    assert topic not in sampler, "idle (rates 0, no consumer): the topic leaves the sampled set"
    assert topic.rate_in.msg_rate == 0 and topic.drop_rate.msg_rate == 0

    await topic.publish(producer, {"n": 1}, b"x")  # nobody subscribed: nothing to drop for
    assert topic in sampler, "a publish after an idle spell brings it back"
    await topic.close()
    sampler.tick()
    assert topic not in sampler, "a closed topic leaves"
