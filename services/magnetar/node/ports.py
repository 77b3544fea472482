"""``PortInUse``, the one error a bind failure becomes, ``binding``, which makes it, and ``busy_ports``.

Every node binds ports (the broker's service and admin listeners, the bookie's TCP and HTTP
ports) and the command line reports a taken one in a single line naming the port and the flag
that moves it. Binding goes one listener at a time, so the command line first asks
``busy_ports`` about all of them: someone whose 6650 and 8080 are both taken (a Pulsar standalone
still running) learns it from one line instead of one restart per port; ``binding`` still
catches a port taken between that check and the bind. This module depends on nothing else in
Magnetar, so a bookie process that only needs the error does not load the broker
(``node.listeners`` imports the broker's servers).
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator, Mapping


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


def busy_ports(host: str, ports: Mapping[str, int | None]) -> list[tuple[str, int]]:
    """The (listener, port) pairs of ``ports`` that another socket already holds on ``host``.

    Each port is bound once, with ``SO_REUSEADDR`` as the servers bind it, and let go at once;
    port 0 (any free one) and None (no listener) are never busy. Any error other than
    ``EADDRINUSE`` is left for the real bind to report."""
    busy = []
    for listener, port in ports.items():
        if not port:
            continue
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except OSError:
            continue
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    busy.append((listener, port))
    return busy
