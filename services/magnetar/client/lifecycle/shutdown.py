"""``Client.shutdown()``: close everything at once, without waiting for the broker.

pulsar-client's ``shutdown`` releases the client's resources without waiting for operations under
way, where ``close`` flushes producers and waits for the broker to confirm each close. Here that is:
every message not yet acknowledged fails with ``AlreadyClosed`` now (so each ``send_async``
callback still runs exactly once, and no blocking ``send`` is left waiting), the connections are
dropped, and then the ordinary close runs, which with no connection and nothing pending has nothing
left to wait for. It takes the client's parts rather than the client, so that ``aio`` can use it
without an import cycle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from magnetar.client.net.connection import Connection
from magnetar.client.producer.producer import Producer
from magnetar.protocol.errors import AlreadyClosed

__all__ = ["abandon_now"]


def abandon_now(producers: Iterable[Producer], connections: Iterable[asyncio.Future[Connection]]) -> None:
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
