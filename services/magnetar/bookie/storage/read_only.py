"""Read-only mode: a bookie whose disk is (nearly) full refuses adds and keeps serving reads.

Why: a bookie that runs its filesystem full fails every write mid-way; one that stops taking adds
a little before makes its writers change ensembles (``BookieReadOnly`` is retryable) and keeps
every entry it holds readable. Two things turn it on: the fraction of the filesystem in use
reaching ``threshold`` (checked when the storage opens, at most once per ``interval`` on adds,
and by the service's periodic check), and a write that actually ran out of space (a commit that
failed with ENOSPC, or a journal segment that could not be allocated), which may come before the
threshold does. Either way it ends by itself: below the threshold, or once the filesystem's use
has dropped by at least what the failed write needed below what it was at the failure.

Threads: everything runs on the event loop except ``full_in_writer``, which the writer thread
calls; it only sets fields that the loop then acts on (``take_dirty``).
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from magnetar.bookie.metrics import BoundBookieMetrics
from magnetar.bookie.storage.writes import WriteOp


@dataclass(frozen=True, slots=True)
class DiskUsage:
    fs_total: int
    fs_used: int
    data_bytes: int  # bytes the environment occupies on disk

    @property
    def fraction(self) -> float:
        return self.fs_used / self.fs_total if self.fs_total else 0.0


def is_enospc(exc: BaseException) -> bool:
    """Whether a failed commit says it ran out of disk space (lmdb puts strerror in its message)."""
    text = str(exc)
    return getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in text or "ENOSPC" in text


class ReadOnlyMode:
    """Whether adds are refused for lack of space, and when to look again."""

    def __init__(
        self,
        directory: Path,
        usage: Callable[[], DiskUsage],
        threshold: float | None,
        interval: float,
        metrics: BoundBookieMetrics | None,
        on_change: Callable[[bool], None],
    ) -> None:
        """``usage``: the storage's disk usage (the store and the journal on its filesystem);
        ``on_change``: called with the new flag whenever it changes."""
        self._dir = directory
        self._usage = usage
        self.threshold = threshold
        self._interval = interval
        self._metrics = metrics
        self._on_change = on_change
        self._last_check = float("-inf")
        self.read_only = False
        self._full_used: int | None = None  # fs bytes in use when a write hit ENOSPC
        self._full_margin = 0
        #: Set by the writer thread after a write ran out of space: the loop re-checks (``take_dirty``).
        self.dirty = False

    def check(self, *, force: bool = False) -> bool:
        """Re-evaluate read-only mode (at most once per ``interval`` unless forced) and return it."""
        now = time.monotonic()
        if self._full_used is None and (
            self.threshold is None or (not force and now - self._last_check < self._interval)
        ):
            return self.read_only
        if not force and now - self._last_check < self._interval:
            return self.read_only
        self._last_check = now
        usage = self._usage()
        if self._full_used is not None and usage.fs_used <= self._full_used - self._full_margin:
            self._full_used = None  # space was freed since a write hit ENOSPC
        over = self.threshold is not None and usage.fraction >= self.threshold
        self.set(over or self._full_used is not None)
        return self.read_only

    def set(self, value: bool) -> None:
        changed = value != self.read_only
        self.read_only = value
        if self._metrics is not None:
            self._metrics.read_only.set(1 if value else 0)
        if changed:
            self._on_change(value)

    def set_threshold(self, value: float | None) -> None:
        self.threshold = value
        if value is None and self._full_used is None:
            self.set(False)
        self.check(force=True)

    def full_now(self, margin: int) -> None:
        """On the loop: a write found no room (a journal segment); read-only at once, until the
        filesystem's use drops ``margin`` bytes below what it is now."""
        self._full_used = self._usage().fs_used
        self._full_margin = margin
        self._last_check = float("-inf")
        self.dirty = False
        self.check(force=True)

    def full_in_writer(self, batch: list[WriteOp]) -> None:
        """In the writer thread: a commit of ``batch`` found no room; the loop turns it into
        read-only mode (``take_dirty``), until the batch's size (1 MiB at least) is freed."""
        self._full_used = self._usage().fs_used
        self._full_margin = max(sum(len(op.value) for op in batch), 1 << 20)
        self.dirty = True

    def take_dirty(self) -> None:
        """On the loop: what the writer thread found takes effect."""
        self.dirty = False
        self._last_check = float("-inf")
        self.check(force=True)

    def no_room_for(self, batch: list[WriteOp]) -> bool:
        """Whether the filesystem lacks the room a failed batch needed. LMDB reports a write that
        the full disk cut short as EIO ("Input/output error"), not ENOSPC: the free space tells."""
        try:
            free = shutil.disk_usage(self._dir).free
        except OSError:
            return False
        return free < 2 * sum(len(op.value) for op in batch) + (1 << 20)
