"""The ``Client`` options that shape the client itself rather than a producer or consumer.

pulsar-client 3.x's ``Client`` takes ``io_threads``, ``message_listener_threads``,
``concurrent_lookup_requests``, ``log_conf_file_path``, ``stats_interval_in_seconds``, ``logger``
and ``listener_name``; ``pulsar.asyncio.Client`` takes the same as keywords. ``ClientSettings``
checks them as pulsar-client does (``ValueError`` naming the argument) and holds what the client
needs of them at run time:

- ``lookup_slots``: at most ``concurrent_lookup_requests`` lookups and partition-metadata requests
  in flight at once (the rest wait their turn), as the C++ client bounds them;
- ``message_listener_threads``: the size of the pool that runs ``message_listener`` callbacks;
- ``stats``: the periodic statistics report (``stats.py``), started with the client's loop;
- the ``logger`` installed on the ``magnetar.client`` logger (``logger.py``), removed at close;
- ``listener_name``: the advertised listener whose address lookups should answer (WIRE.md R110).

``io_threads`` is checked and kept (``settings.io_threads``), but every connection of a client is
served by its one event loop: an asyncio client has no IO thread pool to size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from magnetar.client import logger as client_logger
from magnetar.client.lifecycle.stats import StatsReporter

__all__ = ["ClientSettings"]


def _int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"Argument {name} is expected to be of type 'int' and not '{type(value).__name__}'")
    if value < minimum:
        raise ValueError(f"Argument {name} must be >= {minimum}")
    return value


def _str_or_none(name: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"Argument {name} is expected to be either None or of type 'str'")
    return value


class ClientSettings:
    """pulsar-client's client-wide options, checked, and the run-time pieces they make."""

    def __init__(
        self,
        *,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        logger: Any = None,
        listener_name: str | None = None,
    ) -> None:
        self.io_threads = _int("io_threads", io_threads, 1)
        self.message_listener_threads = _int("message_listener_threads", message_listener_threads, 1)
        self.concurrent_lookup_requests = _int("concurrent_lookup_requests", concurrent_lookup_requests, 1)
        self.log_conf_file_path = _str_or_none("log_conf_file_path", log_conf_file_path)  # deprecated, no effect
        self.stats_interval_in_seconds = _int("stats_interval_in_seconds", stats_interval_in_seconds, 0)
        client_logger.check(logger)
        self.logger = logger
        self.listener_name = _str_or_none("listener_name", listener_name) or None
        self._installed: client_logger.Installed | None = None
        self._slots: asyncio.Semaphore | None = None
        self.stats: StatsReporter | None = None
        self._started = False

    def start(self, producers: Callable[[], Sequence[Any]], consumers: Callable[[], Sequence[Any]]) -> None:
        """Install the logger now (the client exists): its own lines go where the application asked."""
        self._installed = client_logger.install(self.logger)
        self.stats = StatsReporter(self.stats_interval_in_seconds, producers, consumers)

    def on_loop(self) -> None:
        """Called on the client's loop before its first connection: start what needs the loop."""
        if self._started:
            return
        self._started = True
        if self.stats is not None:
            self.stats.start()

    @property
    def lookup_slots(self) -> asyncio.Semaphore:
        """The bound on lookups in flight (made on the loop, at first use)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrent_lookup_requests)
        return self._slots

    async def close(self) -> None:
        if self.stats is not None:
            await self.stats.stop()
        client_logger.uninstall(self._installed)
        self._installed = None
