"""Fixtures: small clusters of real bookies and a real LMDB metadata store (see ``cluster.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tests.ledger.cluster import Cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Four bookies: enough for E3/Qw3/Qa2 plus one replacement."""
    c = Cluster(tmp_path)
    for _ in range(4):
        c.add_bookie()
    yield c
    await c.close()


@pytest.fixture
async def small_cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    """Three bookies: an E3 ledger has no replacement for a dead one."""
    c = Cluster(tmp_path)
    for _ in range(3):
        c.add_bookie()
    yield c
    await c.close()
