"""``Node``: what every process assembly shares, a start that cleans up after itself.

A node starts its parts in order (store, services, listeners). When one fails part-way (a taken
port, a refused cookie, an unreachable etcd), the parts already started must be stopped before
the error goes up, or the process would exit holding a port, an LMDB environment or a metadata
session. Each node writes ``_start`` and a ``stop`` that skips what never started; ``start`` runs
the one on the failure of the other.
"""

from __future__ import annotations

import abc
import contextlib


class Node(abc.ABC):
    async def start(self) -> None:
        """Start every part in order; on failure stop what had started, then re-raise."""
        try:
            await self._start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()
            raise

    @abc.abstractmethod
    async def _start(self) -> None:
        """Start the parts in order, recording each as it comes up (``stop`` reads them)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop in reverse order whatever parts started."""
