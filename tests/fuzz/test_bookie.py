"""Fuzz every ``bk_*`` handler of a real bookie over TCP (the bookie of a standalone process).

Why: a bookie stores what any client on its port sends; a hostile or broken frame must be refused
without storing anything and without disturbing other connections. Each session is one
connection that pipelines up to ``2 * SESSION_FRAMES`` commands (adds, reads with and without
fencing, LAC reads, fences, deletes, auth) on a few ledgers, with edge values (negative and
64-bit ids and LACs, recovery adds, wrong CRCs), then, half the time, one malformed frame, then a
``bk_read_lac`` sentinel. Several workers run at once, each on its own ledgers (plus shared edge
ids). Properties:

- the bookie never crashes: the standalone is alive and a fresh connection is answered;
- every request is answered at most once, exactly once when its connection stays open, never with
  ``UnknownError`` or ``PersistenceError`` (no disk fault is injected); a closed connection ends
  with one ``error`` frame;
- no refused add is stored, and every acknowledged add is: after the run every key is read back
  and holds the data of the last acknowledged add (or of an add whose answer was lost with its
  connection), never that of a refused one; deleted ledgers hold nothing acknowledged before.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from tests.fuzz.conftest import Figures, fuzz_examples, fuzz_timeout, log_problems
from tests.fuzz.values import any_int, any_value, mutate_map
from tests.protocol.wire import address
from tests.support.standalone import StandaloneProcess

from magnetar.protocol import commands as c
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.framing import FrameDecoder, encode_frames

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]
# Random bytes, not a frame: their first 4 bytes may announce a frame that never ends, so the server
# rightly waits for the rest; the session then half-closes and expects no answer after them.
GARBAGE = object()
# Answers that blame the bookie, not the request: no disk fault is injected here, so each is a bug
# (PersistenceError was how one add with an out-of-range lac failed every add of its group commit).
SERVER_FAULTS = {"UnknownError", "PersistenceError"}

SESSION_FRAMES = 60
WORKERS = 4
LEDGERS_PER_WORKER = 16
ANSWER_DEADLINE = 60.0
TAG = b"BZ"


@dataclass
class Model:
    """One worker's view of its own ledgers, from the answers in the order the bookie applied them."""

    value: dict[tuple[int, int], int] = field(default_factory=dict)  # key -> tag of the last acked add
    maybe: dict[tuple[int, int], set[int | None]] = field(default_factory=dict)  # adds with a lost answer
    refused: dict[int, tuple[int, int]] = field(default_factory=dict)  # tag -> key
    codes: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)


class Generator:
    def __init__(self, rng: random.Random, worker: int) -> None:
        self.rng = rng
        self.base = (worker + 1) << 40
        # From 2**48 up, not 0: a mutation may set a rid to an edge integer (128, 256, ...), and one
        # a session had already used would make its answer look like a second answer to that rid.
        self.next_rid = (worker + 1) << 48
        self.next_tag = (worker + 1) << 48

    def rid(self) -> int:
        self.next_rid += 1
        return self.next_rid

    def ledger(self) -> int:
        if self.rng.random() < 0.95:
            return self.base + self.rng.randrange(LEDGERS_PER_WORKER)
        return self.rng.choice([-1, 0, 2**63 - 1, 2**64 - 1, -(2**63)])

    def entry(self) -> int:
        return self.rng.randrange(0, 20) if self.rng.random() < 0.95 else self.rng.choice([-1, 2**64 - 1, -(2**63)])

    def add(self) -> tuple[dict[str, Any], int]:
        rng = self.rng
        self.next_tag += 1
        data = TAG + self.next_tag.to_bytes(8, "big") + rng.randbytes(rng.randrange(0, 48))
        crc = crc32c(data) if rng.random() < 0.9 else rng.choice([0, 2**32 - 1, -1, 2**63])
        entry = self.entry()
        lac = rng.choice([-1, max(entry - 1, -1), 0]) if rng.random() < 0.9 and entry >= 0 else any_int(rng)
        cmd = c.bk_add(self.ledger(), entry, data, crc, lac, rng.random() < 0.1, self.rid())
        return dict(cmd), self.next_tag

    def command(self) -> tuple[dict[str, Any], int | None]:
        rng = self.rng
        r = rng.random()
        if r < 0.55:
            return self.add()
        cmd: Any
        if r < 0.78:
            cmd = c.bk_read(self.ledger(), self.entry(), rng.random() < 0.02, self.rid())
        elif r < 0.9:
            cmd = c.bk_read_lac(self.ledger(), self.rid())
        elif r < 0.91:
            cmd = c.bk_fence(self.ledger(), self.rid())
        elif r < 0.95:
            cmd = c.bk_delete(self.ledger(), self.rid())
        else:
            cmd = c.bk_auth(rng.choice(["token", ""]), rng.randbytes(8), self.rid())
        return dict(cmd), None

    def malformed(self) -> tuple[bytes, Any, int | None]:
        rng = self.rng
        r = rng.random()
        if r < 0.75:
            cmd, tag = self.command()
            if rng.random() < 0.3:
                cmd["t"] = rng.choice([c.SEND, c.CONNECT, "bk_nope", c.BK_RESPONSE])
                bad = cmd
            else:
                bad = mutate_map(rng, cmd, c.REQUIRED_FIELDS.get(cmd["t"], ()))
            return encode_frames([bad]), bad, tag
        if r < 0.85:
            return encode_frames([any_value(rng)]), None, None
        if r < 0.95:
            return rng.randbytes(rng.randrange(1, 40)), GARBAGE, None
        return rng.choice([2**31, 2**32 - 1, 6 << 20]).to_bytes(4, "big") + b"\x00" * 8, None, None


