"""The clock a broker ages data by (TTL, retention, delayed delivery): wall time that does not jump.

Message TTL, retention by time and delayed delivery compare epoch times (a message's publish time,
a ledger's close time, a deliver-at time) with "now". Taken straight from the wall clock
(``time.time``, as Pulsar does), a step of the broker's clock acts at once on the data: set an
hour ahead, the broker expires every unread message younger than an hour on its next TTL check,
trims retained ledgers an hour early and delivers every delayed message due within the hour; set
back, it delivers delayed messages late by the step and closes ledgers "an hour ago".

``GuardedClock`` cross-checks the wall clock against the monotonic clock, which steps never move:

- while the two agree (within ``tolerance`` seconds since the last reading; NTP's slewing stays
  far inside it), it is the wall clock;
- when the wall clock has moved by more than that against the monotonic one (a step: an operator,
  a VM resumed with a stale clock, NTP stepping), the step is counted, logged once, and not taken:
  the guarded time goes on with the monotonic clock, and drifts towards the wall clock at most
  ``slew`` seconds per second (1 %), as ntpd/chrony absorb a large offset by slewing rather than
  stepping. A step that was a mistake and is undone comes back within ``tolerance`` and is
  forgotten; a real correction is reached gradually.

So data never ages faster than ``1 + slew`` times real time, nor slower than ``1 - slew`` times:
a forward step cannot expire, trim or release anything early by more than ``slew`` of the time
since the step, and a backward step delays nothing by more than that fraction (never "until the
wall clock catches up"). Guarded time never goes backwards.

What it cannot see: a step of the monotonic clock together with the wall clock (the process then
believes that the time really passed, as after a long pause), and a clock that was already wrong
when the process started (it has nothing to compare with). And after a suspend of the machine
(the monotonic clock stops, the wall clock does not) the time slept counts as a step: data then
ages late by it, never early, until slewed in. ``MAGNETAR_CLOCK_GUARD=0`` in the
environment turns the guard off (plain wall clock, Pulsar's behaviour).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

GUARD_ENV = "MAGNETAR_CLOCK_GUARD"
# Largest disagreement between wall and monotonic time that is followed, not treated as a step.
TOLERANCE_SECONDS = 1.0
# How fast guarded time moves towards a stepped wall clock (seconds per second).
SLEW = 0.01


class GuardedClock:
    """Epoch seconds that follow the wall clock but not its steps (module docstring)."""

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        *,
        tolerance: float = TOLERANCE_SECONDS,
        slew: float = SLEW,
        enabled: bool = True,
    ) -> None:
        self._wall = wall
        self._mono = mono
        self.tolerance = tolerance
        self.slew = slew
        self.enabled = enabled
        self._lock = threading.Lock()
        self._base = wall()  # guarded time at monotonic ``_at``
        self._at = mono()
        self.jumps = 0  # steps of the wall clock seen (each logged once)
        self.offset = 0.0  # wall minus guarded time at the last reading
        self._stepped = False

    def now(self) -> float:
        """Guarded epoch seconds (the wall clock itself when the guard is off)."""
        wall = self._wall()
        if not self.enabled:
            return wall
        with self._lock:
            mono = self._mono()
            elapsed = max(0.0, mono - self._at)
            steady = self._base + elapsed  # where the wall clock should be without a step
            off = wall - steady
            if abs(off) <= self.tolerance:
                guarded = wall
                if self._stepped:
                    log.warning("wall clock back in step with the monotonic clock (off by %.3fs)", off)
                self._stepped = False
            else:
                if not self._stepped:
                    self.jumps += 1
                    log.warning(
                        "wall clock stepped by %+.3fs against the monotonic clock: not followed for TTL,"
                        " retention and delayed delivery (slewing towards it at %.0f%%)",
                        off,
                        self.slew * 100,
                    )
                self._stepped = True
                guarded = steady + math.copysign(min(abs(off), self.slew * elapsed), off)
            guarded = max(guarded, self._base)  # never backwards
            self._base, self._at = guarded, mono
            self.offset = wall - guarded
            return guarded

    def now_ms(self) -> int:
        return int(self.now() * 1000)


def _enabled_from_env() -> bool:
    return os.environ.get(GUARD_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


# The process's clock for aging data: one instance, so every reading sees the same steps.
POLICY_CLOCK = GuardedClock(enabled=_enabled_from_env())


def policy_time() -> float:
    """Epoch seconds for TTL, retention and delayed delivery (``POLICY_CLOCK``)."""
    return POLICY_CLOCK.now()


def policy_time_ms() -> int:
    return POLICY_CLOCK.now_ms()
