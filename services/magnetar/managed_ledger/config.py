"""Tunables of a managed ledger, named after Pulsar's broker.conf settings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    ensemble_size: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1
    # Roll over to a new ledger after this many entries, bytes or seconds (managedLedgerMaxEntriesPerLedger,
    # managedLedgerMaxSizePerLedgerMbytes, managedLedgerMaxLedgerRolloverTimeMinutes).
    max_entries_per_ledger: int = 50_000
    max_bytes_per_ledger: int = 2 * 1024 * 1024 * 1024
    max_ledger_seconds: float = 4 * 3600.0
    # A ledger full by entries or bytes is kept until it is this old (managedLedgerMinLedgerRolloverTimeMinutes,
    # 10 minutes as in Pulsar): a roll-over holds every add for a few metadata writes, so a busy topic
    # should not pay that every 50,000 entries. A failed ledger is replaced at once whatever its age.
    min_ledger_seconds: float = 600.0
    # Recently written entries kept in memory so tailing consumers never hit the bookies
    # (managedLedgerCacheSizeMB). Bounded so that a large backlog costs disk, not memory.
    cache_bytes: int = 64 * 1024 * 1024
    # How long cursor acknowledgements may be held before they are written (coalescing).
    cursor_flush_delay: float = 0.005
    # Retention of acknowledged data, as Pulsar's retention policy (``ManagedLedger.trimmable``):
    # a ledger every durable cursor has passed is deleted once it is older than the time limit OR
    # the topic would still hold at least the size limit without it; -1 switches a limit off,
    # 0/0 (the default) keeps nothing consumed.
    retention_minutes: int = 0
    retention_mb: int = 0
