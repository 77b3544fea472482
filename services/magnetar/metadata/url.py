"""Open a ``MetadataStore`` from the URL given on the command line (``--metadata-url``).

One string names both the implementation and where it lives, so brokers, bookies and tools all
accept the same flag:

- ``etcd://host:port[,host:port...][/prefix]`` — the cluster store; several endpoints fail over,
  the optional path keeps this cluster's keys apart from others in the same etcd.
- ``lmdb:///absolute/path`` — the embedded store (one process only, as in standalone mode).
"""

from __future__ import annotations

import os
from typing import Any

from magnetar.metadata.store import MetadataStore


async def open_metadata_store(url: str, **kw: Any) -> MetadataStore:
    """Open the store ``url`` names. Keyword options go to the implementation
    (``lease_ttl=``/``prefix=`` for etcd, ``map_size=`` for LMDB)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme == "etcd":
        from magnetar.metadata.etcd_store import EtcdMetadataStore

        ttl = os.environ.get("MAGNETAR_METADATA_LEASE_TTL")
        if ttl and "lease_ttl" not in kw:
            # Session (lease) length in seconds: how long a dead or paused broker or bookie keeps its
            # ephemeral keys. Shorter means faster failover and more sensitivity to pauses.
            kw["lease_ttl"] = float(ttl)
        return await EtcdMetadataStore.connect(url, **kw)
    if sep and scheme == "lmdb":
        if not rest.startswith("/") or rest == "/":
            raise ValueError(f"lmdb metadata URL needs an absolute directory, like lmdb:///var/lib/magnetar: {url!r}")
        from magnetar.metadata.lmdb_store import LmdbMetadataStore

        return await LmdbMetadataStore.open(rest, **kw)
    raise ValueError(
        f"unsupported metadata URL {url!r}: expected etcd://host:port[,host:port...][/prefix] or lmdb:///abs/path"
    )
