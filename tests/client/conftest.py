"""Fixtures for the client's unit tests.

``FakeBroker`` is a TINY in-test fake that speaks the client side of protocol/WIRE.md just well
enough to unit-test the client (batching, receipts, flow, acks, lookup redirects) and to inject
the faults reconnection must survive: dropped connections, a killed and restarted broker, pushed
``close_producer`` / ``close_consumer``, errors answered a set number of times, and silence (a
paused broker). It is NOT the broker and must never be used for anything but client unit tests:
the real broker is written separately, and end-to-end tests run the client against it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from magnetar.protocol import commands as cmds
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.framing import FrameDecoder, encode_frame


@dataclass
class FakeSub:
    consumer_id: int
    writer: asyncio.StreamWriter
    topic: str
    cursor: int
    permits: int = 0
    sub_type: str = "Exclusive"
    redelivery: dict[int, int] = field(default_factory=dict)
    subscription: str = ""


class FakeBroker:
    """Client-unit-test fake (see module docstring). One ledger (id 7) per topic; entry = index."""

    LEDGER = 7

    def __init__(self, *, max_message_size: int = 5 * 1024 * 1024) -> None:
        self.max_message_size = max_message_size
        self.frames: list[dict[str, Any]] = []  # every frame received, in order
        self.logs: dict[str, list[tuple[dict[str, Any], bytes]]] = {}
        self.partitions: dict[str, int] = {}
        self.lookups: dict[str, tuple[str, bool]] = {}  # topic -> (broker_url, redirect)
        self.errors: dict[str, tuple[str, str]] = {}  # command name -> (code, message) to answer with
        self.failures: dict[str, list[Any]] = {}  # command name -> [code, remaining count] (see ``fail``)
        self.silent = False  # read and record frames but answer nothing (a paused broker)
        self.writers: set[asyncio.StreamWriter] = set()
        self.connections_closed = 0
        self.producer_writers: dict[int, asyncio.StreamWriter] = {}
        # Per (topic, subscription): where it started and which entries are acknowledged, so a
        # re-subscribe gets every unacknowledged entry again (as the broker redelivers them).
        self.sub_start: dict[tuple[str, str], int] = {}
        self.sub_acked: dict[tuple[str, str], set[int]] = {}
        self.hold_receipts = False
        self.hold_acks = False
        self.held_acks: list[tuple[asyncio.StreamWriter, int]] = []
        self.subs: dict[int, FakeSub] = {}
        self.producer_topics: dict[int, str] = {}
        self.writes_received = 0  # socket reads that carried data: shows write coalescing
        # Registrations to close again at once: the next this many ``producer`` / ``subscribe``
        # answers are followed, in the same write, by a pushed close (the topic moved again).
        self.close_after_answer = 0
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"magnetar://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.drop_connections()

    def drop_connections(self) -> None:
        """Cut every client connection (as a crashed broker or a network failure would)."""
        for w in list(self.writers):
            w.transport.abort()

    async def restart(self) -> None:
        """Listen again on the same port after ``stop`` (a restarted broker)."""
        await self.start(int(self.url.rsplit(":", 1)[1]))

    def fail(self, t: str, code: str, times: int = 1) -> None:
        """Answer the next ``times`` commands ``t`` with error ``code`` (``send`` gets ``send_error``)."""
        self.failures[t] = [code, times]

    def push_close_producer(self, producer_id: int) -> None:
        """Push ``close_producer`` (the topic was unloaded) and forget the producer."""
        self.producer_topics.pop(producer_id, None)
        self._reply(self.producer_writers.pop(producer_id), {"t": cmds.CLOSE_PRODUCER, "producer_id": producer_id})

    def push_close_consumer(self, consumer_id: int) -> None:
        sub = self.subs.pop(consumer_id)
        self._reply(sub.writer, {"t": cmds.CLOSE_CONSUMER, "consumer_id": consumer_id})

    def sent(self, t: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["t"] == t]

    async def wait_for(self, predicate: Callable[[], bool], within: float = 5.0) -> None:
        """Wait (event-driven, no polling sleep) until ``predicate()`` holds after some frame."""
        async with asyncio.timeout(within):
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        self.writers.add(writer)
        try:
            while data := await reader.read(1 << 20):
                self.writes_received += 1
                for frame in decoder.feed(data):
                    self.frames.append(frame)
                    if not self.silent:
                        self._handle(frame, writer)
                    self._changed.set()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            # The broker forgets the connection's producers and consumers (their entries go back).
            self.writers.discard(writer)
            for cid in [c for c, sub in self.subs.items() if sub.writer is writer]:
                del self.subs[cid]
            for pid in [p for p, w in self.producer_writers.items() if w is writer]:
                del self.producer_writers[pid]
                self.producer_topics.pop(pid, None)
            self.connections_closed += 1
            self._changed.set()
            writer.close()

    def _close_at_once(self) -> bool:
        if self.close_after_answer <= 0:
            return False
        self.close_after_answer -= 1
        return True

    def _reply(self, writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
        writer.write(encode_frame(frame))

    def _handle(self, f: dict[str, Any], w: asyncio.StreamWriter) -> None:
        t = f["t"]
        rid = f.get("rid")
        if t in self.errors:
            code, message = self.errors[t]
            self._reply(w, cmds.error_frame(rid, code, message))
            return
        failure = self.failures.get(t)
        if failure is not None and failure[1] > 0:
            failure[1] -= 1
            if t == cmds.SEND:
                error = {"t": cmds.SEND_ERROR, "producer_id": f["producer_id"], "seq": f["seq"]}
                self._reply(w, {**error, "code": failure[0], "message": "injected"})
            else:
                self._reply(w, cmds.error_frame(rid, failure[0], "injected"))
            return
        if t == cmds.CONNECT:
            self._reply(
                w,
                {
                    "t": cmds.CONNECTED,
                    "rid": rid,
                    "server_version": "fake",
                    "protocol_version": 1,
                    "max_message_size": self.max_message_size,
                },
            )
        elif t == cmds.LOOKUP:
            url, redirect = self.lookups.get(f["topic"], (self.url, False))
            self._reply(w, {"t": cmds.LOOKUP_RESPONSE, "rid": rid, "broker_url": url, "redirect": redirect})
        elif t == cmds.PARTITIONED_METADATA:
            n = self.partitions.get(f["topic"], 0)
            self._reply(w, {"t": cmds.PARTITIONED_METADATA_RESPONSE, "rid": rid, "partitions": n})
        elif t == cmds.PRODUCER:
            self.logs.setdefault(f["topic"], [])
            self.producer_topics[f["producer_id"]] = f["topic"]
            self.producer_writers[f["producer_id"]] = w
            answer = {
                "t": cmds.PRODUCER_SUCCESS,
                "rid": rid,
                "producer_name": f.get("producer_name") or f"fake-{f['producer_id']}",
                "last_sequence_id": -1,
            }
            if self._close_at_once():
                del self.producer_writers[f["producer_id"]], self.producer_topics[f["producer_id"]]
                pushed = {"t": cmds.CLOSE_PRODUCER, "producer_id": f["producer_id"]}
                w.write(encode_frame(answer) + encode_frame(pushed))  # one write: read in one chunk
                return
            self._reply(w, answer)
        elif t == cmds.SEND:
            pid, seq = f["producer_id"], f["seq"]
            if len(f["payload"]) > self.max_message_size:
                self._reply(
                    w,
                    {
                        "t": cmds.SEND_ERROR,
                        "producer_id": pid,
                        "seq": seq,
                        "code": "MessageTooLarge",
                        "message": "too large",
                    },
                )
                return
            if crc32c(f["payload"]) != f["meta"]["crc"]:
                self._reply(
                    w,
                    {
                        "t": cmds.SEND_ERROR,
                        "producer_id": pid,
                        "seq": seq,
                        "code": "ChecksumError",
                        "message": "bad crc",
                    },
                )
                return
            topic = self.producer_topics.get(pid)
            if topic is None:  # as the broker does for a producer it no longer has
                self._reply(
                    w,
                    {"t": cmds.SEND_ERROR, "producer_id": pid, "seq": seq, "code": "AlreadyClosed", "message": "gone"},
                )
                return
            log = self.logs[topic]
            log.append((f["meta"], f["payload"]))
            if not self.hold_receipts:
                self._reply(
                    w,
                    {
                        "t": cmds.SEND_RECEIPT,
                        "producer_id": pid,
                        "seq": seq,
                        "ledger": self.LEDGER,
                        "entry": len(log) - 1,
                    },
                )
            self._dispatch()
        elif t == cmds.SUBSCRIBE:
            log = self.logs.setdefault(f["topic"], [])
            key = (f["topic"], f["subscription"])
            if key not in self.sub_start:
                self.sub_start[key] = 0 if f.get("initial_position") == "Earliest" else len(log)
                self.sub_acked[key] = set()
            self.subs[f["consumer_id"]] = FakeSub(
                f["consumer_id"],
                w,
                f["topic"],
                self.sub_start[key],
                sub_type=f["sub_type"],
                subscription=f["subscription"],
            )
            if self._close_at_once():
                del self.subs[f["consumer_id"]]
                pushed = {"t": cmds.CLOSE_CONSUMER, "consumer_id": f["consumer_id"]}
                w.write(encode_frame({"t": cmds.SUCCESS, "rid": rid}) + encode_frame(pushed))
                return
            self._reply(w, {"t": cmds.SUCCESS, "rid": rid})
        elif t == cmds.FLOW:
            if f["consumer_id"] in self.subs:
                self.subs[f["consumer_id"]].permits += f["permits"]
                self._dispatch()
        elif t == cmds.ACK:
            sub = self.subs.get(f["consumer_id"])
            if sub is not None:
                acked = self.sub_acked[(sub.topic, sub.subscription)]
                if f["kind"] == "cumulative":
                    acked.update(range(f["positions"][0][1] + 1))
                else:
                    acked.update(e for _, e in f["positions"])
            if rid is not None:
                if self.hold_acks:
                    self.held_acks.append((w, rid))
                else:
                    self._reply(w, {"t": cmds.ACK_RESPONSE, "rid": rid})
        elif t == cmds.REDELIVER:
            sub = self.subs.get(f["consumer_id"])
            for ledger, entry in (f.get("positions") or []) if sub is not None else []:
                assert ledger == self.LEDGER
                sub.redelivery[entry] = sub.redelivery.get(entry, 0) + 1
                self.push(sub.consumer_id, entry, redelivery_count=sub.redelivery[entry])
        elif t in (cmds.CLOSE_PRODUCER, cmds.CLOSE_CONSUMER, cmds.UNSUBSCRIBE):
            if t != cmds.CLOSE_PRODUCER:
                self.subs.pop(f["consumer_id"], None)
            self._reply(w, {"t": cmds.SUCCESS, "rid": rid})
        elif t == cmds.PING:
            self._reply(w, {"t": cmds.PONG})

    def release_acks(self) -> None:
        """Answer the acks held back by ``hold_acks`` (as if they just became durable)."""
        self.hold_acks = False
        for w, rid in self.held_acks:
            self._reply(w, {"t": cmds.ACK_RESPONSE, "rid": rid})
        self.held_acks.clear()

    def _dispatch(self) -> None:
        for sub in self.subs.values():
            log = self.logs.get(sub.topic, [])
            acked = self.sub_acked.get((sub.topic, sub.subscription), set())
            while sub.permits > 0 and sub.cursor < len(log):
                if sub.cursor in acked:
                    sub.cursor += 1
                    continue
                meta, _ = log[sub.cursor]
                self.push(sub.consumer_id, sub.cursor)
                sub.permits -= meta["n"]
                sub.cursor += 1

    def push(self, consumer_id: int, entry: int, *, redelivery_count: int = 0, payload: bytes | None = None) -> None:
        """Push entry ``entry`` of the consumer's topic (optionally with a replaced payload)."""
        sub = self.subs[consumer_id]
        meta, stored = self.logs[sub.topic][entry]
        self._reply(
            sub.writer,
            {
                "t": cmds.MESSAGE,
                "consumer_id": consumer_id,
                "ledger": self.LEDGER,
                "entry": entry,
                "meta": meta,
                "payload": stored if payload is None else payload,
                "redelivery_count": redelivery_count,
            },
        )


def record_sleeps(client: Any) -> list[float]:
    """Make the client's backoff waits instant and return the list of delays it asked for."""
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    client._sleep = sleep
    return delays


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    broker = FakeBroker()
    await broker.start()
    yield broker
    await broker.stop()


@pytest.fixture
async def broker_factory() -> AsyncIterator[Callable[..., Any]]:
    started: list[FakeBroker] = []

    async def make(**kwargs: Any) -> FakeBroker:
        b = FakeBroker(**kwargs)
        await b.start()
        started.append(b)
        return b

    yield make
    for b in started:
        await b.stop()


class ThreadedFakeBroker:
    """The fake broker on its own loop thread, for tests of the blocking client (whose calls
    block the test's thread, so the fake cannot share that thread's loop)."""

    def __init__(self) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.broker = self.call(self._start())

    async def _start(self) -> FakeBroker:
        b = FakeBroker()
        await b.start()
        return b

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self) -> None:
        self.call(self.broker.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


@pytest.fixture
def threaded_broker() -> Any:
    tb = ThreadedFakeBroker()
    yield tb
    tb.close()
