"""Find things inside a (closed) LMDB ``data.mdb`` to damage: live B-tree pages and leaf nodes.

The flipped-bits scenario must damage what the bookie will really read, not a stale copy that
copy-on-write left in a free page, so it walks the live tree the way LMDB does: the meta page with
the higher transaction id names the main DB's root; the main DB's leaf holds each named DB's
``MDB_db`` record (``F_SUBDATA``), whose ``md_root`` starts that DB's tree; branch nodes hold child
page numbers. Layouts (lmdb 0.9, 64-bit): page header ``pgno u64, pad u16, flags u16, lower u16,
upper u16``; node ``lo u16, hi u16, flags u16, ksize u16, key, data``; in a branch node
``lo | hi << 16 | flags << 32`` is the child page, in a leaf node ``lo | hi << 16`` the data size.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

PAGE = 4096
P_BRANCH, P_LEAF, P_OVERFLOW, P_META = 0x01, 0x02, 0x04, 0x08
F_BIGDATA, F_SUBDATA = 0x01, 0x02
HEADER = struct.Struct("<QHHHH")
NODE = struct.Struct("<HHHH")
# The meta page after its header: magic u32, version u32, address u64, mapsize u64, dbs[FREE] and
# dbs[MAIN] (MDB_db, 48 bytes, md_root last), last_pg u64, txnid u64.
MAIN_ROOT_AT = 16 + 4 + 4 + 8 + 8 + 48 + 40
TXNID_AT = 16 + 4 + 4 + 8 + 8 + 48 + 48 + 8
P_INVALID = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Node:
    page: int  # page number
    offset: int  # file offset of the node header
    key: bytes
    data_offset: int  # file offset of the value (inline values only)
    size: int  # value size


@dataclass(slots=True)
class Tree:
    branch_pages: list[int] = field(default_factory=list)
    leaf_pages: list[int] = field(default_factory=list)
    leaves: list[Node] = field(default_factory=list)  # inline values (overflow values are skipped)


def _header(raw: bytes | bytearray, pgno: int) -> tuple[int, int, int]:
    _, _, flags, lower, upper = HEADER.unpack_from(raw, pgno * PAGE)
    return flags, lower, upper


def _nodes(raw: bytes | bytearray, pgno: int) -> list[tuple[int, int, int, int, int, bytes]]:
    base = pgno * PAGE
    _, lower, _ = _header(raw, pgno)
    out = []
    for i in range((lower - HEADER.size) // 2):
        (ptr,) = struct.unpack_from("<H", raw, base + HEADER.size + 2 * i)
        at = base + ptr
        lo, hi, flags, ksize = NODE.unpack_from(raw, at)
        key = bytes(raw[at + NODE.size : at + NODE.size + ksize])
        out.append((at, lo, hi, flags, ksize, key))
    return out


def main_root(raw: bytes | bytearray) -> int:
    metas = []
    for pgno in (0, 1):
        (txnid,) = struct.unpack_from("<Q", raw, pgno * PAGE + TXNID_AT)
        (root,) = struct.unpack_from("<Q", raw, pgno * PAGE + MAIN_ROOT_AT)
        metas.append((txnid, root))
    return max(metas)[1]


def walk(raw: bytes | bytearray, root: int) -> Tree:
    tree = Tree()
    stack = [root] if root != P_INVALID else []
    while stack:
        pgno = stack.pop()
        flags, _, _ = _header(raw, pgno)
        if flags & P_BRANCH:
            tree.branch_pages.append(pgno)
            for _at, lo, hi, nflags, _ksize, _key in _nodes(raw, pgno):
                stack.append(lo | hi << 16 | nflags << 32)
        elif flags & P_LEAF:
            tree.leaf_pages.append(pgno)
            for at, lo, hi, nflags, ksize, key in _nodes(raw, pgno):
                if not nflags & (F_BIGDATA | F_SUBDATA):
                    tree.leaves.append(Node(pgno, at, key, at + NODE.size + ksize, lo | hi << 16))
    return tree


def named_db_root(raw: bytes | bytearray, name: bytes) -> int:
    """The root page of the named DB ``name`` (e.g. ``b"entries"``)."""
    tree_pages = [main_root(raw)]
    while tree_pages:
        pgno = tree_pages.pop()
        flags, _, _ = _header(raw, pgno)
        for at, lo, hi, nflags, ksize, key in _nodes(raw, pgno):
            if flags & P_BRANCH:
                tree_pages.append(lo | hi << 16 | nflags << 32)
            elif key == name and nflags & F_SUBDATA:
                (root,) = struct.unpack_from("<Q", raw, at + NODE.size + ksize + 40)
                return int(root)
    raise KeyError(name)


def named_db(raw: bytes | bytearray, name: bytes) -> Tree:
    return walk(raw, named_db_root(raw, name))
