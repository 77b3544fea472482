"""The key-value storage seam: what the bookie's ledger storage needs of the store beneath it.

BookKeeper puts its ledger storage over a ``KeyValueStorage`` interface, so that the entry format,
the journal, group commit and fencing do not care which embedded store keeps the bytes. This is
the same seam, written as ``typing.Protocol`` classes: LMDB (``lmdb_engine.py``) satisfies them
structurally, with its own transaction and cursor objects, so that the writer thread and the reads
call the engine's methods directly, with no adapter layer in between (no extra call per entry).

What an engine must give:

- named tables (``table(name)``: an opaque handle passed back as ``db=``, opened before the
  transactions that use it), keys ordered bytewise, so that one ledger's big-endian keys are
  contiguous and a cursor can seek to a ledger;
- transactions used as context managers: a write transaction is atomic and, when the store was
  opened with ``sync=True``, durable once its ``with`` block exits without an exception (it is
  abandoned otherwise); a read transaction sees one consistent snapshot;
- cursors with ``set_range`` (first key at or after), ``prev``, ``last``, ``key``, ``delete`` and
  ``iternext`` over keys or items;
- ``corruption``: the exception types by which the engine says the store itself is damaged (not a
  transient condition): the storage stops serving when it sees one;
- ``size_bytes()``: what the store occupies on disk (read-only mode counts it).

``KeyValueOpener`` is what opens one (the engine class itself): the storage takes it as a
parameter, so a test can put a fault-injecting wrapper behind the seam
(``tests/bookie/test_replay_damage.py``), and it names ``corruption`` before anything is open, so
that damage found while opening counts as damage too.

``tests/bookie/test_kv_contract.py`` holds every engine to this.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, Self, TypeVar, overload

TableT = TypeVar("TableT")
TableT_contra = TypeVar("TableT_contra", contravariant=True)


class KvCursor(Protocol):
    """A position in one table of one transaction."""

    def set_range(self, key: bytes, /) -> bool:
        """Move to the first key at or after ``key``; False if there is none."""
        ...

    def prev(self) -> bool: ...

    def last(self) -> bool: ...

    def key(self) -> bytes: ...

    def delete(self) -> bool:
        """Delete the current item and move to the next one; False if there is nothing to delete."""
        ...

    @overload
    def iternext(self, keys: Literal[True] = True, values: Literal[True] = True) -> Iterator[tuple[bytes, bytes]]: ...

    @overload
    def iternext(self, keys: Literal[True] = True, *, values: Literal[False]) -> Iterator[bytes]: ...


class KvTransaction(Protocol[TableT_contra]):
    """A read or write transaction over every table of one store."""

    def __enter__(self) -> Self: ...

    def __exit__(self, *args: object) -> None: ...

    def get(self, key: bytes, default: None = None, db: TableT_contra | None = None) -> bytes | None: ...

    def put(
        self,
        key: bytes,
        value: bytes,
        dupdata: bool = True,
        overwrite: bool = True,
        append: bool = False,
        db: TableT_contra | None = None,
    ) -> bool: ...

    def delete(self, key: bytes, value: bytes = b"", db: TableT_contra | None = None) -> bool: ...

    def cursor(self, db: TableT_contra | None = None) -> KvCursor: ...

    def stat(self, db: TableT_contra | None = None) -> Mapping[str, object]:
        """At least ``entries``: how many keys the table holds."""
        ...


class KeyValueStorage(Protocol[TableT]):
    """An open store: tables, transactions, and what the storage needs to judge failures and space."""

    corruption: tuple[type[BaseException], ...]

    def table(self, name: bytes) -> TableT: ...

    def begin(self, *, write: bool = False) -> KvTransaction[TableT]: ...

    def size_bytes(self) -> int: ...

    def close(self) -> None: ...


class KeyValueOpener(Protocol):
    """Opens a store in a data directory: an engine class, or a wrapper of one."""

    corruption: tuple[type[BaseException], ...]

    def __call__(self, data_dir: Path, *, map_size: int, sync: bool) -> KeyValueStorage[Any]: ...
