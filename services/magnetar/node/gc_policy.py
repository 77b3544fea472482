"""Garbage collection for a server's latency: collections that never walk the long-lived state.

CPython's cycle collector runs a full collection each time the objects that survived into its
oldest generation have grown by a quarter, and a full collection walks every tracked object. A
broker's heap is almost all long-lived state (topics, cursors, connections), and almost none of it
is garbage: the full collections measured while 3,000 topics or 10,000 connections were opened
freed 0 objects, and each stopped every tenant's frames for 24-51 ms, a pause that grows with the
heap (the exhaustion scenarios: the quiet tenant's p99).

The policy (``from_env().start()``, in the server processes; ``MAGNETAR_GC_POLICY=default`` keeps
CPython's):

- At start, once the service is up: a full collection, then ``gc.freeze()``: the startup heap
  moves to the permanent generation, which collections do not walk.
- After each collection of the middle or oldest generation: ``gc.freeze()``. What survived two
  collections is long-lived state, so each collection walks only objects newer than that, and its
  pause stays about the same whatever the heap's size.
- A *sweep* (``gc.unfreeze()``, a full collection, ``gc.freeze()``) at most once every
  ``MAGNETAR_GC_SWEEP_SECONDS`` (default 300; 0: never), and only when the frozen objects have
  grown by a tenth since the last sweep. Cycles among frozen objects that became garbage later (a
  closed connection's, an unloaded topic's, if their objects reference each other) are freed
  there; until then they are kept, so memory grows by at most what leaks that way in one
  interval. The sweep's pause is a full collection's: once per interval at most, instead of at
  each quarter of growth.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from typing import Any

log = logging.getLogger(__name__)

ENV = "MAGNETAR_GC_POLICY"  # "freeze" (the default) or "default" (CPython's, untouched)
SWEEP_ENV = "MAGNETAR_GC_SWEEP_SECONDS"
SWEEP_GROWTH = 0.1  # a sweep runs only once the frozen set has grown by this fraction


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    """``gc.callbacks`` hook: freeze what survived a middle or oldest generation collection.

    Called after the collection is complete; ``gc.freeze`` only moves the generations' lists to
    the permanent one."""
    if phase == "stop" and info["generation"] >= 1:
        gc.freeze()


class GcPolicy:
    """The installed policy: the callback and the sweep timer (``uninstall`` undoes both)."""

    def __init__(self, sweep_seconds: float) -> None:
        self.sweep_seconds = sweep_seconds
        self.sweeps = 0
        self._frozen_after_sweep = 0
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        gc.collect()
        gc.freeze()
        self._frozen_after_sweep = gc.get_freeze_count()
        gc.callbacks.append(_freeze_survivors)
        self._schedule()

    def _schedule(self) -> None:
        if self.sweep_seconds > 0:
            self._timer = asyncio.get_running_loop().call_later(self.sweep_seconds, self._tick)

    def _tick(self) -> None:
        if gc.get_freeze_count() >= self._frozen_after_sweep * (1 + SWEEP_GROWTH):
            self.sweep()
        self._schedule()

    def sweep(self) -> int:
        """Collect the garbage among the frozen objects, then freeze the survivors again."""
        t0 = time.perf_counter()
        before = gc.get_freeze_count()
        gc.unfreeze()
        found = gc.collect()
        gc.freeze()
        self._frozen_after_sweep = gc.get_freeze_count()
        self.sweeps += 1
        log.info(
            "gc sweep: %d garbage objects among %d frozen, %d kept, %.1f ms",
            found,
            before,
            self._frozen_after_sweep,
            (time.perf_counter() - t0) * 1000,
        )
        return found

    def uninstall(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if _freeze_survivors in gc.callbacks:
            gc.callbacks.remove(_freeze_survivors)
        gc.unfreeze()


def from_env() -> GcPolicy | None:
    """The policy ``MAGNETAR_GC_POLICY`` and ``MAGNETAR_GC_SWEEP_SECONDS`` choose, not yet started
    (``start`` it on the running loop once the service is up); None keeps CPython's. A bad value
    raises ``ValueError`` naming the variable."""
    chosen = os.environ.get(ENV, "freeze").strip().lower()
    if chosen == "default":
        return None
    if chosen != "freeze":
        raise ValueError(f"{ENV}={chosen!r}: expected freeze or default")
    raw = os.environ.get(SWEEP_ENV, "300")
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{SWEEP_ENV}={raw!r}: expected a number of seconds") from None
    if seconds < 0:
        raise ValueError(f"{SWEEP_ENV}={raw!r}: expected 0 (never) or a positive number of seconds")
    return GcPolicy(seconds)
