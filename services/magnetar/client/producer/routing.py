"""Choosing a partition for each message of a partitioned topic, as Pulsar's client chooses it.

``message_routing_mode`` (``PartitionsRoutingMode``) picks the router:

- ``RoundRobinDistribution`` (the default, ``RoundRobinRouter``): an unkeyed message goes to the
  *current* partition, and the current partition moves on only when a batch to it has been
  sealed. Routing per batch rather than per message keeps batches full, which is the point of
  Pulsar's round robin when batching is on; with batching off every message is its own batch, so
  it moves on every message. The first partition is random, so that many short-lived producers
  spread out.
- ``UseSinglePartition`` (``SinglePartitionRouter``): every unkeyed message goes to one partition
  chosen at random when the producer is created.
- ``CustomPartition`` (``CustomRouter``): ``message_router(msg, num_partitions)`` decides every
  message, keyed or not, as pulsar-client calls it: ``msg`` is a ``Message`` (``data()``,
  ``properties()``, ``partition_key()``, ``ordering_key()``, ``event_timestamp()``...). A result
  outside ``0 .. num_partitions - 1`` fails the send, as Pulsar fails it.

Under the first two a message with a partition key goes to ``hash(key) % num_partitions``, the hash
being the ``hashing_scheme``'s (``key_hasher``): ``JavaStringHash`` or ``Murmur3_32Hash``, bit for
bit Pulsar's Java client's (``protocol.hashing``), so a key lands on the partition a Java
producer puts it on. When partitions are added (``Producer._add_partitions``) the routers are
``resize``d: keyed messages then hash over the new count, as in Pulsar, and the round robin takes
in the new partitions.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from magnetar.client.message import EntryInfo, Message
from magnetar.client.options import HashingScheme, PartitionsRoutingMode
from magnetar.protocol.errors import MagnetarError, Unsupported
from magnetar.protocol.hashing import INT_MAX, java_string_hash, murmur3_32

# pulsar-client's ``message_router``: (message, number of partitions) -> partition index.
MessageRouter = Callable[[Any, int], int]
KeyHasher = Callable[[str], int]

DEFAULT_HASHING_SCHEME = HashingScheme.JavaStringHash


@lru_cache(maxsize=65536)
def java_string_key_hash(key: str) -> int:
    """Pulsar's ``JavaStringHash.makeHash``: ``key.hashCode() & Integer.MAX_VALUE``."""
    return java_string_hash(key) & INT_MAX


@lru_cache(maxsize=65536)
def murmur3_key_hash(key: str) -> int:
    """Pulsar's ``Murmur3Hash32.makeHash``: Murmur3 of the UTF-8 bytes (seed 0) ``& Integer.MAX_VALUE``.

    Java's ``getBytes(UTF_8)`` writes ``?`` for a lone surrogate; ``errors="replace"`` does the same.
    """
    return murmur3_32(key.encode("utf-8", "replace")) & INT_MAX


def key_hasher(scheme: HashingScheme) -> KeyHasher:
    """The hash function of ``scheme``; ``BoostHash`` is refused (see ``options.HashingScheme``)."""
    scheme = HashingScheme(scheme)
    if scheme is HashingScheme.JavaStringHash:
        return java_string_key_hash
    if scheme is HashingScheme.Murmur3_32Hash:
        return murmur3_key_hash
    raise Unsupported(
        "hashing_scheme=HashingScheme.BoostHash is not supported by the Magnetar client: boost::hash is not "
        "the same across Boost versions and platforms; use JavaStringHash or Murmur3_32Hash"
    )


def partition_for_key(key: str, partitions: int, scheme: HashingScheme = DEFAULT_HASHING_SCHEME) -> int:
    """The partition a keyed message goes to: Pulsar's ``signSafeMod(hash(key), partitions)``."""
    return key_hasher(scheme)(key) % partitions


def _check_partitions(partitions: int) -> None:
    if partitions <= 0:
        raise ValueError("a router needs at least one partition")


class RoundRobinRouter:
    """Round robin over partitions per batch; keyed messages go by hash."""

    __slots__ = ("_current", "_hash", "_n")

    def __init__(
        self, partitions: int, *, start: int | None = None, hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME
    ) -> None:
        _check_partitions(partitions)
        self._n = partitions
        self._hash = key_hasher(hashing_scheme)
        # A random start spreads many short-lived producers over partitions, as Pulsar does.
        self._current = random.randrange(partitions) if start is None else start % partitions

    @property
    def current(self) -> int:
        return self._current

    def choose(self, partition_key: str | None) -> int:
        if partition_key is not None:
            return self._hash(partition_key) % self._n
        return self._current

    def batch_sent(self, partition: int) -> None:
        """A batch to ``partition`` has been sealed: unkeyed traffic moves on to the next one."""
        if partition == self._current:
            self._current = (partition + 1) % self._n

    def resize(self, partitions: int) -> None:
        """Partitions were added: the round robin now runs over all of them (from where it is)."""
        _check_partitions(partitions)
        self._n = partitions


