"""The fault proxy itself (tests/support/netproxy.py) on an echo server, without a cluster.

The partition scenarios are only as good as the proxy: a cut that leaves a connection working, a
blackhole that leaks, a delay that reorders or a source named wrongly would make them prove
nothing. Each rule is checked here from the outside, on real sockets, with a second process as a
source so that attribution by owner (not by port) is what is tested.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from tests.support.netproxy import NetProxy

pytestmark = [pytest.mark.timeout(120)]

# A second process with one connection through the proxy: each stdin line is sent, and the echoed
# line (or the error) printed, so the test drives a connection it does not own.
CHILD = """
import socket, sys
sys.stdin.readline()  # named first: the proxy attributes the connection when it accepts it
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(float(sys.argv[2]))
f = s.makefile("rb")
print("connected", flush=True)
for line in sys.stdin:
    try:
        s.sendall(line.encode())
        reply = f.readline()
        print(("echo " + reply.decode().strip()) if reply else "EOF", flush=True)
    except Exception as exc:
        print("ERR " + type(exc).__name__, flush=True)
"""


class Child:
    def __init__(self, port: int, names: dict[int, str], name: str, timeout: float = 1.5) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(port), str(timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        names[self.p.pid] = name
        assert self.ask("connect") == "connected"

    def ask(self, text: str) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(text + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def close(self) -> None:
        self.p.kill()
        self.p.wait(10)


@pytest.fixture
async def echo() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A line echo server on the test's loop; yields its port and every chunk it received."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                received.append(data)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], received
    finally:
        server.close()


@pytest.fixture
def children() -> Iterator[dict[int, str]]:
    """{pid: name} of the child processes a test starts: what the proxy attributes sources by."""
    names: dict[int, str] = {}
    yield names


@pytest.fixture
def proxy(children: dict[int, str]) -> Iterator[NetProxy]:
    p = NetProxy(lambda: dict(children))
    try:
        yield p
    finally:
        p.close()


async def roundtrip(port: int, payload: bytes, within: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), within)
    finally:
        writer.close()


def start_child(proxy: NetProxy, children: dict[int, str], name: str, port: int) -> Child:
    return Child(port, children, name)


async def test_links_are_attributed_to_the_process_that_opened_them(
    proxy: NetProxy, children: dict[int, str], echo: tuple[int, list[bytes]]
) -> None:
    port = proxy.add("server", echo[0])
    child = await asyncio.to_thread(start_child, proxy, children, "worker-1", port)
    try:
        assert await asyncio.to_thread(child.ask, "hi") == "echo hi"
        assert await roundtrip(port, b"from the test\n") == b"from the test\n"
        links = proxy.links(dst="server")
        by_src = {link.src: link for link in links}
        assert set(by_src) == {"worker-1", "client"}, links
        assert by_src["worker-1"].src_pid == child.p.pid
        assert by_src["worker-1"].up_bytes == 3 and by_src["worker-1"].down_bytes == 3
    finally:
        child.close()


async def test_cut_resets_one_source_only_and_heals(
    proxy: NetProxy, children: dict[int, str], echo: tuple[int, list[bytes]]
) -> None:
    port = proxy.add("server", echo[0])
    child = await asyncio.to_thread(start_child, proxy, children, "worker-1", port)
    try:
        assert await asyncio.to_thread(child.ask, "before") == "echo before"
        rule = proxy.cut(src="worker-1", dst="server")
        # Its open connection is reset, not left hanging...
        assert (await asyncio.to_thread(child.ask, "during")).startswith(("ERR", "EOF"))
        # ... a new one from it is refused ...
        again = await asyncio.to_thread(start_child, proxy, children, "worker-1", port)
        try:
            assert (await asyncio.to_thread(again.ask, "new")).startswith(("ERR", "EOF"))
        finally:
            again.close()
        # ... while another source still gets through.
        assert await roundtrip(port, b"other source\n") == b"other source\n"
        proxy.heal(rule)
        healed = await asyncio.to_thread(start_child, proxy, children, "worker-1", port)
        try:
            assert await asyncio.to_thread(healed.ask, "after") == "echo after"
        finally:
            healed.close()
        assert all(link.reset for link in proxy.links(src="worker-1") if link.closed is not None)
    finally:
        child.close()


async def test_blackhole_holds_bytes_one_way_and_delivers_them_in_order_when_healed(
    proxy: NetProxy, echo: tuple[int, list[bytes]]
) -> None:
    port = proxy.add("server", echo[0])
    received = echo[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        rule = proxy.blackhole(src="client", dst="server", direction="down")
        writer.write(b"one\n")
        await writer.drain()
        # The server got it (up flows), the answer is held (down is blackholed).
        deadline = time.monotonic() + 5
        while b"".join(received) != b"one\n":
            assert time.monotonic() < deadline, received
            await asyncio.sleep(0.02)  # polling the echo server's record
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.5)
        proxy.heal(rule)
        rule = proxy.blackhole(src="client", dst="server", direction="up")
        writer.write(b"two\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"one\n"  # the held answer
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(4), 0.5)
        assert b"".join(received) == b"one\n"  # "two" never reached the server
        proxy.heal(rule)
        assert await asyncio.wait_for(reader.readexactly(4), 2) == b"two\n"
    finally:
        writer.close()


async def test_delay_adds_latency_each_way_keeps_order_and_not_throughput(
    proxy: NetProxy, echo: tuple[int, list[bytes]]
) -> None:
    port = proxy.add("server", echo[0])
    assert await roundtrip(port, b"warm\n") == b"warm\n"
    proxy.delay(src="*", dst="server", ms=200)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        t0 = time.monotonic()
        writer.write(b"ping\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"ping\n"
        rtt = time.monotonic() - t0
        assert rtt >= 0.39, rtt  # 200 ms each way
        # 200 messages pipelined over 0.5 s: in order, and all back about one RTT after the last.
        t0 = time.monotonic()
        lines = [f"m{i:03d}\n".encode() for i in range(200)]
        for line in lines:
            writer.write(line)
            await writer.drain()
            await asyncio.sleep(0.0025)  # spread the sends
        got = await asyncio.wait_for(reader.readexactly(sum(map(len, lines))), 10)
        assert got == b"".join(lines)
        assert time.monotonic() - t0 < 0.5 + rtt + 1.0
    finally:
        writer.close()


async def test_throttle_limits_the_rate(proxy: NetProxy, echo: tuple[int, list[bytes]]) -> None:
    port = proxy.add("server", echo[0])
    proxy.throttle(dst="server", bytes_per_s=40_000, direction="up")
    payload = b"x" * 40_000
    t0 = time.monotonic()
    assert await roundtrip(port, payload, within=10) == payload
    took = time.monotonic() - t0
    assert 0.9 <= took < 3.0, took
