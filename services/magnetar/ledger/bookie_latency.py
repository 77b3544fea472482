"""Per-bookie add latency as the ledger writers see it, and which bookie is slow.

With Qa < Qw a writer acknowledges an entry once the fastest Qa bookies have it, so a bookie whose
disk turned slow (fsync taking hundreds of milliseconds) hides behind the others: publish latency
stays normal and nothing fails. That is what the quorum is for, but the operator must still learn
of it: the next failure of a fast bookie would make the slow one part of every ack quorum. Like
BookKeeper's per-bookie client stats, every write handle records, for each replica it sent an
entry to, the time from send to that bookie's confirmation (``WriteHandle`` calls ``record``).

``BookieLatency`` keeps, per bookie:

- cumulative histogram buckets, a sum and a count (exported by the broker's ``/metrics`` as
  ``magnetar_bookie_client_add_latency_seconds{bookie=...}``);
- the samples of the last ``window`` seconds (bounded), from which p50 / p99 are computed.

At most once per ``evaluate_every`` seconds it compares each bookie's recent p50 with the median
of the other bookies' p50s: a bookie is *slow* when its p50 is over ``factor`` times that and at
least ``min_excess`` seconds more (so jitter between two fast bookies is never reported), with at
least ``min_samples`` recent samples. Becoming slow is logged once as a WARNING naming the bookie
with its figures; recovering is logged at INFO; ``slow_bookies()`` and ``snapshot()`` give the
current verdict (the broker exports it as ``magnetar_bookie_client_slow{bookie=...}``).

One process-wide instance, ``BOOKIE_LATENCY``, is shared by every writer of the process (a broker
runs one ``LedgerManager``; several brokers in one test process share the figures).
"""

from __future__ import annotations

import bisect
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

BUCKETS: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class BookieLatencyStats:
    """One bookie's figures: cumulative (buckets, sum, count) and recent (p50, p99, samples)."""

    bookie: str
    buckets: tuple[int, ...]  # cumulative counts per ``BUCKETS`` bound, then +Inf
    total: float
    count: int
    recent_samples: int
    p50: float | None
    p99: float | None
    slow: bool


class _PerBookie:
    __slots__ = ("buckets", "count", "recent", "slow", "total")

    def __init__(self, max_recent: int) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.count = 0
        self.recent: deque[tuple[float, float]] = deque(maxlen=max_recent)
        self.slow = False


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class BookieLatency:
    def __init__(
        self,
        *,
        window: float = 10.0,
        max_recent: int = 4096,
        factor: float = 4.0,
        min_excess: float = 0.05,
        min_samples: int = 20,
        evaluate_every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.max_recent = max_recent
        self.factor = factor
        self.min_excess = min_excess
        self.min_samples = min_samples
        self.evaluate_every = evaluate_every
        self._clock = clock
        self._bookies: dict[str, _PerBookie] = {}
        self._next_evaluation = 0.0

    def record(self, bookie: str, seconds: float) -> None:
        """One confirmed add to ``bookie`` that took ``seconds`` from send to confirmation."""
        b = self._bookies.get(bookie)
        if b is None:
            b = self._bookies[bookie] = _PerBookie(self.max_recent)
        b.buckets[bisect.bisect_left(BUCKETS, seconds)] += 1
        b.total += seconds
        b.count += 1
        now = self._clock()
        b.recent.append((now, seconds))
        if now >= self._next_evaluation:
            self._next_evaluation = now + self.evaluate_every
            self.evaluate(now)

    def _recent(self, b: _PerBookie, now: float) -> list[float]:
        horizon = now - self.window
        while b.recent and b.recent[0][0] < horizon:
            b.recent.popleft()
        return sorted(s for _, s in b.recent)

    def evaluate(self, now: float | None = None) -> list[str]:
        """Re-judge which bookies are slow (logging changes); returns the slow ones."""
        now = self._clock() if now is None else now
        p50: dict[str, float] = {}
        p99: dict[str, float] = {}
        for name, b in self._bookies.items():
            recent = self._recent(b, now)
            if len(recent) >= self.min_samples:
                p50[name] = _quantile(recent, 0.5)
                p99[name] = _quantile(recent, 0.99)
        for name, b in self._bookies.items():
            others = [v for k, v in p50.items() if k != name]
            mine = p50.get(name)
            if mine is None:
                slow = b.slow and bool(b.recent)  # too few samples to re-judge: keep it while any
            elif not others:
                slow = False  # nobody to compare with
            else:
                baseline = statistics.median(others)
                slow = mine > self.factor * baseline and mine - baseline >= self.min_excess
            if slow and not b.slow:
                baseline = statistics.median(others) if others else 0.0
                log.warning(
                    "bookie %s is slow: add latency p50 %.1f ms, p99 %.1f ms over the last %.0fs, vs p50 %.1f ms "
                    "on the other bookies; writes keep their latency only while Qa other bookies are fast",
                    name,
                    (mine or 0.0) * 1000,
                    p99.get(name, 0.0) * 1000,
                    self.window,
                    baseline * 1000,
                )
            elif b.slow and not slow:
                log.info("bookie %s is no longer slow (add latency p50 %s)", name, _ms(mine))
            b.slow = slow
        return sorted(k for k, b in self._bookies.items() if b.slow)

    def slow_bookies(self) -> list[str]:
        return sorted(k for k, b in self._bookies.items() if b.slow)

    def snapshot(self) -> list[BookieLatencyStats]:
        """Every bookie's figures now (for metrics; re-judges first)."""
        now = self._clock()
        self.evaluate(now)
        out = []
        for name, b in sorted(self._bookies.items()):
            recent = self._recent(b, now)
            cumulative, running = [], 0
            for n in b.buckets:
                running += n
                cumulative.append(running)
            out.append(
                BookieLatencyStats(
                    bookie=name,
                    buckets=tuple(cumulative),
                    total=b.total,
                    count=b.count,
                    recent_samples=len(recent),
                    p50=_quantile(recent, 0.5) if recent else None,
                    p99=_quantile(recent, 0.99) if recent else None,
                    slow=b.slow,
                )
            )
        return out

    def forget(self, bookie: str) -> None:
        self._bookies.pop(bookie, None)


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


BOOKIE_LATENCY = BookieLatency()
