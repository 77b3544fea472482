"""The servers' descriptor table is grown at start (node/descriptor_table.py), so that accepting
thousands of connections later does not stop the event loop for each doubling of the table.

The table's size is the kernel's ``FDSize`` in ``/proc/<pid>/status``. Checked in a child process
(its own table and limits): the table holds the wanted size, capped at the soft ``RLIMIT_NOFILE``,
and no descriptor is left open; and a running ``magnetar standalone`` has its table reserved.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

from tests.support.standalone import StandaloneProcess

from magnetar.node.descriptor_table import RESERVE

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys
    from magnetar.node import descriptor_table

    def fd_size():
        for line in open("/proc/self/status"):
            if line.startswith("FDSize:"):
                return int(line.split()[1])

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
    out = {"before": fd_size(), "open_before": len(os.listdir("/proc/self/fd"))}
    out["reserved"] = descriptor_table.reserve(int(sys.argv[2]))
    out["after"] = fd_size()
    out["open_after"] = len(os.listdir("/proc/self/fd"))
    print(json.dumps(out))
    """
)


def _child(soft_limit: int, wanted: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(soft_limit), str(wanted)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, int] = json.loads(done.stdout)
    return result


def _hard_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else hard


def test_the_table_is_grown_to_the_wanted_size_and_nothing_is_left_open() -> None:
    limit = min(_hard_limit(), 8192)
    out = _child(limit, 4096)
    assert out["before"] < 4096, out  # a new process starts with a small table
    assert out["reserved"] == 4096
    assert out["after"] >= 4096, out
    assert out["open_after"] == out["open_before"], out


def test_the_reservation_is_capped_at_the_soft_limit() -> None:
    limit = min(_hard_limit(), 2048)
    out = _child(limit, RESERVE)
    assert out["reserved"] == limit
    assert limit <= out["after"] < RESERVE, out
    assert out["open_after"] == out["open_before"], out


def test_a_running_standalone_has_its_table_reserved(standalone: StandaloneProcess) -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # the server inherits this run's limit
    wanted = RESERVE if soft == resource.RLIM_INFINITY else min(RESERVE, soft)
    with open(f"/proc/{standalone.proc.pid}/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("FDSize:"))
    assert size >= wanted
