"""The bookie identity cookie: a wiped or swapped disk must never rejoin the cluster silently.

A bookie that comes back with an empty data directory under an id the cluster knows would answer
"no such entry" for data the ledgers' metadata says it holds, and recovery could treat that
silence as proof that entries were never written. So on first start the bookie writes a cookie
(its bookie id and a random instance id) into its data directory and registers the same cookie at
``/bookies/cookies/{id}``. On every later start the two must match. A registered cookie with no
local one means the disk was wiped: the bookie refuses to start with ``CookieMismatch`` until an
operator re-provisions it on purpose (``reprovision=True``, the ``--reprovision`` flag of
``magnetar bookie``), after which its ledgers must be re-replicated from the other bookies.

The local cookie is written (and fsynced) before it is registered: a crash in between leaves a
local cookie with no registered one, which the next start simply registers.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import BadVersion

COOKIE_FILE = "COOKIE"
REPROVISION_HINT = (
    "if the disk was replaced or wiped on purpose, start the bookie once with "
    "`magnetar bookie --reprovision` (BookieService(..., reprovision=True)) to register a new "
    "cookie; its ledgers will then be re-replicated from the other bookies"
)


class CookieMismatch(RuntimeError):
    """The data directory and the registered identity disagree; the bookie must not start."""


@dataclass(frozen=True, slots=True)
class Cookie:
    bookie_id: str
    instance_id: str

    def to_bytes(self) -> bytes:
        return json.dumps({"bookie_id": self.bookie_id, "instance_id": self.instance_id}).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Cookie:
        try:
            doc = json.loads(raw)
            return cls(str(doc["bookie_id"]), str(doc["instance_id"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CookieMismatch(f"unreadable bookie cookie {raw[:80]!r}: {exc}") from exc

    @classmethod
    def new(cls, bookie_id: str) -> Cookie:
        return cls(bookie_id, uuid.uuid4().hex)


def read_local_cookie(data_dir: str | os.PathLike[str]) -> Cookie | None:
    path = Path(data_dir) / COOKIE_FILE
    try:
        return Cookie.from_bytes(path.read_bytes())
    except FileNotFoundError:
        return None


def write_local_cookie(data_dir: str | os.PathLike[str], cookie: Cookie) -> None:
    """Write durably: temp file, fsync, rename, fsync the directory."""
    directory = Path(data_dir)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / (COOKIE_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(cookie.to_bytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / COOKIE_FILE)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def data_dir_is_empty(data_dir: str | os.PathLike[str]) -> bool:
    directory = Path(data_dir)
    # ``lost+found`` is what mkfs leaves on a fresh volume: it is not bookie data.
    return not directory.exists() or all(p.name == "lost+found" for p in directory.iterdir())


async def verify_cookie(
    data_dir: str | os.PathLike[str],
    bookie_id: str,
    store: MetadataStore | None = None,
    *,
    reprovision: bool = False,
) -> Cookie:
    """Check (or, on first start, create) the cookie; return the cookie the bookie runs with.
    Call this before opening the storage, so that a refused start leaves the directory as found.
    """
    local = read_local_cookie(data_dir)
    if local is not None and local.bookie_id != bookie_id:
        raise CookieMismatch(
            f"data directory {data_dir} belongs to bookie {local.bookie_id!r}, not {bookie_id!r}; "
            "start it with its own id or give this bookie another directory"
        )
    if local is None and not data_dir_is_empty(data_dir) and not reprovision:
        raise CookieMismatch(
            f"data directory {data_dir} holds data but no cookie; refusing to guess its identity; " + REPROVISION_HINT
        )
    if store is None:
        if local is None:
            local = Cookie.new(bookie_id)
            write_local_cookie(data_dir, local)
        return local

    path = paths.bookie_cookie(bookie_id)
    registered = await store.get(path)
    if registered is None:
        if local is None:
            local = Cookie.new(bookie_id)
            write_local_cookie(data_dir, local)
        try:
            await store.put(path, local.to_bytes(), MUST_NOT_EXIST)
        except BadVersion:
            raise CookieMismatch(
                f"another bookie registered the id {bookie_id!r} while this one was starting"
            ) from None
        return local

    remote = Cookie.from_bytes(registered.value)
    if local is not None and local == remote:
        return local
    if not reprovision:
        if local is None:
            raise CookieMismatch(
                f"bookie {bookie_id!r} is registered (instance {remote.instance_id}) but its data "
                f"directory {data_dir} has no cookie: the disk looks wiped or replaced; " + REPROVISION_HINT
            )
        raise CookieMismatch(
            f"bookie {bookie_id!r}: local cookie (instance {local.instance_id}) does not match the "
            f"registered one (instance {remote.instance_id}); " + REPROVISION_HINT
        )
    if local is None:
        local = Cookie.new(bookie_id)
        write_local_cookie(data_dir, local)
    try:
        await store.put(path, local.to_bytes(), registered.version)
    except BadVersion:
        raise CookieMismatch(f"the cookie of {bookie_id!r} changed while re-provisioning; retry") from None
    return local
