"""Fixtures shared by every test package. Add fixtures here; do not change existing ones."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.etcd import EtcdProcess, etcd_binary, run_etcd
from tests.support.standalone import StandaloneProcess, run_standalone


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One real etcd for the whole session (tests keep apart by key prefix). Without an etcd
    binary the tests that need it skip locally, but fail in CI, where a skip would hide that the
    cluster store went untested."""
    if etcd_binary() is None:
        reason = "etcd is not installed (apt-get install etcd-server, or set MAGNETAR_ETCD=/path/to/etcd)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    with run_etcd(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A real ``magnetar standalone`` process (broker + bookie + LMDB metadata), one per module."""
    with run_standalone(tmp_path_factory.mktemp("standalone")) as sa:
        yield sa


@pytest.fixture
def fresh_standalone(tmp_path: Path) -> Iterator[StandaloneProcess]:
    """A standalone of the test's own, for tests that kill or restart it."""
    with run_standalone(tmp_path) as sa:
        yield sa


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses (packages with their own prefix override this)."""
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"
