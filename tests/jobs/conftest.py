"""Fixtures of the Spark job tests: local Spark (``local[2]``) with the ``magnetar`` data source
registered, and a real local cluster (etcd, three bookies, one broker) to read from.

Spark runs as a real JVM here; its Python workers use this interpreter (``PYSPARK_PYTHON``), so they
import the project as the tests do.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.cluster import LocalCluster


def _require(what: str, ok: bool, how: str) -> None:
    """Skip locally when ``what`` is missing; fail under CI=true, where a skip would hide it."""
    if ok:
        return
    reason = f"{what} is not available ({how})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One local Spark session for the test session, ``local[2]`` (two executor threads)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        _require("pyspark", False, "pip install -e '.[spark]'")
    _require("java", shutil.which("java") is not None, "apt-get install openjdk-17-jre-headless")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from magnetar.jobs.session import local_session

    session = local_session("magnetar-tests", master="local[2]", warehouse=tmp_path_factory.mktemp("spark"))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def jobs_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """etcd + 3 bookies (E3, Qw2, Qa2: every entry on two of them, so one bad copy can be read
    from the other) + 1 broker that rolls its ledgers every 1,000 entries (several ledgers per
    topic, so reads are split by ledger)."""
    _require("etcd", shutil.which("etcd") is not None, "apt-get install etcd-server")
    base: Path = tmp_path_factory.mktemp("jobs-cluster")
    with LocalCluster(
        base,
        bookies=3,
        brokers=1,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        broker_args=[
            "--managed-ledger-max-entries-per-ledger",
            "1000",
            "--managed-ledger-min-ledger-rollover-time-minutes",
            "0",
        ],
    ) as cluster:
        yield cluster
