"""Which loaded topics the broker samples rates of each second: the ones with traffic.

Sampling the rates of every loaded topic and refreshing a dozen per-topic Prometheus gauges in the
broker's one-second tick, all in one callback, is O(loaded topics) of Python each second, run
between the frames of every other tenant. At 3,000 topics that callback took tens of milliseconds;
at 100,000 topics more than the second itself, so a quiet tenant's p99 rose to hundreds of
milliseconds while another tenant merely had many idle topics (the exhaustion scenario,
tests/faults/test_exhaustion.py).

A topic, persistent or not, joins the sampled set at its first publish or subscription after an
idle spell (``on_traffic``) and leaves it at the first sample that finds it idle (its rates 0 and
no consumer connected), so each tick costs O(topics with traffic). Non-persistent drops are
counted as they happen (``NonPersistentSubscription.on_drop``), not by walking the topics. An
idle topic keeps the rates of its last sample, which are 0. Per-topic metrics are read at scrape
time instead (``metrics/topics.py``).
"""

from __future__ import annotations

from typing import Protocol


class Sampled(Protocol):
    def sample_rates(self) -> bool: ...


class RateSampler:
    """The set of topics with traffic, sampled by ``tick``."""

    def __init__(self) -> None:
        self._active: dict[int, Sampled] = {}  # by id(): a reloaded topic of the same name is another

    def join(self, topic: Sampled) -> None:
        """``topic`` has traffic again (its ``on_traffic``)."""
        self._active[id(topic)] = topic

    def tick(self) -> None:
        """Sample every topic with traffic and forget the ones now idle. An unloaded topic has no
        consumer and no publish left, so it goes at its next sample or the one after."""
        for key, topic in list(self._active.items()):
            if not topic.sample_rates():
                del self._active[key]

    def __len__(self) -> int:
        return len(self._active)

    def __contains__(self, topic: object) -> bool:
        return id(topic) in self._active and self._active[id(topic)] is topic
