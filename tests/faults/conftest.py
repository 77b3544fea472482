"""Fixtures for the fault scenarios: a fresh ``LocalCluster`` per test (etcd, 3 bookies, 2 brokers),
its process logs printed when the test fails, and a topic name."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from tests.support.cluster import LocalCluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"faults_report_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    return any(
        getattr(getattr(request.node, f"faults_report_{when}", None), "failed", False) for when in ("setup", "call")
    )


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    options = dict(getattr(request, "param", None) or {})  # parametrize("cluster", [{...}], indirect=True)
    c = LocalCluster(tmp_path / "cluster", **options)
    try:
        c.start()
    except BaseException:
        print(f"\n===== cluster failed to start; process logs (tails) under {c.logs} =====\n{c.log_tails()}")
        raise
    try:
        yield c
    finally:
        c.close()
        if _failed(request):
            print(f"\n===== process logs (tails) under {c.logs} =====\n{c.log_tails()}")


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/faults-{uuid.uuid4().hex[:10]}"
