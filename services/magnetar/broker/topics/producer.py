"""A producer as a topic sees it, and the rate sampler topics report with.

Apart from ``topic`` because both kinds of topic (persistent and non-persistent) hold them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(eq=False, slots=True)
class ServerProducer:
    producer_id: int
    name: str
    connection_id: int
    msg_in: int = 0
    # Access mode and topic epoch (producer_access.py), and the producer's properties (R104).
    access_mode: str = "Shared"
    epoch: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    # Set by the first failed write: later sends from this registration are refused, so a
    # message resent after a reconnect can never land behind one sent after it.
    fenced: BaseException | None = None


class Rate:
    """Messages and bytes per second over the last sampling interval (Pulsar's msgRateIn & co)."""

    __slots__ = ("_last_bytes", "_last_msgs", "_last_t", "bytes_rate", "msg_rate")

    def __init__(self) -> None:
        self._last_t = time.monotonic()
        self._last_msgs = 0
        self._last_bytes = 0
        self.msg_rate = 0.0
        self.bytes_rate = 0.0

    def rebase(self, msgs: int, nbytes: int) -> None:
        """Start the next interval now, at these counts: a topic that was idle (and not sampled)
        measures its first interval from when traffic resumed, not from its last sample."""
        self._last_t, self._last_msgs, self._last_bytes = time.monotonic(), msgs, nbytes

    def sample(self, msgs: int, nbytes: int) -> None:
        now = time.monotonic()
        dt = now - self._last_t
        if dt <= 0:
            return
        self.msg_rate = (msgs - self._last_msgs) / dt
        self.bytes_rate = (nbytes - self._last_bytes) / dt
        self._last_t, self._last_msgs, self._last_bytes = now, msgs, nbytes
