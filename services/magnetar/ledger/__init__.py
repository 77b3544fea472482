"""BookKeeper-style replicated ledgers: see PROTOCOL.md in this folder for the rules."""

from magnetar.ledger.bookie_api import NO_ENTRY, BookieClient, BookieResolver, ReadResult
from magnetar.ledger.manager import LedgerManager
from magnetar.ledger.metadata_format import Fragment, InvalidLedgerMetadata, LedgerMetadata, LedgerState
from magnetar.ledger.read_handle import ReadHandle
from magnetar.ledger.write_handle import WriteHandle

__all__ = [
    "NO_ENTRY",
    "BookieClient",
    "BookieResolver",
    "Fragment",
    "InvalidLedgerMetadata",
    "LedgerManager",
    "LedgerMetadata",
    "LedgerState",
    "ReadHandle",
    "ReadResult",
    "WriteHandle",
]
