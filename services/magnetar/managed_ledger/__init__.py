"""A topic's log made of many ledgers, with durable cursors (Pulsar's managed ledger)."""

from magnetar.managed_ledger.config import ManagedLedgerConfig
from magnetar.managed_ledger.cursor import ManagedCursor
from magnetar.managed_ledger.ledger import ManagedLedger
from magnetar.managed_ledger.position import Position

__all__ = ["ManagedCursor", "ManagedLedger", "ManagedLedgerConfig", "Position"]
