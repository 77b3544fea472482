"""Choosing a partition for each message of a partitioned topic (Pulsar's ``RoundRobinPartition``).

A message with a partition key always goes to ``crc32c(key) mod n``: a stable hash, so that every
producer process (and every client language that follows the rule) maps a key to the same
partition, which is what per-key ordering needs. A message without a key goes to the *current*
partition, and the current partition moves on only when a batch to it has been sent: routing per
batch instead of per message keeps batches full, which is the point of Pulsar's round-robin mode
when batching is on. With batching off every message is its own batch, so it moves every message.
"""

from __future__ import annotations

import random

from magnetar.protocol.checksum import crc32c


def partition_for_key(key: str, partitions: int) -> int:
    """The partition a keyed message goes to; stable across processes and runs."""
    return crc32c(key.encode()) % partitions


class RoundRobinRouter:
    """Round robin over partitions per batch; keyed messages go by hash."""

    __slots__ = ("_current", "_n")

    def __init__(self, partitions: int, *, start: int | None = None) -> None:
        if partitions <= 0:
            raise ValueError("a router needs at least one partition")
        self._n = partitions
        # A random start spreads many short-lived producers over partitions, as Pulsar does.
        self._current = random.randrange(partitions) if start is None else start % partitions

    @property
    def current(self) -> int:
        return self._current

    def choose(self, partition_key: str | None) -> int:
        if partition_key is not None:
            return partition_for_key(partition_key, self._n)
        return self._current

    def batch_sent(self, partition: int) -> None:
        """A batch to ``partition`` has been sealed: unkeyed traffic moves on to the next one."""
        if partition == self._current:
            self._current = (partition + 1) % self._n