def _key_of(cmd: Any) -> tuple[int, int] | None:
    if isinstance(cmd, dict) and isinstance(cmd.get("ledger"), int) and isinstance(cmd.get("entry"), int):
        return cmd["ledger"], cmd["entry"]
    return None


async def run_session(gen: Generator, host: str, port: int, model: Model) -> int:
    rng = gen.rng
    cmds: list[Any] = []
    tags: dict[int, int] = {}  # index -> tag of an add
    for _ in range(rng.randrange(0, 2 * SESSION_FRAMES)):
        cmd, tag = gen.command()
        if tag is not None:
            tags[len(cmds)] = tag
        cmds.append(cmd)
    data = encode_frames(cmds)
    if rng.random() < 0.5:
        raw, bad, tag = gen.malformed()
        if tag is not None:
            tags[len(cmds)] = tag
        data += raw
        cmds.append(bad)
    garbage = bool(cmds) and cmds[-1] is GARBAGE
    sentinel = gen.rid()
    if not garbage:
        data += encode_frames([c.bk_read_lac(gen.base, sentinel)])
    rids = {cmd["rid"]: i for i, cmd in enumerate(cmds) if isinstance(cmd, dict) and isinstance(cmd.get("rid"), int)}
    rids[sentinel] = len(cmds)  # after garbage never answered: the session reads until the bookie closes
    answers: dict[int, dict[str, Any]] = {}  # index -> answer
    last: Any = None
    closed = False
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder(64 << 20)
    try:
        writer.write(data)
        if garbage:
            writer.write_eof()  # the bookie drops a connection that ends mid-frame
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ANSWER_DEADLINE
        while len(answers) < len(rids):
            remaining = deadline - loop.time()
            if remaining <= 0:
                missing = [r for r, i in rids.items() if i not in answers][:5]
                what = [cmds[rids[r]] for r in missing if rids[r] < len(cmds)]
                pytest.fail(f"bookie left rids {missing} unanswered; commands {what!r:.1500}")
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 20), remaining)
            except (TimeoutError, ConnectionError):
                continue
            if not chunk:
                closed = True
                break
            for frame in decoder.feed(chunk):
                last = frame
                if not isinstance(frame, dict):
                    continue
                code = str(frame.get("code"))
                if code != c.BK_OK:
                    model.codes[code] += 1
                rid = frame.get("rid")
                if frame.get("t") == c.ERROR:
                    continue  # the connection-level error of a malformed frame: checked at the close
                assert rid in rids, f"an answer to a rid never sent: {frame}"
                i = rids[rid]
                assert i not in answers, f"two answers to rid {rid}: {answers[i]} and {frame}"
                answers[i] = frame
                if code in SERVER_FAULTS:
                    model.unexpected.append(f"{frame} for {cmds[i]!r:.300}")
    finally:
        writer.close()
        await asyncio.gather(writer.wait_closed(), return_exceptions=True)
    if closed and len(answers) < len(rids) and not garbage:
        assert isinstance(last, dict) and last.get("t") == c.ERROR, (
            f"closed without an error frame: {last!r}; {cmds!r:.2000}"
        )
    # Apply the outcomes in the order the bookie applied the commands.
    for i, cmd in enumerate(cmds):
        answer = answers.get(i)
        key = _key_of(cmd)
        if i in tags and key is not None:
            if answer is None:
                model.maybe.setdefault(key, set()).add(tags[i])
            elif answer.get("code") == c.BK_OK:
                model.value[key] = tags[i]
            else:
                model.refused[tags[i]] = key
        elif isinstance(cmd, dict) and cmd.get("t") == c.BK_DELETE and isinstance(cmd.get("ledger"), int):
            ledger = cmd["ledger"]
            if answer is None:  # maybe deleted: each of its keys may now also be absent (None)
                for k in [k for k in model.value if k[0] == ledger]:
                    model.maybe.setdefault(k, set()).add(None)
            elif answer.get("code") == c.BK_OK:
                for k in [k for k in model.value if k[0] == ledger]:
                    del model.value[k]
                for k in [k for k in model.maybe if k[0] == ledger]:
                    del model.maybe[k]
    return len(cmds) + 1 if not closed else max(len(answers), 1)


