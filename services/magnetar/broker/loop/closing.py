"""Closing the connections whose clients left, a bounded number per event-loop turn.

When a client closes its side, the event loop reads the end of its stream and, by default, closes
the transport at once; the connection's cleanup (``connection_lost``) follows in the same turn's
callbacks. When thousands of clients leave together (an application fleet stopping, a load
balancer dropping its connections), all of that ran in one or two turns: 10,000 leaving clients
stopped the broker's loop for about 150 ms, and every other tenant's requests waited (the
exhaustion scenario's quiet tenant, tests/faults/test_exhaustion.py).

``ServerConnection.eof_received`` keeps the transport open instead and hands it to the broker's
``ClosingQueue``, which closes at most ``PER_TURN`` transports per loop turn: the work is the
same, spread over turns, with other connections' callbacks in between. Between two batches the
loop idles ``pause.PAUSE`` (1 ms) rather than going straight on (``call_soon``); ``pause`` says
why and what it bought. A client that left needs nothing more from the connection, so the
delay costs it nothing; its producers and consumers are removed when the close completes, as before.

The queue sits in ``loop/``, below the service that owns one per broker, rather than with the
connection that feeds it: the service holds it, and the server package sits above the service.
"""

from __future__ import annotations

import asyncio
from collections import deque

from magnetar.broker.loop.pause import PAUSE

PER_TURN = 64


class ClosingQueue:
    """Transports waiting to be closed, drained ``per_turn`` at a time by a callback that
    schedules itself again while any are left (one queue per broker, on its loop)."""

    def __init__(self, per_turn: int = PER_TURN) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be at least 1, not {per_turn}")
        self.per_turn = per_turn
        self._queue: deque[asyncio.BaseTransport] = deque()
        self._scheduled = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, transport: asyncio.BaseTransport) -> None:
        """Close ``transport`` on this or a later turn of the running loop."""
        self._queue.append(transport)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        for _ in range(min(self.per_turn, len(self._queue))):
            self._queue.popleft().close()
        if self._queue:  # the rest after a pause, and after the callbacks that are waiting
            self._scheduled = True
            asyncio.get_running_loop().call_later(PAUSE, self._drain)
