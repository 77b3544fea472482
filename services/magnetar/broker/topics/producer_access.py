"""Producer access modes and the topic epoch (WIRE.md R102-R104), enforced by the broker as Pulsar does.

A producer asks for ``Shared`` (any number of them; refused with ``ProducerBusy`` while the topic is
held), ``Exclusive`` (refused with ``ProducerFenced``, as current Pulsar brokers answer, while any
other producer is on the topic), ``WaitForExclusive`` (its creation waits until the
producers on the topic are gone) or ``ExclusiveWithFencing`` (the producers on the topic are closed
and fenced, and it takes over). Each grant of exclusive access moves the topic *epoch* on by one and
answers it to the producer, which presents it again when it reconnects: a producer whose epoch is
older than the topic's was replaced by another exclusive producer meanwhile and is refused with
``ProducerFenced``, for good. That is what makes "single writer" hold through a broker restart or a
topic moving to another broker, so the epoch of a persistent topic is a property of its managed
ledger (kept in the metadata store, read by whichever broker loads the topic next); a non-persistent
topic keeps it in memory.

This lives apart from ``topic`` because both kinds of topic hold one, and the connection only needs
``admit`` before it adds a producer and ``removed`` after.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

from magnetar.broker.topics.producer import ServerProducer
from magnetar.managed_ledger import ManagedLedger
from magnetar.metadata.store import MUST_NOT_EXIST
from magnetar.protocol.errors import InvalidCommand, NotConnected, ProducerBusy, ProducerFenced, ServiceNotReady

log = logging.getLogger(__name__)

SHARED = "Shared"
EXCLUSIVE = "Exclusive"
WAIT_FOR_EXCLUSIVE = "WaitForExclusive"
EXCLUSIVE_WITH_FENCING = "ExclusiveWithFencing"
ACCESS_MODES = (SHARED, EXCLUSIVE, WAIT_FOR_EXCLUSIVE, EXCLUSIVE_WITH_FENCING)

# The managed-ledger property holding the topic epoch (a JSON integer).
EPOCH_PROPERTY = "producer-epoch"

Fence = Callable[[ServerProducer, BaseException], None]


def access_mode_of(value: object) -> str:
    """The access mode a ``producer`` command asks for (absent: ``Shared``); anything else is invalid."""
    if value is None:
        return SHARED
    if value not in ACCESS_MODES:
        raise InvalidCommand(f"unknown producer access_mode {value!r}; expected one of {', '.join(ACCESS_MODES)}")
    return str(value)


def epoch_of(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise InvalidCommand(f"producer epoch must be a non-negative integer, not {value!r}")
    return value


def producer_metadata(value: object) -> dict[str, str]:
    """The properties a ``producer`` command carries (R104): a map of strings, shown in topic stats."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidCommand("producer metadata must be a map of strings to strings")
    return dict(value)


@dataclass(eq=False, slots=True)
class _Waiter:
    producer: ServerProducer
    future: asyncio.Future[int]
    alive: Callable[[], bool]


