"""Awaiting a blocking call from the client's loop on a thread that ends with the call.

``close()`` of a ``ServiceInfoProvider`` may block (``AutoClusterFailover`` joins its probing
thread), so the client's ``close`` must not run it on the loop. The loop's default executor
(``run_in_executor(None, ...)``) would keep a worker thread alive after ``close`` returns, in the
application's own loop for the asyncio client: pulsar-client leaves no thread of its own behind a
closed client, and programs (and their tests) that count threads after ``close()`` notice. So the
call gets a thread of its own, which has ended, and been joined, when the await returns.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

__all__ = ["call_in_thread"]


async def call_in_thread(fn: Callable[[], None], name: str) -> None:
    """Run ``fn()`` on a new thread and wait for it without blocking the loop; its exception is raised here."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    def main() -> None:
        error: BaseException | None = None
        try:
            fn()
        except BaseException as exc:  # handed to the awaiting coroutine, not lost in the thread
            error = exc
        if not loop.is_closed():
            loop.call_soon_threadsafe(settle, error)

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    try:
        await done
    except asyncio.CancelledError:
        raise  # the call goes on; joining would block the loop until it ends
    except BaseException:
        thread.join()
        raise
    thread.join()  # it has handed over its outcome: only its last instructions are left
