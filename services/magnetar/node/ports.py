"""``PortInUse``, the one error a bind failure becomes, and ``binding``, which makes it.

Every node binds ports (the broker's service and admin listeners, the bookie's TCP and HTTP
ports) and the command line reports a taken one in a single line naming the port and the flag
that moves it. This module depends on nothing else in Magnetar, so a bookie process that only
needs the error does not load the broker (``node.listeners`` imports the broker's servers).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator


class PortInUse(Exception):
    """``port`` is already bound by another process; ``listener`` says which of ours wanted it
    (``service``, ``admin``, ``bookie`` or ``http``)."""

    def __init__(self, port: int, listener: str) -> None:
        super().__init__(f"port {port} is already in use ({listener} port)")
        self.port = port
        self.listener = listener


@contextlib.contextmanager
def binding(port: int, listener: str) -> Iterator[None]:
    """Turn an ``EADDRINUSE`` from binding ``port`` inside the block into ``PortInUse``."""
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(port, listener) from exc
        raise
