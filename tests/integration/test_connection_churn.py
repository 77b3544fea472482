"""Clients leaving: their connections are closed a bounded number per event-loop turn
(broker/loop/closing.py), and a client's half-close still ends its connection.

A real in-process standalone; the clients are raw sockets in the same loop, which speak the
connect handshake and then close. Each turn of the loop is observed by a callback that schedules
itself again (it runs once per turn) and records how many connections the broker still holds.
"""

from __future__ import annotations

import asyncio
import socket

from magnetar.broker.loop.closing import PER_TURN
from magnetar.node.standalone import Standalone
from magnetar.protocol.framing import FrameDecoder, encode_frame

CLIENTS = 6 * PER_TURN


async def _connected(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode_frame({"t": "connect", "rid": 1, "client_version": "churn", "protocol_version": 1}))
    decoder = FrameDecoder()
    while True:
        data = await reader.read(4096)
        assert data, "closed before CONNECTED"
        frames = decoder.feed(data)
        if frames:
            assert frames[0].get("t") == "connected", frames[0]
            return reader, writer


class TurnRecorder:
    """Records ``len(connections)`` once per loop turn until it reaches ``until``."""

    def __init__(self, connections: set[object], until: int) -> None:
        self.connections = connections
        self.until = until
        self.counts: list[int] = []
        self.done = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._loop.call_soon(self._turn)

    def _turn(self) -> None:
        self.counts.append(len(self.connections))
        if self.counts[-1] <= self.until:
            self.done.set()
        else:
            self._loop.call_soon(self._turn)


async def test_clients_leaving_together_are_closed_a_few_per_loop_turn(in_process_standalone: Standalone) -> None:
    broker = in_process_standalone.broker
    assert broker is not None and broker.port is not None
    clients = await asyncio.gather(*(_connected(broker.port) for _ in range(CLIENTS)))
    held = len(broker.connections)
    assert held >= CLIENTS
    recorder = TurnRecorder(broker.connections, held - CLIENTS)
    for _, writer in clients:  # all in this turn: their ends of stream reach the broker together
        writer.close()
    await asyncio.wait_for(recorder.done.wait(), 30)
    closed_per_turn = [a - b for a, b in zip(recorder.counts, recorder.counts[1:], strict=False)]
    assert sum(closed_per_turn) == CLIENTS
    assert max(closed_per_turn) <= PER_TURN, closed_per_turn
    # Spread over several turns, not one batch: the point of the queue.
    assert sum(1 for n in closed_per_turn if n) >= CLIENTS // PER_TURN, closed_per_turn


async def test_a_client_that_half_closes_gets_its_connection_closed(in_process_standalone: Standalone) -> None:
    broker = in_process_standalone.broker
    assert broker is not None and broker.port is not None
    reader, writer = await _connected(broker.port)
    held = len(broker.connections)
    sock = writer.get_extra_info("socket")
    sock.shutdown(socket.SHUT_WR)  # our end of stream; we can still read
    assert await asyncio.wait_for(reader.read(4096), 30) == b"", "the broker closes its side"
    assert len(broker.connections) == held - 1
    writer.close()