async def check_stored(gen: Generator, host: str, port: int, model: Model) -> int:
    """Read back every key the worker touched; returns how many were checked."""
    mine = range(gen.base, gen.base + LEDGERS_PER_WORKER)
    keys = sorted({k for k in [*model.value, *model.refused.values()] if k[0] in mine})
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder(64 << 20)
    try:
        writer.write(encode_frames([c.bk_read(led, ent, False, i + 1) for i, (led, ent) in enumerate(keys)]))
        got: dict[int, Any] = {}
        while len(got) < len(keys):
            chunk = await asyncio.wait_for(reader.read(1 << 20), 60)
            assert chunk, "the bookie closed the read-back connection"
            for f in decoder.feed(chunk):
                got[f["rid"]] = f
    finally:
        writer.close()
    refused_at: dict[tuple[int, int], set[int]] = {}
    for tag, key in model.refused.items():
        refused_at.setdefault(key, set()).add(tag)
    for i, key in enumerate(keys):
        f = got[i + 1]
        stored = int.from_bytes(f["data"][2:10], "big") if f.get("code") == c.BK_OK else None
        assert stored not in refused_at.get(key, set()), f"a refused add is stored at {key}: tag {stored}"
        if key in model.value:
            allowed: set[int | None] = {model.value[key], *model.maybe.get(key, set())}
            assert stored in allowed, f"{key} holds {stored} ({f.get('code')}), acknowledged {model.value[key]}"
    return len(keys)


def test_bookie_commands(fuzz_standalone: StandaloneProcess, figures: Figures) -> None:
    sa = fuzz_standalone
    host, port = address(sa.bookie_address)
    log_offset = sa.log_path.stat().st_size
    total = fuzz_examples()
    rng = random.Random(figures.seed)
    gens = [Generator(random.Random(rng.random()), w) for w in range(WORKERS)]
    models = [Model() for _ in gens]

    async def worker(gen: Generator, model: Model) -> None:
        while figures.inputs < total:
            figures.inputs += await run_session(gen, host, port, model)
            figures.bump("sessions")
            assert sa.proc is not None and sa.proc.poll() is None, "the standalone (bookie) died"

    async def main() -> None:
        await asyncio.gather(*(worker(g, m) for g, m in zip(gens, models, strict=True)))
        checked = 0
        for g, m in zip(gens, models, strict=True):
            checked += await check_stored(g, host, port, m)
        figures.bump("keys_checked", checked)

    asyncio.run(main())
    codes = sum((m.codes for m in models), Counter())
    print("FUZZ bookie answer codes:", dict(codes))
    figures.bump("acked_adds", sum(len(m.value) for m in models))
    figures.bump("refused_adds", sum(len(m.refused) for m in models))
    unexpected = [u for m in models for u in m.unexpected]
    assert not unexpected, (
        f"{len(unexpected)} answers blaming the bookie (UnknownError, PersistenceError), e.g. {unexpected[:5]}"
    )
    problems = log_problems(sa.log_path, log_offset)
    assert not problems, f"unexpected exceptions in the standalone log: {problems[:10]}"
