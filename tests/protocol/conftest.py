"""Fixtures for the WIRE.md rule tests: a real standalone process (broker + bookie + metadata),
shared by the whole package, and one it kills and restarts of a test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess, run_standalone


@pytest.fixture(scope="package")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(tmp_path_factory.mktemp("standalone")) as sa:
        yield sa


@pytest.fixture
def fresh_standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A standalone of the test's own, for tests that kill or restart it."""
    with run_standalone(tmp_path) as sa:
        yield sa


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/wire-{uuid.uuid4().hex[:10]}"
