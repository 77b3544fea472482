"""Small fixed-size filesystems for the disk-full scenario: a loop-mounted ext4 image (or tmpfs).

ext4 on a loop device is the default because it is what a bookie's disk really is: blocks are
allocated at write time (a commit that needs pages past the end of ``data.mdb`` gets ENOSPC from
``pwrite``), ``statvfs`` counts filesystem metadata, and ``fallocate`` reserves real blocks. tmpfs
(``SMALLFS=tmpfs``) needs no loop device and behaves the same for ENOSPC, but its "disk" is memory
and fsync is a no-op. Both need root (``mount``); without it the scenario is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

KIND_ENV = "SMALLFS"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def skip_or_fail(reason: str) -> None:
    """Skip, except under ``CI=true``: CI runs as root on a machine that can mount, and a skipped
    disk-full scenario would prove nothing."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def can_mount() -> str | None:
    """Why small filesystems cannot be mounted here, or None."""
    if os.geteuid() != 0:
        return "needs root to mount a small filesystem"
    if shutil.which("mount") is None:
        return "no mount(8)"
    if os.environ.get(KIND_ENV, "ext4") == "ext4" and shutil.which("mkfs.ext4") is None:
        return "no mkfs.ext4 (e2fsprogs); try SMALLFS=tmpfs"
    return None


@contextlib.contextmanager
def small_fs(directory: Path, size_mb: int, *, kind: str | None = None) -> Iterator[Path]:
    """Mount a ``size_mb`` filesystem on ``directory`` (created) for the block; always unmounted."""
    kind = kind or os.environ.get(KIND_ENV, "ext4")
    directory.mkdir(parents=True, exist_ok=True)
    image = directory.with_name(directory.name + ".img")
    try:
        if kind == "tmpfs":
            _run("mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(directory))
        else:
            with open(image, "wb") as f:
                f.truncate(size_mb << 20)
            _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))  # -m 0: no blocks reserved for root
            _run("mount", "-o", "loop", str(image), str(directory))
    except subprocess.CalledProcessError as exc:
        image.unlink(missing_ok=True)
        skip_or_fail(f"cannot mount a {kind} filesystem here: {exc.stderr.decode(errors='replace').strip()}")
    try:
        yield directory
    finally:
        for _ in range(20):  # a process may still be closing files on it
            done = subprocess.run(["umount", str(directory)], capture_output=True, timeout=60)
            if done.returncode == 0:
                break
            time.sleep(0.25)  # polling: umount has no "wait until idle"
        else:
            subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=60)
        image.unlink(missing_ok=True)


def fill_to(directory: Path, fraction: float, name: str = "filler") -> int:
    """Add a file that brings the filesystem's use to ``fraction`` (of its size, as ``statvfs`` and
    the bookie count it); returns its size in bytes. ``fraction`` 1.0 fills every free block."""
    usage = shutil.disk_usage(directory)
    want = int(usage.total * fraction) - usage.used
    size = max(0, min(want, usage.free))
    path = directory / name
    with open(path, "ab") as f:
        if size:
            try:
                os.posix_fallocate(f.fileno(), f.tell(), size)
            except OSError:  # a full filesystem may refuse the last partial extent: write what fits
                chunk = b"\0" * (1 << 16)
                with contextlib.suppress(OSError):
                    while True:
                        f.write(chunk)
                        f.flush()
    return path.stat().st_size


async def abandon(wl: Any) -> None:
    """After a failure: stop a ``QueueWorkload`` (bounded), so that its clients do not keep the
    test's event loop from closing while they reconnect to a cluster that is gone."""
    if wl is None:
        return
    with contextlib.suppress(Exception):
        await asyncio.wait_for(wl.stop(settle_timeout=5.0), 60)
