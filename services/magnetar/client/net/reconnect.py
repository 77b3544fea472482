"""Staying attached to a topic's owner: the backoff policy and the (re)attach loop of producers and consumers.

A producer or consumer is *attached* when it is registered (``producer`` / ``subscribe`` answered) on
a live connection to the broker that owns its topic. It becomes *detached* when that connection
drops, when the broker pushes ``close_producer`` / ``close_consumer`` (the topic was unloaded or
moved), or when the broker says its registration is gone (a retryable ``send_error``). A detached
object keeps its state — a producer its unacknowledged batches, a consumer its pending acks — and
a background task looks the topic up again (``Resolver.lookup``: any service URL, following
redirects) and re-attaches, waiting between attempts by ``Backoff``: Pulsar's client does exactly
this (``ConnectionHandler`` + ``Backoff``), and WIRE.md ("Ownership, lookup and redirects")
asks for it.

Two loops, on purpose:
- ``attach_first`` runs inside ``create_producer`` / ``subscribe``: it retries only errors that say
  "try again" (``RetryableError``: no owner yet, broker unreachable or shutting down) and gives up
  at the operation timeout, so a caller with a wrong topic or a busy exclusive subscription hears
  about it at once;
- the background re-attach loop retries until the object is closed (messages meanwhile time out
  by their own ``send_timeout_millis``), and also retries ``ProducerBusy`` / ``ConsumerBusy``,
  which right after a connection loss usually mean the broker has not yet noticed the old
  connection is gone. Any other error (the topic was deleted, say) is final: the object fails.

Every attach uses a fresh producer/consumer id, so a frame the broker sends late for an earlier
registration (a receipt, a ``send_error``, a message) finds no handler and is dropped instead of
being matched against the new registration's state.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from magnetar.client.net.connect_deadline import as_connect_error, give_up_at
from magnetar.client.tasks import cancel_and_wait
from magnetar.protocol.errors import (
    ConsumerBusy,
    MagnetarError,
    ProducerBusy,
    RetryableError,
)

if TYPE_CHECKING:
    from magnetar.client.net.connection import Connection

log = logging.getLogger(__name__)

DEFAULT_INITIAL_BACKOFF = 0.1
DEFAULT_MAX_BACKOFF = 30.0


class Backoff:
    """Exponential backoff: ``initial`` doubling up to ``maximum``, each delay shortened by up to ``jitter``.

    The jitter (Pulsar's rule: subtract a random part of up to 10 %) keeps the many clients that
    lost the same broker at the same moment from coming back in lock step.
    """

    __slots__ = ("_next", "_random", "initial", "jitter", "maximum")

    def __init__(
        self,
        initial: float = DEFAULT_INITIAL_BACKOFF,
        maximum: float = DEFAULT_MAX_BACKOFF,
        *,
        jitter: float = 0.1,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or maximum < initial:
            raise ValueError("backoff needs 0 < initial <= maximum")
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self._random = rng
        self._next = initial

    def next(self) -> float:
        """The delay before the next attempt (and double the one after, up to the maximum)."""
        base = self._next
        self._next = min(base * 2, self.maximum)
        return base - base * self.jitter * self._random()

    def reset(self) -> None:
        """Back to the initial delay (after a success)."""
        self._next = self.initial


class Resolver(Protocol):
    """What producers and consumers need from the client to (re)attach (``aio.Client`` is one)."""

    @property
    def operation_timeout(self) -> float: ...

    @property
    def connect_timeout(self) -> float: ...

    def next_id(self) -> int: ...

    def new_backoff(self) -> Backoff: ...

    async def lookup(self, topic: str) -> Connection: ...

    async def sleep(self, seconds: float) -> None: ...


def retry_in_background(exc: MagnetarError) -> bool:
    """Whether the re-attach loop tries again after ``exc`` (see the module docstring)."""
    return isinstance(exc, RetryableError | ProducerBusy | ConsumerBusy)


class Attachment:
    """The attach / detach / re-attach state shared by ``PartitionProducer`` and ``PartitionConsumer``.

    Subclasses implement ``_attach(conn)`` (register on ``conn``; on success set ``self._conn`` and
    call ``self._attached.set()`` without awaiting anything after the broker's answer) and
    ``_give_up(exc)`` (fail for good). Frames can still come between the answer and the moment the
    attaching task resumes: the connection dispatches the rest of what it read first. A pushed
    ``close_producer`` / ``close_consumer`` among them (the topic moved again at once) finds no
    attached object to detach, only the registration it removes; so ``_attach`` checks that its
    registration is still there (``Connection.holds_producer``) and otherwise raises the retryable
    ``NotConnected``, and the attach is tried again. Without that check the object believed itself
    attached to a broker that had closed it, and its sends or flow permits went unanswered.
    """

    topic: str

    def __init__(self, resolver: Resolver) -> None:
        self._resolver = resolver
        self._loop = asyncio.get_running_loop()
        self._conn: Connection | None = None
        self._attached = asyncio.Event()
        self._reattach_task: asyncio.Task[None] | None = None
        self._closed: MagnetarError | None = None
        self.reconnects = 0  # completed re-attachments, for stats and tests

    @property
    def connected(self) -> bool:
        return self._conn is not None

    async def _attach(self, conn: Connection) -> None:
        raise NotImplementedError

    def _give_up(self, exc: MagnetarError) -> None:
        raise NotImplementedError

    async def attach_first(self) -> None:
        """Look the topic up and attach, retrying retryable errors with backoff until the operation timeout."""
        resolver = self._resolver
        started = self._loop.time()
        deadline = started + resolver.operation_timeout
        backoff = resolver.new_backoff()
        while True:
            try:
                conn = await resolver.lookup(self.topic)
                await self._attach(conn)
                return
            except RetryableError as exc:
                delay = backoff.next()
                if self._loop.time() + delay >= give_up_at(exc, started, deadline, resolver.connect_timeout):
                    error = as_connect_error(exc)  # connect_deadline.py: ConnectError, as Pulsar's
                    if error is exc:
                        raise
                    raise error from exc
                log.info("attaching to %s failed (%s); retrying in %.3fs", self.topic, exc, delay)
                await resolver.sleep(delay)

    def _detach(self, reason: MagnetarError) -> None:
        """The registration is gone: forget the connection and re-attach in the background."""
        self._conn = None
        self._attached.clear()
        if self._closed is None and self._reattach_task is None:
            log.info("%s detached from its broker (%s); reconnecting", self.topic, reason)
            self._reattach_task = self._loop.create_task(self._reattach(), name=f"magnetar-reattach {self.topic}")

    async def _reattach(self) -> None:
        resolver = self._resolver
        backoff = resolver.new_backoff()
        try:
            while self._closed is None:
                try:
                    conn = await resolver.lookup(self.topic)
                    await self._attach(conn)
                    if self._conn is not None:
                        self.reconnects += 1
                    return
                except MagnetarError as exc:
                    if self._closed is not None:
                        return
                    if not retry_in_background(exc):
                        log.error("giving up on %s: %s", self.topic, exc)
                        self._give_up(exc)
                        return
                    delay = backoff.next()
                    log.info("reconnecting %s failed (%s); retrying in %.3fs", self.topic, exc, delay)
                    await resolver.sleep(delay)
        finally:
            self._reattach_task = None

    async def _stop_reattaching(self) -> None:
        """Cancel a re-attach in progress (called once ``_closed`` is set)."""
        await cancel_and_wait(self._reattach_task)

    async def _wait_attached(self, limit_seconds: float) -> bool:
        """Wait (bounded) until attached; False if the time ran out or the object closed."""
        if self._conn is not None:
            return True
        if limit_seconds <= 0 or self._reattach_task is None:
            return False
        try:
            async with asyncio.timeout(limit_seconds):
                await self._attached.wait()
        except TimeoutError:
            return False
        return self._conn is not None
