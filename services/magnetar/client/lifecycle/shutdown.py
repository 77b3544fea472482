"""``Client.shutdown()``: close everything at once, without waiting for the broker.

pulsar-client's ``shutdown`` releases the client's resources without waiting for operations under
way, where ``close`` flushes producers and waits for the broker to confirm each close. Here that is:
every message not yet acknowledged fails with ``AlreadyClosed`` now (so each ``send_async``
callback still runs exactly once, and no blocking ``send`` is left waiting), the connections are
dropped, and then the ordinary close runs, which with no connection and nothing pending has nothing
left to wait for. It takes the client's parts, typed by what it uses of them (the protocols
below), rather than the client, so that it sits below the client, the producers and the
connections it acts on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from magnetar.protocol.errors import AlreadyClosed, MagnetarError

__all__ = ["abandon_now"]


class PendingSends(Protocol):
    """One partition producer (``producer.PartitionProducer``): its sends not yet acknowledged."""

    def _fail_all(self, exc: MagnetarError) -> None: ...


class Partitioned(Protocol):
    """A producer (``producer.Producer``): its partition producers."""

    @property
    def partitions(self) -> Sequence[PendingSends]: ...


class Closable(Protocol):
    """A connection (``net.connection.Connection``): closed at once, without a goodbye."""

    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


def abandon_now(producers: Iterable[Partitioned], connections: Iterable[asyncio.Future[C]]) -> None:
    """Fail the producers' pending sends and drop the connections, at once (on the client's loop).

    The caller then runs its ordinary close, which finds nothing left to wait for.
    """
    gone = AlreadyClosed("the client was shut down before the message was acknowledged")
    for producer in list(producers):
        for part in producer.partitions:
            part._fail_all(gone)
    for fut in list(connections):
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            fut.result().close()
