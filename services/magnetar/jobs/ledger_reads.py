"""Reading one planned ledger range from the bookies, with every entry's checksums verified.

Runs on a Spark executor, inside ``DataSourceReader.read`` (no Spark here). The pattern is the
ledger layer's (``ledger/replica_reads.py``, PROTOCOL.md R14): an entry lives on the ``Qw`` bookies
of its write set; they are tried in write-set order (so consecutive entries start on different
bookies and the load spreads), and *any* failure of one replica — unreachable, timed out, missing
entry, checksum mismatch — moves on to the next. Only when no replica has a good copy does the
read fail, naming the topic, ledger, entry and what each replica said.

Two checksums are checked per copy, because they catch different damage: the bookie's CRC32C of
the stored entry (``crc32c(data) == result.crc``; the bookie checks it against its disk too, and
this check covers the transfer), and the producer's CRC32C of the payload inside the entry
(``meta["crc"]``, WIRE.md "Entry metadata"), which also catches a copy damaged before the bookie
computed its own checksum. A copy failing either is skipped for another replica, which is why the
payload CRC is checked here rather than later in ``decode_batch`` (where no other copy is at hand).

Why not ``replica_reads.read_entry`` itself: it needs a ``LedgerMetadata`` and a resolver, raises
the last replica's bare error, and cannot check the payload CRC; here the error must name the
topic and entry for a failed Spark task, and a bookie that refused a connection is tried last for
the rest of the range instead of first for every other entry.

Credentials: with authentication on the bookies, the reader sends the job's own token
(``security``; by default the environment's, jobs/credentials.py). TLS is per bookie, as each
registered itself (``LedgerRange.tls_bookies``): TLS with the job's trust settings
(``tlsTrustCertsFilePath``) to a bookie that speaks only TLS, plaintext to the others, so one job
reads a cluster whose bookies are being moved to TLS one by one.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.columnar.message_rows import StoredEntry
from magnetar.jobs.credentials import JobCredentials
from magnetar.jobs.topic_plan import LedgerRange
from magnetar.ledger.distribution import write_set
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import decode_entry
from magnetar.protocol.errors import ChecksumError, NotConnected, Timeout

# Entries requested at once per range: enough to hide the round trips to the bookies, few enough
# that a window of large entries stays small in an executor's memory.
READ_WINDOW = 128
REQUEST_TIMEOUT = 10.0
CONNECT_TIMEOUT = 5.0


class EntryUnreadableError(RuntimeError):
    """No replica of an entry gave a good copy (the message says which entry and why)."""


@dataclass
class ReadStats:
    """What reading a range took: entries and bytes read, reads per bookie, replicas skipped."""

    entries: int = 0
    bytes: int = 0
    reads: Counter[str] = field(default_factory=Counter)
    failovers: list[str] = field(default_factory=list)


class _Ensembles:
    """Which bookies hold an entry: the ensemble fragments of the ledger's metadata document."""

    def __init__(self, metadata: dict[str, Any]) -> None:
        fragments = sorted(
            (int(f["firstEntry"]), [str(b) for b in f["bookies"]]) for f in metadata.get("ensembles", [])
        )
        if not fragments:
            raise ValueError("ledger metadata without ensembles")
        self._starts = [first for first, _ in fragments]
        self._bookies = [bookies for _, bookies in fragments]
        self.ensemble_size = int(metadata.get("ensembleSize", len(self._bookies[0])))
        self.write_quorum = int(metadata.get("writeQuorumSize", self.ensemble_size))

    def replicas(self, entry_id: int) -> list[str]:
        """The bookies of ``entry_id``'s write set, in write-set order."""
        bookies = self._bookies[bisect.bisect_right(self._starts, entry_id) - 1]
        return [bookies[slot] for slot in write_set(entry_id, self.ensemble_size, self.write_quorum)]


