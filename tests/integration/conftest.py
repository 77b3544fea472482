"""Fixtures of the integration tests that drive a broker from inside the test's own event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.node.standalone import Standalone, StandaloneConfig


@pytest.fixture
async def in_process_standalone(tmp_path: Path) -> AsyncIterator[Standalone]:
    """A real standalone (broker, bookie, LMDB metadata) started in the test's loop on free
    loopback ports, for tests that must reach the broker's objects (its connections, a topic's
    managed ledger) rather than only its wire protocol."""
    config = BrokerConfig(host="127.0.0.1", port=0, web_port=0)
    node = Standalone(StandaloneConfig(tmp_path / "data", config, bookie_port=0))
    await node.start()
    try:
        yield node
    finally:
        await node.stop()
