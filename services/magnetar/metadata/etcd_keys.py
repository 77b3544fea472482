"""Where the etcd store's paths live in etcd: keys under one prefix, subtrees as key ranges.

Every path of the ``MetadataStore`` contract is stored at ``prefix + path``, so several clusters (or
tests) can share one etcd. ``children`` and watches need "everything strictly below a path" as one
etcd range: ``path + "/"`` up to, not including, ``path + "0"`` (``'0'`` is the byte after
``'/'``). A compare-and-set is a ``txn`` whose compares say what the expected version means in
etcd's terms (``version_compare``).
"""

from __future__ import annotations

from typing import Any

from magnetar.metadata.etcd_gateway import compare_create_revision, compare_mod_revision
from magnetar.metadata.store import MUST_NOT_EXIST


class EtcdKeys:
    """Paths to etcd keys and back, under ``chroot`` (``""`` or an absolute path without a trailing
    slash, as the store has checked it)."""

    def __init__(self, chroot: str) -> None:
        self.chroot = chroot

    def key(self, path: str) -> bytes:
        return (self.chroot + path).encode()

    def path(self, key: bytes) -> str | None:
        """The path of ``key``; None for a key outside the prefix."""
        text = key.decode()
        if not text.startswith(self.chroot + "/"):
            return None
        return text[len(self.chroot) :]

    def subtree(self, path: str) -> tuple[bytes, bytes]:
        """The key range strictly below ``path``: ``base/`` up to, not including, ``base0``."""
        base = self.chroot + ("" if path == "/" else path)
        return (base + "/").encode(), (base + "0").encode()


def version_compare(key: bytes, expected: int) -> list[dict[str, Any]]:
    """The compares of a ``txn`` that succeeds only when ``key`` is at version ``expected``
    (``MUST_NOT_EXIST``: absent)."""
    if expected == MUST_NOT_EXIST:
        return [compare_create_revision(key, "EQUAL", 0)]
    # A missing key has mod_revision 0 in etcd: also require existence, so expecting 0 fails.
    return [compare_create_revision(key, "GREATER", 0), compare_mod_revision(key, "EQUAL", expected)]
