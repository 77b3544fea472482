"""Stopping the client's background tasks (stats reporting, pattern discovery, partition updates,
re-attaching): one way, so that each ``stop`` waits until its task has really ended.

Awaiting the cancelled task, not only cancelling it, matters at ``close``: the task may be in the
middle of a broker request, and the connection it uses must not be closed under it.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` (None: nothing to do) and wait for it to end. Its cancellation is swallowed;
    an exception it ended with before the cancel took effect is raised, as awaiting it would."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