class RangeReader:
    """Reads the entries of one ``LedgerRange``; one TCP client per bookie, closed by ``close``."""

    def __init__(
        self,
        rng: LedgerRange,
        *,
        window: int = READ_WINDOW,
        request_timeout: float = REQUEST_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
        security: BookieClientSecurity | None = None,
    ) -> None:
        self.range = rng
        self._security = security if security is not None else JobCredentials().bookie_security()
        self.window = window
        self.stats = ReadStats()
        self._ensembles = _Ensembles(rng.metadata)
        self._clients: dict[str, TcpBookieClient] = {}
        self._suspects: set[str] = set()  # refused or timed out once: tried last from then on
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout

    def _client(self, bookie_id: str) -> TcpBookieClient:
        client = self._clients.get(bookie_id)
        if client is None:
            address = self.range.bookies.get(bookie_id)
            if address is None:
                raise NotConnected(f"bookie {bookie_id} was not registered when the read was planned")
            security = self._security
            if bookie_id in self.range.tls_bookies:
                if security.ssl_context is None:
                    raise NotConnected(f"bookie {bookie_id!r} accepts only TLS; set tlsTrustCertsFilePath to reach it")
            elif security.ssl_context is not None:
                security = replace(security, ssl_context=None)
            client = TcpBookieClient(
                bookie_id,
                address[0],
                address[1],
                request_timeout=self._request_timeout,
                connect_timeout=self._connect_timeout,
                security=security,
            )
            self._clients[bookie_id] = client
        return client

    async def read_entry(self, entry_id: int) -> StoredEntry:
        """A verified copy of ``entry_id`` from the first replica that has one."""
        rng = self.range
        replicas = self._ensembles.replicas(entry_id)
        if self._suspects:
            replicas.sort(key=lambda b: b in self._suspects)  # stable: write-set order otherwise
        errors: list[str] = []
        for bookie_id in replicas:
            try:
                self.stats.reads[bookie_id] += 1
                result = await self._client(bookie_id).read_entry(rng.ledger_id, entry_id)
                if crc32c(result.data) != result.crc:
                    raise ChecksumError("entry checksum mismatch (bookie CRC)")
                meta, payload = decode_entry(result.data)
                if not isinstance(meta, dict) or not isinstance(payload, bytes):
                    raise ChecksumError("not a [meta, payload] entry")
                if crc32c(payload) != meta.get("crc"):
                    raise ChecksumError("payload checksum mismatch (producer CRC)")
            except Exception as exc:  # any failure of one replica means: try the next one
                if isinstance(exc, NotConnected | Timeout):
                    self._suspects.add(bookie_id)
                errors.append(f"{bookie_id}: {type(exc).__name__}: {exc}")
                self.stats.failovers.append(f"{rng.ledger_id}:{entry_id}@{bookie_id}: {type(exc).__name__}")
                continue
            self.stats.entries += 1
            self.stats.bytes += len(result.data)
            return StoredEntry(entry_id, meta, payload)
        raise EntryUnreadableError(
            f"topic {rng.topic} ledger {rng.ledger_id} entry {entry_id}: no replica has a good copy "
            f"({'; '.join(errors) or 'no replicas'})"
        )

    async def read_window(self, first: int, last: int) -> list[StoredEntry]:
        """Entries ``first..last`` (inclusive), in order, read concurrently."""
        return list(await asyncio.gather(*(self.read_entry(e) for e in range(first, last + 1))))

    def windows(self) -> list[tuple[int, int]]:
        """The range cut into windows of ``window`` entries, in order."""
        rng = self.range
        return [
            (lo, min(rng.last_entry, lo + self.window - 1))
            for lo in range(rng.first_entry, rng.last_entry + 1, self.window)
        ]

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            await client.close()


async def read_range(rng: LedgerRange, **options: Any) -> tuple[list[StoredEntry], ReadStats]:
    """Every entry of ``rng`` at once (tests and small tools; the data source streams windows)."""
    reader = RangeReader(rng, **options)
    try:
        out: list[StoredEntry] = []
        for lo, hi in reader.windows():
            out.extend(await reader.read_window(lo, hi))
        return out, reader.stats
    finally:
        await reader.close()
