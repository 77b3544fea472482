"""Random values for mutating commands: every msgpack type, edge integers, and the mutations.

A fuzzer draws from a seeded ``random.Random`` (not Hypothesis) so that it can produce hundreds of
thousands of inputs a second in bulk; the seed replays a run exactly.
"""

from __future__ import annotations

import random
from typing import Any

# The integers msgpack can carry at the edges of every width a server may pack them into.
EDGE_INTS = [0, 1, -1, 2, 127, 128, 255, 256, 2**15, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
             2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**31), -(2**63)]  # fmt: skip


def any_int(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.choice(EDGE_INTS)
    if r < 0.8:
        return rng.randrange(-1000, 1000)
    return rng.randrange(-(2**63), 2**64)


def any_text(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.1:
        return ""
    if r < 0.2:
        return "x" * rng.choice([300, 1025, 70_000])
    if r < 0.3:
        return (
            "".join(chr(rng.randrange(0, 0x110000)) for _ in range(rng.randrange(1, 8)))
            .encode("utf-8", "surrogatepass")
            .decode("utf-8", "replace")
        )
    return "".join(rng.choice("abcXYZ09/:.-_%\x00 \n\u00e9\u2603") for _ in range(rng.randrange(1, 20)))


def any_value(rng: random.Random, depth: int = 0) -> Any:
    """A value of any msgpack type (the wrong type for most fields)."""
    kind = rng.randrange(9 if depth < 2 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return any_int(rng)
    if kind == 3:
        return rng.choice([0.0, -1.5, 1e300, float("inf"), float("nan")])
    if kind == 4:
        return any_text(rng)
    if kind == 5:
        return rng.randbytes(rng.choice([0, 1, 8, 100]))
    if kind == 6:
        return rng.choice([[], {}, [0], [0, 0], [0, 0, 0], [-1, -1, -1]])
    if kind == 7:
        return [any_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {any_text(rng): any_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def mutate_map(rng: random.Random, cmd: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """One structural mutation of a command map: a field dropped, retyped, or added; ``t`` changed."""
    out = dict(cmd)
    keys = [k for k in out if k != "t"]
    r = rng.random()
    if r < 0.25 and keys:
        del out[rng.choice(list(required) or keys) if required and rng.random() < 0.7 else rng.choice(keys)]
    elif r < 0.7 and keys:
        out[rng.choice(keys)] = any_value(rng)
    elif r < 0.85:
        out[any_text(rng) if rng.random() < 0.5 else rng.choice(keys or ["x"]) + "_"] = any_value(rng)
    elif r < 0.95:
        out["t"] = any_value(rng) if rng.random() < 0.5 else any_text(rng)
    else:
        del out["t"]
    return out
