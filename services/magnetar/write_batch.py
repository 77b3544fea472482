"""Writes made inside one callback go out when it ends, not one turn of the event loop later.

Why: a connection gathers what is written to it during a turn of the loop into one socket write
by scheduling its flush with ``call_soon``, which costs each message one more turn (about 0.07 ms
per message at 5,000 msg/s, one message per entry, in the broker; as much again in the client).
A callback known to write to many connections, or many times to one, opens ``flushed_at_end()``:
connections written to inside it hand their flush to the scope (``defer``), and the scope runs
them, once each and in order, as it closes. The writes are still coalesced (one flush per
connection per scope) and still in order, only sooner. Used where one callback answers a batch:
the bookie storage resolving a group commit (every add's receipt, then the delivery of the new
entries to the consumers at the tail, deferred behind the receipts' flushes), and the blocking
client handing over the messages queued by the caller's thread.

Per thread: the blocking client's loop thread and a broker's loop may share a process (tests do),
and a flush must run on the thread of its loop. A top-level module, like ``event_loop``: every
layer may use it, and it imports nothing of Magnetar.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

_local = threading.local()


@contextlib.contextmanager
def flushed_at_end() -> Iterator[None]:
    """Run the flushes ``defer`` collects inside the block when it ends (nested scopes join the
    outermost). A flush that raises is logged; the others still run."""
    if getattr(_local, "flushes", None) is not None:
        yield
        return
    flushes: list[Callable[[], None]] = []
    _local.flushes = flushes
    try:
        yield
    finally:
        # The scope stays open while it runs them: a deferred call that writes (a dispatch, see
        # ``defer``) hands its connection's flush to the same run, after the ones before it.
        try:
            i = 0
            while i < len(flushes):
                flush = flushes[i]
                i += 1
                try:
                    flush()
                except Exception:
                    log.exception("deferred flush failed")
        finally:
            _local.flushes = None


def defer(flush: Callable[[], None]) -> bool:
    """Hand ``flush`` to the open scope of this thread; False when there is none (the caller then
    schedules it itself). The caller must register each pending flush once.

    Not only flushes: work that writes may be deferred too, to run after the flushes handed over
    before it (the broker delivers a new entry to its consumers after the producer's receipt has
    gone out), its own flushes joining the same run."""
    flushes: list[Callable[[], None]] | None = getattr(_local, "flushes", None)
    if flushes is None:
        return False
    flushes.append(flush)
    return True