class ProducerAccess:
    """One topic's exclusive holder, its queue of ``WaitForExclusive`` producers and its epoch.

    ``producers`` returns the producers registered on the topic now; ``fence(producer, exc)``
    closes one on its connection (the client then reconnects with its old epoch and is refused).
    """

    def __init__(
        self, topic: str, producers: Callable[[], Collection[ServerProducer]], ml: ManagedLedger | None = None
    ) -> None:
        self.topic = topic
        self._producers = producers
        self._ml = ml
        self.epoch: int | None = None
        self._version = MUST_NOT_EXIST
        self._loaded: asyncio.Future[None] | None = None
        self.exclusive: ServerProducer | None = None
        self._waiting: deque[_Waiter] = deque()
        self._store_lock = asyncio.Lock()
        self._closed = False

    # ------------------------------------------------------------------ admission
    async def admit(
        self,
        producer: ServerProducer,
        mode: str,
        epoch: int | None,
        fence: Fence,
        alive: Callable[[], bool],
    ) -> int | None:
        """Decide whether ``producer`` may join the topic in ``mode``; returns the epoch to answer.

        ``epoch`` is the one a reconnecting producer presents (None on its first creation). On
        success an exclusive producer is the topic's holder until ``removed``; the caller adds it to
        the topic at once, or calls ``removed`` if that fails.
        """
        producer.access_mode = mode
        self._prune()
        if mode == SHARED:
            if self.exclusive is not None or self._waiting:
                raise ProducerBusy(f"Topic has an existing exclusive producer: {self._holder_name()}")
            return self.epoch
        await self._load()
        if self._closed:
            raise ServiceNotReady(f"topic {self.topic} is closing")
        # A reconnecting producer that was replaced meanwhile is fenced whatever holds the topic
        # now (Pulsar checks this after the holder; a fenced producer would then retry forever).
        self._check_epoch(epoch)
        others = [p for p in self._producers() if p is not producer]
        if mode == EXCLUSIVE:
            held = self.exclusive is not None or bool(self._waiting)
            if held or others:
                why = (
                    f"Topic has an existing exclusive producer: {self._holder_name()}"
                    if held
                    else "Topic has existing shared producers"
                )
                if epoch is not None and self._only_itself(producer, others):
                    # Its own registration from the connection it lost, not yet noticed gone: the
                    # client retries ProducerBusy, and gets the topic back once it is.
                    raise ProducerBusy(why)
                raise ProducerFenced(why)
        elif mode == EXCLUSIVE_WITH_FENCING:
            if self.exclusive is not None or others:
                waiting, self._waiting = list(self._waiting), deque()
                for w in waiting:
                    if not w.future.done():
                        w.future.set_exception(ProducerFenced("Fenced out"))
                holder, self.exclusive = self.exclusive, None
                for p in others:
                    log.info("%s: producer %s fenced by exclusive producer %s", self.topic, p.name, producer.name)
                    why = f"producer {p.name} was fenced by {producer.name} on {self.topic}"
                    # A Shared producer is only closed (it reconnects, and meets ProducerBusy while the
                    # topic is held, as in Pulsar); an exclusive one is fenced for good by its epoch.
                    fence(p, NotConnected(why) if p.access_mode == SHARED else ProducerFenced(why))
                if holder is not None and holder not in others:
                    fence(holder, ProducerFenced(f"producer {holder.name} was fenced on {self.topic}"))
        elif self.exclusive is not None or others or self._waiting:  # WaitForExclusive
            waiter = _Waiter(producer, asyncio.get_running_loop().create_future(), alive)
            self._waiting.append(waiter)
            log.info("%s: producer %s waits for exclusive access", self.topic, producer.name)
            return await waiter.future
        return await self._grant(producer, epoch)

    def _only_itself(self, producer: ServerProducer, others: Collection[ServerProducer]) -> bool:
        """Whether everything registered on the topic is ``producer``'s own earlier registration
        (producer names are unique on a topic, so a holder of its name is itself)."""
        registered = [*others, *([self.exclusive] if self.exclusive is not None else [])]
        return bool(registered) and all(p.name == producer.name for p in registered)

    def _check_epoch(self, epoch: int | None) -> None:
        if epoch is not None and self.epoch is not None and epoch < self.epoch:
            raise ProducerFenced(f"Topic epoch has already moved. Current epoch: {self.epoch}, Producer epoch: {epoch}")

    async def _grant(self, producer: ServerProducer, epoch: int | None) -> int:
        """Make ``producer`` the holder and store the epoch it gets (its own on a reconnect, else the next)."""
        self.exclusive = producer
        previous = self.epoch
        new = epoch if epoch is not None else (previous + 1 if previous is not None else 0)
        self.epoch = new  # taken now: a grant racing this one (a fencer) moves past it
        try:
            async with self._store_lock:  # stored in grant order, each with the version the last one left
                await self._store(new, changed=new != previous)
        except BaseException:
            if self.exclusive is producer:
                self.exclusive = None
            if self.epoch == new:
                self.epoch = previous
            raise
        producer.epoch = new
        return new

    def removed(self, producer: ServerProducer) -> None:
        """``producer`` left the topic (closed, disconnected, fenced, or never added): promote a waiter."""
        if self.exclusive is producer:
            self.exclusive = None
        for w in list(self._waiting):
            if w.producer is producer:
                self._waiting.remove(w)
        self._promote()

    def _prune(self) -> None:
        """Forget waiters whose connection closed (their ``producer`` request ends unanswered)."""
        if all(w.alive() for w in self._waiting):
            return
        for w in [w for w in self._waiting if not w.alive()]:
            self._waiting.remove(w)
            if not w.future.done():
                w.future.set_exception(NotConnected("connection closed while waiting for exclusive access"))

    def _promote(self) -> None:
        self._prune()
        if self.exclusive is not None or self._closed:
            return
        if any(True for _ in self._producers()):
            return
        while self._waiting:
            waiter = self._waiting.popleft()
            if waiter.future.done() or not waiter.alive():
                continue
            self.exclusive = waiter.producer
            task = asyncio.get_running_loop().create_task(self._grant(waiter.producer, None))
            task.add_done_callback(functools.partial(self._granted, waiter=waiter))
            return

    def _granted(self, task: asyncio.Task[int], waiter: _Waiter) -> None:
        if not waiter.future.done() and waiter.producer.fenced is not None:
            waiter.future.set_exception(ProducerFenced("Fenced out"))  # by a fencer while its grant was stored
        if waiter.future.done():  # fenced out meanwhile
            if self.exclusive is waiter.producer:
                self.exclusive = None
                self._promote()
            return
        if task.cancelled():
            waiter.future.set_exception(ServiceNotReady(f"topic {self.topic} is closing"))
        elif (exc := task.exception()) is not None:
            waiter.future.set_exception(exc)
            self._promote()
        else:
            waiter.future.set_result(task.result())

    def _holder_name(self) -> str:
        if self.exclusive is not None:
            return self.exclusive.name
        return self._waiting[0].producer.name if self._waiting else ""

    # ------------------------------------------------------------------ the stored epoch
    async def _load(self) -> None:
        if self._ml is None:
            return
        if self._loaded is None:
            self._loaded = asyncio.get_running_loop().create_task(self._read())
        try:
            await asyncio.shield(self._loaded)
        except Exception as exc:
            self._loaded = None  # try again on the next producer
            raise ServiceNotReady(f"cannot read the producer epoch of {self.topic}: {exc}") from exc

    async def _read(self) -> None:
        assert self._ml is not None
        found = await self._ml.store.get(self._ml.property_path(EPOCH_PROPERTY))
        if found is not None:
            self.epoch = int(json.loads(found.value))
            self._version = found.version

    async def _store(self, epoch: int, *, changed: bool) -> None:
        if self._ml is None or (not changed and self._version != MUST_NOT_EXIST):
            return
        try:
            stat = await self._ml.store.put(
                self._ml.property_path(EPOCH_PROPERTY), json.dumps(epoch).encode(), self._version
            )
        except Exception as exc:  # another owner wrote it (the topic moved), or the store is away
            self._loaded = None
            raise ServiceNotReady(f"cannot store the producer epoch of {self.topic}: {exc}") from exc
        self._version = stat.version

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """The topic is unloading: waiting producers are told to try again (on its next owner)."""
        self._closed = True
        waiting, self._waiting = list(self._waiting), deque()
        for w in waiting:
            if not w.future.done():
                w.future.set_exception(ServiceNotReady(f"topic {self.topic} was unloaded; look it up again"))
