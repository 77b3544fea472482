"""The process's file-descriptor table, grown once at start instead of under load.

Linux keeps a process's open files in a table that it doubles when a new descriptor does not fit
(64, 128, ... entries), and never shrinks. In a process with more than one thread, each doubling
waits for an RCU grace period (``synchronize_rcu`` in ``expand_fdtable``) in the thread that asked
for the descriptor. In a server that thread is the event loop, inside ``accept``: while 10,000
connections opened, each doubling from 512 to 16,384 entries stopped the broker's loop for 6 to
16 ms, and every tenant's requests waited behind it (the quiet tenant's p99 in the exhaustion scenarios).

``reserve()`` makes the table large enough for ``RESERVE`` descriptors (or the soft
``RLIMIT_NOFILE``, when lower) by duplicating a descriptor to the last slot and closing it, before
the server starts its threads. The cost is the table itself: 8 bytes per entry in kernel memory,
512 KiB at 65,536 entries; a process that opens more than that grows as before.
"""

from __future__ import annotations

import logging
import os
import resource

log = logging.getLogger(__name__)

RESERVE = 65_536


def reserve(wanted: int = RESERVE) -> int:
    """Grow the descriptor table to hold ``wanted`` descriptors, capped at the soft limit; return
    the size asked for (0 when the kernel refused, which only costs the growth later)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    size = wanted if soft == resource.RLIM_INFINITY else min(wanted, soft)
    if size < 1:
        return 0
    probe = os.open(os.devnull, os.O_RDONLY)
    if probe >= size - 1:  # the table already holds that many
        os.close(probe)
        return size
    try:
        os.dup2(probe, size - 1, inheritable=False)
        os.close(size - 1)
    except OSError as exc:  # EMFILE under a lowered hard limit, ENOMEM
        log.warning("could not reserve a table of %d file descriptors: %s", size, exc)
        return 0
    finally:
        os.close(probe)
    return size
