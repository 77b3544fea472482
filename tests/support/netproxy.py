"""A TCP fault proxy for the fault scenarios: cut, blackhole, delay and throttle each link.

``NetProxy`` runs on its own event loop in a daemon thread of the test process. ``add(name, port)``
opens one listening proxy on a free loopback port in front of a server (etcd's client port, a
bookie, a broker) and forwards every connection to the real port. Processes are pointed at the
proxy instead of the server (``tests/faults/partitions.py`` rewrites a ``LocalCluster``'s command
lines), so every byte between them can be held back.

Links are named by their ends: the *destination* is the proxy's name, the *source* is the process
that opened the connection. Several processes connect to the same server (every broker and bookie
to etcd), so the source is found from the kernel, not from the port: on accept, the peer's
address is looked up in ``/proc/net/tcp`` (its socket inode) and that inode among the open files
of the known processes (``/proc/<pid>/fd``), and the pid mapped to a name by the ``names``
callable (the cluster's ``Proc.pid`` -> ``Proc.name``; the test process itself is ``"client"``).
A connection whose owner is not among them is ``"?"`` (only ``"*"`` rules match it).

Rules, matched with shell patterns on both ends (``"bookie-*"``, ``"*"``) and on a *direction*
(``"up"``: source to destination, ``"down"``: destination to source, ``"both"``):

- ``cut``: both directions; existing connections are reset (RST, as a peer that went away) and new
  ones are accepted and reset at once, so a connect "succeeds" and the first read fails (a real
  refused connection fails at connect; for the clients here both are a lost connection).
- ``blackhole``: bytes in that direction are held, neither delivered nor refused, as on a link that
  drops every packet; the sender's kernel buffers fill and it blocks. When the rule goes, what was
  held is delivered in order, as TCP retransmission would after a healed partition. Connections
  opened meanwhile are accepted (the proxy answers the handshake) but carry nothing: a real dropped
  SYN would make the connect itself hang instead; both end in the client's timeout.
- ``delay``: every chunk is delivered ``ms`` after the proxy read it, order kept, throughput not
  reduced (a reader and a writer task per direction with a queue between them).
- ``throttle``: at most ``bytes_per_s`` per connection and direction.

Rules apply to connections already open as well as to new ones, and ``heal`` removes one rule or
all. ``links()`` lists connections with their attributed source and byte counts, which is how
``tests/faults/test_netproxy.py`` checks the attribution.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import itertools
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

UP, DOWN, BOTH = "up", "down", "both"
CHUNK = 64 * 1024
QUEUE_CHUNKS = 64  # per direction: what the proxy reads ahead of a held or slow writer


# ---------------------------------------------------------------------- who opened a connection


def _parse_addr(text: str) -> tuple[str, int]:
    """``0100007F:1F90`` (``/proc/net/tcp``, IPv4 in host byte order) -> (``127.0.0.1``, 8080)."""
    ip_hex, port_hex = text.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(ip_hex, 16))), int(port_hex, 16)


def socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The inode of the TCP socket whose local end is ``local`` and remote end ``remote``."""
    try:
        with open("/proc/net/tcp", encoding="ascii") as f:
            next(f)
            for line in f:
                parts = line.split()
                if len(parts) < 10:
                    continue
                if _parse_addr(parts[1]) == local and _parse_addr(parts[2]) == remote:
                    inode = int(parts[9])
                    if inode:
                        return inode
    except OSError:
        return None
    return None


def pid_of_inode(inode: int, pids: list[int]) -> int | None:
    """Which of ``pids`` holds socket ``inode`` open (threads share their process's fd table)."""
    target = f"socket:[{inode}]"
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == target:
                    return pid
            except OSError:
                continue
    return None


# ---------------------------------------------------------------------- rules and links


@dataclass(frozen=True)
class Rule:
    id: int
    kind: str  # cut | blackhole | delay | throttle
    src: str
    dst: str
    direction: str = BOTH
    ms: float = 0.0
    bytes_per_s: float = 0.0

    def matches(self, src: str, dst: str, direction: str) -> bool:
        if self.direction != BOTH and self.direction != direction:
            return False
        return fnmatch.fnmatchcase(src, self.src) and fnmatch.fnmatchcase(dst, self.dst)


@dataclass
class LinkInfo:
    """One proxied connection, as ``links()`` reports it."""

    id: int
    src: str
    dst: str
    src_pid: int | None
    opened: float
    closed: float | None
    up_bytes: int
    down_bytes: int
    reset: bool


@dataclass
class _Conn:
    id: int
    src: str
    dst: str
    src_pid: int | None
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    opened: float = field(default_factory=time.monotonic)
    closed: float | None = None
    up_bytes: int = 0
    down_bytes: int = 0
    reset: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def info(self) -> LinkInfo:
        return LinkInfo(
            self.id,
            self.src,
            self.dst,
            self.src_pid,
            self.opened,
            self.closed,
            self.up_bytes,
            self.down_bytes,
            self.reset,
        )


