"""Counts, seeds, timeouts and the figures every fuzz target reports (see ``__init__.py``)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess, run_standalone

DEFAULT_EXAMPLES = 2000


def fuzz_examples() -> int:
    """Inputs per target: ``FUZZ_EXAMPLES`` (a long run sets 1000000)."""
    return int(os.environ.get("FUZZ_EXAMPLES", DEFAULT_EXAMPLES))


def fuzz_timeout() -> int:
    """The pytest timeout of one target: ``FUZZ_TIMEOUT`` seconds (long runs need hours)."""
    return int(os.environ.get("FUZZ_TIMEOUT", 600))


@pytest.fixture
def fuzz_seed() -> int:
    """``FUZZ_SEED`` or a random seed, printed so that a failure can be replayed."""
    raw = os.environ.get("FUZZ_SEED", "").strip()
    seed = int(raw) if raw else random.SystemRandom().randrange(1, 1_000_000)
    print(f"FUZZ seed={seed}")
    return seed


@dataclass
class Figures:
    """What one target reports: inputs, time, rate, and target-specific counts."""

    target: str
    seed: int
    started: float = field(default_factory=time.monotonic)
    inputs: int = 0
    extra: dict[str, int] = field(default_factory=dict)

    def bump(self, key: str, n: int = 1) -> None:
        self.extra[key] = self.extra.get(key, 0) + n

    def report(self) -> None:
        elapsed = time.monotonic() - self.started
        rate = self.inputs / elapsed if elapsed > 0 else 0.0
        print(
            f"FUZZ {self.target}: {self.inputs} inputs in {elapsed:.1f} s ({rate:.0f}/s) seed={self.seed} {self.extra}"
        )
        path = os.environ.get("FUZZ_REPORT")
        if path:
            row = {"target": self.target, "seed": self.seed, "inputs": self.inputs, "seconds": round(elapsed, 1)}
            row.update(rate=round(rate), **self.extra)
            with open(path, "a") as out:
                out.write(json.dumps(row) + "\n")


@pytest.fixture
def figures(request: pytest.FixtureRequest, fuzz_seed: int) -> Iterator[Figures]:
    fig = Figures(request.node.name, fuzz_seed)
    yield fig
    fig.report()


@pytest.fixture(scope="module")
def fuzz_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone of the module's own: a fuzzer leaves state behind that no other test wants."""
    with run_standalone(tmp_path_factory.mktemp("fuzz-standalone")) as sa:
        yield sa


def log_problems(log_path: Path, offset: int) -> list[str]:
    """Lines of the server log written after ``offset`` that show an unexpected exception: a
    handler that raised something the server did not expect is a bug even when the client got an
    answer. Returns, for each, the log line before it (the message that logged it), the header,
    the innermost frame and the exception: enough to find the handler without the log, which
    pytest deletes with its old temporary directories."""
    text = log_path.read_bytes()[offset:].decode(errors="replace").splitlines()
    found = []
    for i, line in enumerate(text):
        if (
            "Traceback (most recent call last)" in line
            or "Exception in callback" in line
            or "exception was never retrieved" in line
        ):
            after = text[i + 1 : i + 60]
            end = next((j for j, t in enumerate(after) if t and not t.startswith(" ")), len(after))
            frames = [t.strip() for t in after[:end] if t.strip().startswith("File ")]
            before = text[i - 1] if i else ""
            exc = after[end] if end < len(after) else ""
            found.append(f"{before} | {line} ... {frames[-1] if frames else ''} ... {exc}")
    return found
