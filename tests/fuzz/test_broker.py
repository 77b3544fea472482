"""Fuzz every command handler of the broker over real TCP, against a real standalone process.

Why: the broker reads commands from anyone who can reach its port. Each session is one TCP
connection that pipelines, in one write, an optional ``connect`` (so commands also arrive before
it), usually a producer on a real topic, then up to ``2 * SESSION_FRAMES`` commands of every type
the broker serves (and some it does not), with ids from small pools so that they hit each other's
producers and consumers, in any order, with edge values (negative and 64-bit ids, unknown topics,
odd strings); then, half the time, one malformed frame (a command with a field dropped or of the
wrong type, an unknown ``t``, not a map, garbage bytes, an oversized length prefix); then a
``ping``. Several sessions run at once. Properties:

- the broker never crashes: its process is alive and a fresh connection is answered after every
  session and at the end, and its log shows no unexpected exception (a traceback);
- every request is answered at most once (rids and ``(producer_id, seq)`` are unique), and, when
  the connection stays open, exactly once; an error never has code ``UnknownError`` (an exception
  the handler did not expect);
- a connection the broker closes ends with one ``error`` frame, and only that connection closes;
- a refused message is never stored: after the run every topic is read from the start, and no
  payload that got a ``send_error`` (or whose frame closed the connection) is there, while every
  payload that got a ``send_receipt`` is, at the position the receipt gave.

Inputs counted: the frames the broker read (a session closed early counts up to the last frame
answered, plus the one that closed it), not the frames discarded after a close.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.fuzz.conftest import Figures, fuzz_examples, fuzz_timeout, log_problems
from tests.fuzz.values import any_int, any_text, any_value, mutate_map
from tests.protocol.wire import address
from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.protocol import commands as c
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.framing import FrameDecoder, encode_frames

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]
# Random bytes, not a frame: their first 4 bytes may announce a frame that never ends, so the server
# rightly waits for the rest; the session then half-closes and expects no answer after them.
GARBAGE = object()

NS = "public/fuzz"
TOPICS = [f"persistent://{NS}/t0", f"persistent://{NS}/t1"]
SESSION_FRAMES = 60  # mean commands per session, pipelined in one write
WORKERS = 6  # sessions at once
ANSWER_DEADLINE = 60.0  # a request unanswered this long after its session's last frame is a failure
TAG = b"FZ"


@dataclass
class Ledger:
    """What happened to every tagged payload sent: acknowledged where, refused, or unknown."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)
    sent: set[int] = field(default_factory=set)
    codes: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    where: dict[int, str] = field(default_factory=dict)  # seq -> its session's commands, for a failure report