def _rst(writer: asyncio.StreamWriter | None) -> None:
    """Close with a reset (SO_LINGER 0), as a peer whose host went away or refused would."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass
class _Listener:
    name: str
    target: tuple[str, int]
    server: asyncio.Server
    port: int


class NetProxy:
    """Fault proxies in front of servers, on an event loop thread of their own.

    ``names`` returns {pid: process name} for attribution; it is called on every accept (from the
    proxy's thread), so processes restarted with new pids are still named."""

    def __init__(self, names: Callable[[], dict[int, str]] | None = None) -> None:
        self._names = names or (lambda: {})
        self._rules: list[Rule] = []
        self._rule_ids = itertools.count(1)
        self._conn_ids = itertools.count(1)
        self._conns: dict[int, _Conn] = {}
        self._listeners: dict[str, _Listener] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="netproxy", daemon=True)
        self._thread.start()
        self._call(self._init())

    # ------------------------------------------------------------------ thread plumbing

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _init(self) -> None:
        self._changed = asyncio.Event()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        """Close every listener and connection and stop the thread."""
        if not self._loop.is_running():
            return

        async def shut() -> None:
            for listener in self._listeners.values():
                listener.server.close()
            for conn in list(self._conns.values()):
                self._teardown(conn, reset=True)
            await asyncio.sleep(0)  # let the aborted transports run their close callbacks

        with contextlib.suppress(Exception):
            self._call(shut(), timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> NetProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ------------------------------------------------------------------ listeners

    def add(self, name: str, target_port: int, *, target_host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen (on ``port``, 0: a free one) in front of ``target_host:target_port``; returns the port."""

        async def start() -> int:
            server = await asyncio.start_server(
                lambda r, w: self._accept(name, r, w), "127.0.0.1", port, limit=CHUNK, reuse_address=True
            )
            bound = int(server.sockets[0].getsockname()[1])
            self._listeners[name] = _Listener(name, (target_host, target_port), server, bound)
            return bound

        return self._call(start())

    def port(self, name: str) -> int:
        return self._listeners[name].port

    @property
    def names(self) -> list[str]:
        return list(self._listeners)

    def dst_of_port(self, port: int) -> str | None:
        """The proxy (destination name) listening on ``port``."""
        for listener in self._listeners.values():
            if listener.port == port:
                return listener.name
        return None

    # ------------------------------------------------------------------ rules (the control API)

    def _add_rule(self, kind: str, src: str, dst: str, direction: str, **kw: Any) -> Rule:
        if direction not in (UP, DOWN, BOTH):
            raise ValueError(f"direction must be up, down or both, not {direction!r}")
        rule = Rule(next(self._rule_ids), kind, src, dst, direction, **kw)
        with self._lock:
            self._rules.append(rule)
        self._call(self._rules_changed(cut=rule if kind == "cut" else None))
        return rule

    def cut(self, src: str = "*", dst: str = "*") -> Rule:
        """Reset every connection from ``src`` to ``dst`` and refuse new ones, both directions."""
        return self._add_rule("cut", src, dst, BOTH)

    def blackhole(self, src: str = "*", dst: str = "*", direction: str = BOTH) -> Rule:
        """Hold every byte going ``direction`` on the link (delivered, in order, once healed)."""
        return self._add_rule("blackhole", src, dst, direction)

    def delay(self, src: str = "*", dst: str = "*", ms: float = 0.0, direction: str = BOTH) -> Rule:
        """Deliver every chunk ``ms`` milliseconds after it was read (per direction named)."""
        return self._add_rule("delay", src, dst, direction, ms=float(ms))

    def throttle(self, src: str = "*", dst: str = "*", bytes_per_s: float = 0.0, direction: str = BOTH) -> Rule:
        """At most ``bytes_per_s`` per connection in each direction named."""
        if bytes_per_s <= 0:
            raise ValueError("bytes_per_s must be positive")
        return self._add_rule("throttle", src, dst, direction, bytes_per_s=float(bytes_per_s))

    def heal(self, rule: Rule | None = None) -> None:
        """Remove ``rule`` (or every rule): held bytes flow again, new connections are let through."""
        with self._lock:
            if rule is None:
                self._rules.clear()
            else:
                self._rules = [r for r in self._rules if r.id != rule.id]
        self._call(self._rules_changed())

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def links(self, *, src: str = "*", dst: str = "*") -> list[LinkInfo]:
        """Every connection the proxies saw (open and closed) from ``src`` to ``dst``."""

        async def snapshot() -> list[LinkInfo]:
            return [
                c.info()
                for c in self._conns.values()
                if fnmatch.fnmatchcase(c.src, src) and fnmatch.fnmatchcase(c.dst, dst)
            ]

        return self._call(snapshot())

    def _matching(self, src: str, dst: str, direction: str) -> list[Rule]:
        with self._lock:
            return [r for r in self._rules if r.matches(src, dst, direction)]

    def _is_cut(self, src: str, dst: str) -> bool:
        return any(r.kind == "cut" for r in self._matching(src, dst, UP))

    async def _rules_changed(self, cut: Rule | None = None) -> None:
        assert self._changed is not None
        old, self._changed = self._changed, asyncio.Event()
        old.set()  # wakes every writer waiting on a blackhole or a delay
        if cut is not None:
            for conn in list(self._conns.values()):
                if conn.closed is None and cut.matches(conn.src, conn.dst, UP):
                    self._teardown(conn, reset=True)

    # ------------------------------------------------------------------ connections

    def _identify(self, peer: tuple[str, int], local: tuple[str, int]) -> tuple[str, int | None]:
        names = dict(self._names())
        names.setdefault(os.getpid(), "client")
        inode = socket_inode(peer, local)
        if inode is None:
            return "?", None
        pid = pid_of_inode(inode, list(names))
        return (names[pid], pid) if pid is not None else ("?", None)

    async def _accept(self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        listener = self._listeners[name]
        peer = writer.get_extra_info("peername")[:2]
        local = writer.get_extra_info("sockname")[:2]
        src, pid = await asyncio.get_running_loop().run_in_executor(None, self._identify, peer, local)
        conn = _Conn(next(self._conn_ids), src, name, pid, writer)
        self._conns[conn.id] = conn
        if self._is_cut(src, name):
            self._teardown(conn, reset=True)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*listener.target, limit=CHUNK)
        except OSError:
            self._teardown(conn, reset=True)  # the server is down: the client sees a reset
            return
        conn.server = up_writer
        if conn.closed is not None or self._is_cut(src, name):  # cut while we were connecting
            self._teardown(conn, reset=True)
            return
        loop = asyncio.get_running_loop()
        for direction, src_reader, dst_writer in ((UP, reader, up_writer), (DOWN, up_reader, writer)):
            queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUE_CHUNKS)
            conn.tasks.append(loop.create_task(self._read(conn, src_reader, queue)))
            conn.tasks.append(loop.create_task(self._write(conn, direction, queue, dst_writer)))

    def _teardown(self, conn: _Conn, *, reset: bool) -> None:
        if conn.closed is not None:
            return
        conn.closed = time.monotonic()
        conn.reset = reset
        for w in (conn.client, conn.server):
            if reset:
                _rst(w)
            elif w is not None:
                w.close()
        current = asyncio.current_task()
        for t in conn.tasks:
            if t is not current:
                t.cancel()

    async def _read(self, conn: _Conn, src: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes]]) -> None:
        """Read one direction into its queue, stamping each chunk with the time it was read."""
        try:
            while True:
                data = await src.read(CHUNK)
                await queue.put((time.monotonic(), data))
                if not data:
                    return
        except (OSError, asyncio.IncompleteReadError):
            self._teardown(conn, reset=True)  # a reset on one side is passed on to the other

    async def _write(
        self, conn: _Conn, direction: str, queue: asyncio.Queue[tuple[float, bytes]], dst: asyncio.StreamWriter
    ) -> None:
        """Deliver one direction's chunks in order, holding them while blackholed, after their
        delay, at the throttled rate."""
        sent_until = time.monotonic()  # throttle: when the bytes written so far are "on the wire"
        try:
            while True:
                t_read, data = await queue.get()
                while True:
                    assert self._changed is not None
                    changed = self._changed
                    rules = self._matching(conn.src, conn.dst, direction)
                    if any(r.kind == "blackhole" for r in rules):
                        await changed.wait()
                        continue
                    delay = max((r.ms for r in rules if r.kind == "delay"), default=0.0) / 1000.0
                    due = t_read + delay - time.monotonic()
                    if due > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(changed.wait(), due)  # a delay (or a rule change)
                        continue
                    break
                if not data:
                    if dst.can_write_eof():
                        dst.write_eof()
                    if self._both_ended(conn, direction):
                        self._teardown(conn, reset=False)
                    return
                rates = [r.bytes_per_s for r in rules if r.kind == "throttle"]
                if rates:
                    rate = min(rates)
                    step = max(1, int(rate / 20))  # 50 ms slices
                    for i in range(0, len(data), step):
                        piece = data[i : i + step]
                        sent_until = max(sent_until, time.monotonic()) + len(piece) / rate
                        wait = sent_until - time.monotonic()
                        if wait > 0:
                            await asyncio.sleep(wait)  # the throttle's pace
                        dst.write(piece)
                        await dst.drain()
                        self._count(conn, direction, len(piece))
                else:
                    dst.write(data)
                    await dst.drain()
                    self._count(conn, direction, len(data))
        except OSError:
            self._teardown(conn, reset=True)

    @staticmethod
    def _count(conn: _Conn, direction: str, n: int) -> None:
        if direction == UP:
            conn.up_bytes += n
        else:
            conn.down_bytes += n

    @staticmethod
    def _both_ended(conn: _Conn, direction: str) -> bool:
        """Whether the other direction's writer has delivered its end of stream too."""
        me = asyncio.current_task()
        return all(t.done() for t in conn.tasks[1::2] if t is not me)  # tasks: reader, writer, reader, writer