class SinglePartitionRouter:
    """Every unkeyed message to one partition, chosen at random once; keyed messages go by hash."""

    __slots__ = ("_hash", "_n", "partition")

    def __init__(
        self, partitions: int, *, chosen: int | None = None, hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME
    ) -> None:
        _check_partitions(partitions)
        self._n = partitions
        self._hash = key_hasher(hashing_scheme)
        self.partition = random.randrange(partitions) if chosen is None else chosen % partitions

    def choose(self, partition_key: str | None) -> int:
        if partition_key is not None:
            return self._hash(partition_key) % self._n
        return self.partition

    def batch_sent(self, partition: int) -> None:
        """Nothing moves: the single partition stays the same for the producer's life (as Pulsar's)."""

    def resize(self, partitions: int) -> None:
        _check_partitions(partitions)
        self._n = partitions


# What a message being routed has of a received message's context: no position, no owner yet.
_UNSENT = EntryInfo((-1, -1), 1, 0, 0, None, False)


class OutgoingMessage(Message):
    """A message on its way out, as ``message_router`` sees it (pulsar-client passes a ``pulsar.Message``).

    Built from the producer's record (``[content, properties, partition key, event time, seq,
    ordering key?]``): ``partition_key()`` is ``""`` when there is none, and the id, publish
    time and topic are not known yet (``-1`` ids, 0, ``""``), as on Pulsar's message before sending.
    """

    __slots__ = ()

    def ordering_key(self) -> str:
        record = self._record
        key = record[5] if len(record) > 5 else None
        return key if key is not None else ""


class CustomRouter:
    """``message_router(msg, num_partitions)`` for every message (``CustomPartition``)."""

    __slots__ = ("_fn", "_n")

    def __init__(self, message_router: MessageRouter, partitions: int) -> None:
        if not callable(message_router):
            raise ValueError("message_router must be callable(message, num_partitions) -> partition index")
        _check_partitions(partitions)
        self._fn = message_router
        self._n = partitions

    def route(
        self,
        content: bytes | None,
        properties: dict[str, str] | None,
        partition_key: str | None,
        event_timestamp: int | None,
        ordering_key: str | None,
    ) -> int:
        """The partition the user's router picks; a bad answer or an exception in it fails the send.

        Failures are ``MagnetarError`` (Pulsar reports ``ResultUnknownError``), so that the blocking
        producer's hand-over hands them to the message's callback like any other send failure.
        """
        record = [content, properties or {}, partition_key, event_timestamp or 0, -1, ordering_key]
        n = self._n
        try:
            chosen = self._fn(OutgoingMessage(record, _UNSENT, -1), n)
            index = int(chosen)
        except Exception as exc:
            raise MagnetarError(f"message_router failed: {type(exc).__name__}: {exc}") from exc
        if not 0 <= index < n:
            raise MagnetarError(f"message_router chose partition {chosen!r}, but the topic has {n} partitions")
        return index

    def batch_sent(self, partition: int) -> None:
        """Nothing to track: the user's function decides."""

    def resize(self, partitions: int) -> None:
        _check_partitions(partitions)
        self._n = partitions


Router = RoundRobinRouter | SinglePartitionRouter | CustomRouter


def make_router(
    mode: PartitionsRoutingMode,
    partitions: int,
    hashing_scheme: HashingScheme = DEFAULT_HASHING_SCHEME,
    message_router: MessageRouter | None = None,
) -> Router:
    """The router of a partitioned producer (``ProducerConfig`` has checked the combination)."""
    mode = PartitionsRoutingMode(mode)
    if mode is PartitionsRoutingMode.CustomPartition:
        if message_router is None:
            raise ValueError("PartitionsRoutingMode.CustomPartition needs a message_router")
        return CustomRouter(message_router, partitions)
    if mode is PartitionsRoutingMode.UseSinglePartition:
        return SinglePartitionRouter(partitions, hashing_scheme=hashing_scheme)
    return RoundRobinRouter(partitions, hashing_scheme=hashing_scheme)