class Generator:
    """Commands of every type, from a seeded random source, with colliding ids."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next_rid = 1
        self.next_seq = 1

    def rid(self) -> int:
        self.next_rid += 1
        return self.next_rid

    def pid(self) -> int:
        return self.rng.choice([1, 1, 1, 1, 1, 2, 3]) if self.rng.random() < 0.95 else any_int(self.rng)

    def cid(self) -> int:
        return self.rng.choice([1, 1, 2, 3]) if self.rng.random() < 0.95 else any_int(self.rng)

    def topic(self) -> str:
        r = self.rng.random()
        if r < 0.8:
            return self.rng.choice(TOPICS)
        if r < 0.85:
            return f"non-persistent://{NS}/np"
        if r < 0.9:
            return "persistent://nobody/none/x"
        return any_text(self.rng)

    def position(self) -> list[int]:
        rng = self.rng
        if rng.random() < 0.8:
            return [rng.randrange(0, 20), rng.randrange(-1, 50)]
        return [any_int(rng), any_int(rng)]

    def send(self) -> tuple[dict[str, Any], int]:
        rng = self.rng
        seq = self.next_seq
        self.next_seq += 1
        payload = TAG + seq.to_bytes(8, "big") + rng.randbytes(rng.randrange(0, 64))
        meta: dict[str, Any] = {"crc": crc32c(payload) if rng.random() < 0.95 else rng.randrange(2**32)}
        for key, make in (
            ("pn", lambda: rng.choice(["p", any_text(rng)])),
            ("seq", lambda: seq),
            ("n", lambda: rng.choice([1, 1, 2, 0, -1, 2**63 - 1])),
            ("comp", lambda: rng.choice([0, 1, 2, 3, 4, 9])),
            ("usize", lambda: rng.choice([len(payload), 0, 2**40])),
            ("pt", lambda: rng.choice([0, 1_700_000_000_000, -1, 2**63 - 1])),
            ("b", lambda: rng.random() < 0.5),
            ("k", lambda: any_text(rng)),
            ("dt", lambda: rng.choice([0, 1, 2**63 - 1, -5])),
            ("hs", lambda: rng.choice([seq, seq + 5, -1])),
            ("sv", lambda: rng.choice([0, 1, 99, -1])),
            ("cx", lambda: [rng.randrange(-2, 5)]),
        ):
            if rng.random() < 0.15:
                meta[key] = make()
        return c.send(self.pid(), seq, meta, payload), seq  # type: ignore[arg-type]

    def command(self) -> tuple[Any, int | None]:
        """One well-typed command (maybe with edge values) and the send seq it carries, if any."""
        rng = self.rng
        kind = rng.randrange(21)
        if kind <= 4:
            return self.send()
        cmd: Any
        if kind == 5:
            cmd = c.producer(self.topic(), self.pid(), rng.choice([None, "p", any_text(rng)]), self.rid())
            if rng.random() < 0.05:
                cmd["access_mode"] = rng.choice(["Shared", "Exclusive", "ExclusiveWithFencing", any_text(rng)])
            if rng.random() < 0.1:
                cmd["epoch"] = any_int(rng)
            if rng.random() < 0.1:
                cmd["metadata"] = {any_text(rng): any_text(rng)}
            if rng.random() < 0.1:
                cmd["schema"] = {"type": rng.choice(["STRING", "AVRO", "JSON", "BYTES", "nope"]), "schema": b"{}"}
        elif kind == 6:
            cmd = c.subscribe(
                self.topic(),
                rng.choice(["s1", "s2", "s3", any_text(rng)]),
                self.cid(),
                rng.choice([c.SUB_EXCLUSIVE, c.SUB_SHARED, c.SUB_FAILOVER, c.SUB_KEY_SHARED, "Other"]),
                rng.choice(["Earliest", "Latest", "x"]),
                None,
                self.rid(),
            )
            for key, make in (
                ("priority_level", lambda: any_int(rng)),
                ("key_shared_mode", lambda: rng.choice([c.KEY_SHARED_STICKY, c.KEY_SHARED_AUTO_SPLIT, "x"])),
                ("key_ranges", lambda: [[rng.randrange(-5, 70000), rng.randrange(-5, 70000)]]),
                ("durable", lambda: rng.random() < 0.5),
                ("start_message_id", lambda: [*self.position(), rng.randrange(-1, 3)]),
                ("start_inclusive", lambda: rng.random() < 0.5),
                ("read_compacted", lambda: rng.random() < 0.5),
                ("properties", lambda: {any_text(rng): any_text(rng)}),
                ("schema", lambda: {"type": "STRING", "schema": b""}),
            ):
                if rng.random() < 0.1:
                    cmd[key] = make()
        elif kind == 7:
            cmd = c.flow(self.cid(), rng.choice([1, 10, 1000, 0, -1, 2**31, 2**63 - 1]))
        elif kind == 8:
            cmd = c.ack(
                self.cid(),
                rng.choice([c.ACK_INDIVIDUAL, c.ACK_CUMULATIVE, "x"]),
                [self.position() for _ in range(rng.randrange(0, 4))],
                rng.choice([None, self.rid()]),
            )
            if rng.random() < 0.2:
                cmd["batch_acks"] = [[*self.position(), rng.randrange(-1, 5), [rng.randrange(-1, 5)]]]
        elif kind == 9:
            cmd = c.redeliver(self.cid(), rng.choice([None, [self.position()]]))
        elif kind == 10:
            cmd = c.close_producer(self.pid(), self.rid())
        elif kind == 11:
            cmd = c.close_consumer(self.cid(), self.rid())
        elif kind == 12:
            cmd = c.unsubscribe(self.cid(), self.rid())
        elif kind == 13:
            cmd = c.seek(self.cid(), self.position(), self.rid())
        elif kind == 14:
            cmd = c.seek_publish_time(self.cid(), rng.choice([0, -1, 2**63 - 1, 1_700_000_000_000]), self.rid())
        elif kind == 15:
            cmd = c.get_last_message_id(self.cid(), self.rid())
        elif kind == 16:
            ns = rng.choice([NS, "public/default", "nobody/none", any_text(rng)])
            cmd = c.get_topics_of_namespace(ns, self.rid(), mode=rng.choice([c.TOPICS_ALL, c.TOPICS_PERSISTENT, "x"]))
        elif kind == 17:
            cmd = c.get_schema(self.topic(), rng.choice([None, 0, 1, -1, 2**63]), self.rid())
        elif kind == 18:
            cmd = rng.choice([c.lookup(self.topic(), self.rid()), c.partitioned_metadata(self.topic(), self.rid())])
        elif kind == 19:
            cmd = rng.choice([c.ping(), c.pong(), c.connect("fuzz", rng.choice([1, 0, 99]), self.rid())])
        else:
            cmd = c.auth_response(rng.choice(["token", any_text(rng)]), rng.randbytes(8))
        return cmd, None

    def malformed(self) -> tuple[bytes, Any, int | None]:
        """One bad frame (as bytes), the command it was made from (or None), and its send seq."""
        rng = self.rng
        r = rng.random()
        if r < 0.75:
            cmd, seq = self.command()
            bad = mutate_map(rng, cmd, c.REQUIRED_FIELDS.get(cmd["t"], ()))
            if seq is not None and bad.get("seq") != seq:
                seq = None  # the mutation hit ``seq``: its answer cannot be told apart
            return encode_frames([bad]), bad, seq
        if r < 0.85:
            return encode_frames([any_value(rng)]), None, None
        if r < 0.95:
            return rng.randbytes(rng.randrange(1, 40)), GARBAGE, None
        return rng.choice([2**31, 2**32 - 1, 6 << 20]).to_bytes(4, "big") + b"\x00" * 8, None, None


def _is(frame: Any, t: str) -> bool:
    return isinstance(frame, dict) and frame.get("t") == t


class Session:
    """One connection: frames written, answers read and matched to what was sent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, book: Ledger) -> None:
        self.reader, self.writer, self.book = reader, writer, book
        self.decoder = FrameDecoder(64 << 20)
        self.cmds: list[Any] = []
        self.rids: dict[int, int] = {}  # rid -> index of its command
        self.seqs: dict[int, int] = {}  # send seq -> index of its command
        self.got_rids: Counter[int] = Counter()
        self.got_seqs: Counter[int] = Counter()
        self.pings = self.pongs = 0
        self.highest = -1  # index of the last command known to be read
        self.last: Any = None
        self.closed = False
        self.topic_of: dict[Any, str] = {}  # producer id -> topic, from each producer_success

    def queue(self, cmd: Any, seq: int | None = None) -> None:
        i = len(self.cmds)
        self.cmds.append(cmd)
        if isinstance(cmd, dict):
            if isinstance(cmd.get("rid"), int):
                self.rids[cmd["rid"]] = i
            if cmd.get("t") == c.PING:
                self.pings += 1
        if seq is not None:
            self.seqs[seq] = i
            self.book.sent.add(seq)

    def done(self) -> bool:
        if self.pings >= 1 << 30:  # after garbage: only the broker's close ends the session
            return False
        return (
            self.pongs >= self.pings and set(self.rids) <= set(self.got_rids) and set(self.seqs) <= set(self.got_seqs)
        )

    async def settle(self) -> None:
        """Read until every request so far is answered, or the broker closed the connection."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ANSWER_DEADLINE
        while not self.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                missing = (
                    sorted(set(self.rids) - set(self.got_rids))[:5],
                    sorted(set(self.seqs) - set(self.got_seqs))[:5],
                )
                what = [self.cmds[self.rids[r]] for r in missing[0]] + [self.cmds[self.seqs[s]] for s in missing[1]]
                pytest.fail(f"unanswered after {ANSWER_DEADLINE}s (pongs {self.pongs}/{self.pings}): {what!r:.2000}")
            try:
                chunk = await asyncio.wait_for(self.reader.read(1 << 20), remaining)
            except (TimeoutError, ConnectionError):
                continue
            if not chunk:
                self.closed = True
                return
            for frame in self.decoder.feed(chunk):
                self.take(frame)

    def take(self, frame: Any) -> None:
        self.last = frame
        book = self.book
        if not isinstance(frame, dict):
            return
        t = frame.get("t")
        if t == c.PONG:
            self.pongs += 1
        elif t in (c.SEND_RECEIPT, c.SEND_ERROR):
            seq = frame["seq"]
            if not isinstance(seq, int) or seq not in self.seqs:
                return  # the answer to a send whose seq was mutated
            self.got_seqs[seq] += 1
            assert self.got_seqs[seq] == 1, f"two answers to send seq {seq}: {frame}"
            self.highest = max(self.highest, self.seqs[seq])
            if t == c.SEND_RECEIPT and self.topic_of.get(frame["producer_id"]) in TOPICS:
                book.acked[seq] = (frame["ledger"], frame["entry"])
                book.where[seq] = f"{self.topic_of} " + repr(
                    [
                        (
                            i,
                            {k: v for k, v in cmd.items() if k != "payload"},
                            self.got_rids.get(cmd["rid"], "-") if isinstance(cmd.get("rid"), int) else "-",
                        )
                        for i, cmd in enumerate(self.cmds)
                        if isinstance(cmd, dict)
                        and (cmd.get("t") in (c.PRODUCER, c.CLOSE_PRODUCER) or cmd.get("seq") == seq)
                    ]
                )
            elif t == c.SEND_RECEIPT:  # a non-persistent topic, or one that a random name hit
                book.codes["receipt from another topic"] += 1  # not read back
            else:
                book.refused.add(seq)
                book.codes[frame["code"]] += 1
                if frame["code"] == "UnknownError":
                    book.unexpected.append(f"{frame} for {self.cmds[self.seqs[seq]]!r:.500}")
        elif t not in (c.MESSAGE, c.ACTIVE_CONSUMER_CHANGE, "close_producer", "close_consumer", c.AUTH_CHALLENGE):
            rid = frame.get("rid")
            known = isinstance(rid, int) and rid in self.rids
            if t == c.ERROR:
                book.codes[str(frame.get("code"))] += 1
                if frame.get("code") == "UnknownError":
                    book.unexpected.append(f"{frame} for {self.cmds[self.rids[rid]] if known else None!r:.500}")
            if known and t == c.PRODUCER_SUCCESS:
                cmd = self.cmds[self.rids[rid]]
                self.topic_of[cmd["producer_id"]] = str(cmd["topic"])
            if known:
                self.got_rids[rid] += 1
                assert self.got_rids[rid] == 1, f"two answers to rid {rid}: {frame}"
                self.highest = max(self.highest, self.rids[rid])


async def run_session(gen: Generator, host: str, port: int, book: Ledger) -> int:
    """One connection's worth of commands; returns how many frames the broker read.

    First (usually) a ``connect``, a producer and a consumer, answered before going on (a real
    client waits for them too, and sends then reach a producer); then the pipelined commands."""
    rng = gen.rng
    reader, writer = await asyncio.open_connection(host, port)
    session = Session(reader, writer, book)
    try:
        if rng.random() < 0.9:
            session.queue(c.connect("fuzz", c.PROTOCOL_VERSION, gen.rid()))
        if rng.random() < 0.8:
            session.queue(c.producer(rng.choice(TOPICS), 1, None, gen.rid()))
        if rng.random() < 0.3:
            sub = c.subscribe(
                rng.choice(TOPICS), rng.choice(["s1", "s2"]), 1, c.SUB_SHARED, "Earliest", None, gen.rid()
            )
            session.queue(sub)
        if session.cmds:
            writer.write(encode_frames(session.cmds))
            await session.settle()
        if session.closed:
            return max(session.highest + 2, 1)
        first = len(session.cmds)
        for _ in range(rng.randrange(0, 2 * SESSION_FRAMES)):
            session.queue(*gen.command())
        data = encode_frames(session.cmds[first:])
        bad_seq = None
        garbage = False
        if rng.random() < 0.5:
            raw, bad, bad_seq = gen.malformed()
            payload = bad.get("payload") if isinstance(bad, dict) else None
            if isinstance(payload, bytes) and payload.startswith(TAG) and len(payload) >= 10:
                book.sent.add(int.from_bytes(payload[2:10], "big"))  # sent, even when its seq was mutated
            data += raw
            session.queue(bad, bad_seq)
        garbage = session.cmds[-1] is GARBAGE if session.cmds else False
        if not garbage:
            data += encode_frames([c.ping()])
            session.pings += 1
        writer.write(data)
        if garbage:
            writer.write_eof()  # the broker drops a connection that ends mid-frame
            session.pings = 1 << 30  # nothing is awaited: read until the broker closes
        await session.settle()
    finally:
        writer.close()
        await asyncio.gather(writer.wait_closed(), return_exceptions=True)
    if session.closed and garbage:
        return min(len(session.cmds), max(session.highest + 2, 1))
    if session.closed:
        # The broker closed the connection: it must say why, in one error frame at the end.
        last = session.last
        assert _is(last, c.ERROR) and last.get("code") != "UnknownError", (
            f"closed without an error frame (last frame {last!r}); the session's commands: {session.cmds!r:.3000}"
        )
        if bad_seq is not None and bad_seq not in session.got_seqs:
            book.refused.add(bad_seq)  # its frame closed the connection: the send was refused
        return min(len(session.cmds), max(session.highest + 2, 1))
    return len(session.cmds) + 1


async def fresh_connection_answers(host: str, port: int) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(encode_frames([c.connect("probe", c.PROTOCOL_VERSION, 1), c.ping()]))
        decoder, frames = FrameDecoder(), []
        while not any(_is(f, c.PONG) for f in frames):
            chunk = await asyncio.wait_for(reader.read(1 << 16), 30)
            assert chunk, "the broker closed a fresh connection"
            frames += decoder.feed(chunk)
        assert _is(frames[0], c.CONNECTED), frames
    finally:
        writer.close()


async def read_back(host: str, port: int, topic: str) -> dict[int, tuple[int, int]]:
    """Every tagged payload stored in ``topic`` (seq -> position), read from the start."""
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder(64 << 20)
    inbox: list[Any] = []

    async def next_frame(match: Any) -> Any:
        while True:
            for i, f in enumerate(inbox):
                if match(f):
                    return inbox.pop(i)
            chunk = await asyncio.wait_for(reader.read(1 << 20), 60)
            assert chunk, f"read-back connection closed: {inbox[-3:]}"
            inbox.extend(decoder.feed(chunk))

    try:
        sub = f"readback-{random.randrange(1 << 30)}"
        writer.write(encode_frames([c.connect("readback", c.PROTOCOL_VERSION, 1)]))
        await next_frame(lambda f: _is(f, c.CONNECTED))
        writer.write(encode_frames([c.subscribe(topic, sub, 99, c.SUB_EXCLUSIVE, "Earliest", None, 2)]))
        answer = await next_frame(lambda f: f.get("rid") == 2)
        assert _is(answer, c.SUCCESS), answer
        writer.write(encode_frames([c.get_last_message_id(99, 3)]))
        last = await next_frame(lambda f: f.get("rid") == 3)
        assert _is(last, c.LAST_MESSAGE_ID_RESPONSE), last
        end = (last["ledger"], last["entry"])
        writer.write(encode_frames([c.flow(99, 1 << 30)]))
        stored: dict[int, tuple[int, int]] = {}
        pos = (-1, -1)
        while pos < end and end[1] >= 0:
            msg = await next_frame(lambda f: _is(f, c.MESSAGE))
            pos = (msg["ledger"], msg["entry"])
            payload = msg["payload"]
            if isinstance(payload, bytes) and payload.startswith(TAG) and len(payload) >= 10:
                stored[int.from_bytes(payload[2:10], "big")] = pos
        return stored
    finally:
        writer.close()


def test_broker_commands(fuzz_standalone: StandaloneProcess, figures: Figures) -> None:
    sa = fuzz_standalone
    assert admin_call(sa, "PUT", f"/admin/v2/namespaces/{NS}")[0] in (204, 409)
    status, body = admin_call(
        sa, "POST", f"/admin/v2/namespaces/{NS}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    )
    assert status < 300, body  # nothing acknowledged may age out before the read-back
    log_offset = sa.log_path.stat().st_size
    host, port = address(sa.service_url)
    total = fuzz_examples()
    book = Ledger()
    rng = random.Random(figures.seed)

    async def worker(gen: Generator) -> None:
        while figures.inputs < total:
            figures.inputs += await run_session(gen, host, port, book)
            figures.bump("sessions")
            assert sa.proc is not None and sa.proc.poll() is None, "the broker process died"

    # Each worker numbers its own rids and seqs: give them disjoint ranges, none starting at 0. A
    # mutation may set a frame's rid or seq to an edge integer (values.EDGE_INTS: 128, 256, ...);
    # had a worker's own numbers reached it, the mutated frame's answer would pass for a second
    # answer to the earlier command (seed 203146: a send mutated to seq 128 on a connection that
    # had sent seq 128). From 2**48 up no edge integer is reached (the next is 2**53 + 1).
    gens = [Generator(random.Random(rng.random())) for _ in range(WORKERS)]
    for i, g in enumerate(gens):
        g.next_rid = g.next_seq = (i + 1) << 48

    async def main() -> None:
        await asyncio.gather(*(worker(g) for g in gens))
        await fresh_connection_answers(host, port)

    asyncio.run(main())
    figures.extra.update(acked=len(book.acked), refused=len(book.refused), sent=len(book.sent))
    print("FUZZ broker error codes:", dict(book.codes))

    assert not book.unexpected, f"{len(book.unexpected)} UnknownError answers, e.g. {book.unexpected[:5]}"
    stored: dict[int, tuple[int, int]] = {}
    for topic in TOPICS:
        stored.update(asyncio.run(read_back(host, port, topic)))
    refused_stored = sorted(set(stored) & book.refused)
    assert not refused_stored, f"refused messages were stored: seqs {refused_stored[:10]}"
    lost = {s: (p, stored.get(s)) for s, p in book.acked.items() if stored.get(s) != p}
    at = {p: s for s, p in stored.items()}
    detail = [(s, p, q, at.get(p), book.where.get(s)) for s, (p, q) in list(lost.items())[:10]]
    assert not lost, (
        f"acknowledged messages missing or moved (seq, acked at, stored at, seq stored there, how): {detail}"
    )
    assert set(stored) <= book.sent, "a stored payload that was never sent"
    figures.extra.update(stored=len(stored))
    problems = log_problems(sa.log_path, log_offset)
    assert not problems, f"unexpected exceptions in the broker log: {problems[:10]}"
