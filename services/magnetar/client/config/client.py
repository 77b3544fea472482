"""``Client(...)``'s options: the option list (``CLIENT_OPTIONS``) and the client-wide settings.

``CLIENT_OPTIONS`` is the one definition of the ``Client`` options (``option_list.py``):
pulsar-client 3.x's in ``pulsar.Client``'s order, names and defaults, then Magnetar's keyword-only
ones. The asyncio ``Client`` takes them all as keywords (``pulsar.asyncio.Client`` forwards its
keywords), plus ``max_lookup_redirects``.

The options below shape the client itself rather than a producer or consumer.

pulsar-client 3.x's ``Client`` takes ``io_threads``, ``message_listener_threads``,
``concurrent_lookup_requests``, ``log_conf_file_path``, ``stats_interval_in_seconds``, ``logger``
and ``listener_name``; ``pulsar.asyncio.Client`` takes the same as keywords. ``ClientSettings``
checks them as pulsar-client does (``ValueError`` naming the argument) and holds what the client
needs of them at run time:

- ``lookup_slots``: at most ``concurrent_lookup_requests`` lookups and partition-metadata requests
  in flight at once (the rest wait their turn), as the C++ client bounds them;
- ``message_listener_threads``: the size of the pool that runs ``message_listener`` callbacks;
- ``stats``: the periodic statistics report (``lifecycle.stats``, given by the client), started
  with the client's loop;
- the ``logger`` installed on the ``magnetar.client`` logger (``client.logger``), removed at close;
- ``listener_name``: the advertised listener whose address lookups should answer (WIRE.md R110).

``io_threads`` is checked and kept (``settings.io_threads``), but every connection of a client is
served by its one event loop: an asyncio client has no IO thread pool to size.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from magnetar.client import logger as client_logger
from magnetar.client.config.arguments import of_type, of_type_or_none
from magnetar.client.config.option_list import Check, Option, OptionList, Place, extension
from magnetar.client.partition_updates import DEFAULT_PARTITIONS_UPDATE_INTERVAL

__all__ = ["CLIENT_OPTIONS", "DEFAULT_SERVICE_URL", "MAX_LOOKUP_REDIRECTS", "ClientSettings"]

DEFAULT_SERVICE_URL = "magnetar://127.0.0.1:6650"
MAX_LOOKUP_REDIRECTS = 8


_NO = Place.ABSENT


def _option(name: str, default: Any, check: Check | None = None, *, settings: bool = False) -> Option:
    """pulsar-client's option: positional in the blocking flavour, a keyword in the asyncio one;
    ``settings``: also one of ``ClientSettings``'s."""
    return Option(name, default, check, asyncio=Place.KEYWORD, config=Place.KEYWORD if settings else _NO)


_BOOL = of_type(bool)
_STR_OR_NONE = of_type_or_none(str)

# The TLS arguments are checked from this list by ``aio.Client`` (``CLIENT_OPTIONS.check``), with
# pulsar-client's ``_check_type`` and its ``ValueError``: ``use_tls="x"`` is a mistake to report,
# not a truthy string that turns TLS on. The service URL is checked by the blocking facade
# (``check_service_url``), the client-wide settings by ``ClientSettings``, the rest by the pieces
# they configure (the timeouts accept floats: Magnetar's loop timers take them).
CLIENT_OPTIONS = OptionList(
    "Client",
    [
        Option("service_url", DEFAULT_SERVICE_URL, config=_NO),
        _option("authentication", None),
        _option("operation_timeout_seconds", 30),
        _option("io_threads", 1, settings=True),
        _option("message_listener_threads", 1, settings=True),
        _option("concurrent_lookup_requests", 50000, settings=True),
        _option("log_conf_file_path", None, settings=True),
        _option("stats_interval_in_seconds", 600, settings=True),
        _option("use_tls", False, _BOOL),
        _option("tls_trust_certs_file_path", None, _STR_OR_NONE),
        _option("tls_allow_insecure_connection", False, _BOOL),
        _option("tls_validate_hostname", False, _BOOL),
        _option("logger", None, settings=True),
        _option("connection_timeout_ms", 10000),
        _option("listener_name", None, settings=True),
        _option("tls_private_key_file_path", None, _STR_OR_NONE),
        _option("tls_certificate_file_path", None, _STR_OR_NONE),
        # ---- beyond pulsar-client
        Option("max_lookup_redirects", MAX_LOOKUP_REDIRECTS, blocking=Place.ABSENT, asyncio=Place.KEYWORD, config=_NO),
        extension("initial_backoff_interval_ms", 100, config=_NO),
        extension("max_backoff_interval_ms", 30000, config=_NO),
        extension("keep_alive_interval_seconds", 30, config=_NO),
        extension("partitions_update_interval", DEFAULT_PARTITIONS_UPDATE_INTERVAL, config=_NO),
    ],
)


class Reporter(Protocol):
    """The periodic statistics report (``lifecycle.stats.StatsReporter``), made by the client that
    knows its producers and consumers, and started and stopped with these settings."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


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
        self.stats: Reporter | None = None
        self._started = False

    def start(self, stats: Reporter) -> None:
        """Install the logger now (the client exists): its own lines go where the application asked;
        ``stats`` reports every ``stats_interval_in_seconds`` once the loop runs (``on_loop``)."""
        self._installed = client_logger.install(self.logger)
        self.stats = stats

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
