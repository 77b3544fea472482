"""Fixtures for the fault scenarios: a fresh ``LocalCluster`` per test (etcd, 3 bookies, 2 brokers),
its process logs printed when the test fails, a topic name, and seeds.

A scenario that takes the ``fault_seed`` fixture is randomized from that seed (victims, timings,
which bytes to flip) and runs once per seed: ``FAULTS_SEEDS=1,2,3,4,5`` runs it five times with
those seeds; without it, once with a seed drawn at random and printed (``FAULTS seed=N``), so CI
explores and a failure can be replayed with ``FAULTS_SEEDS=N``."""

from __future__ import annotations

import os
import random
import shutil
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from tests.support.cluster import LocalCluster

SEEDS_ENV = "FAULTS_SEEDS"


def fault_seeds() -> list[int]:
    """The seeds to run each seeded scenario with (``FAULTS_SEEDS``, or one random seed)."""
    raw = os.environ.get(SEEDS_ENV, "").strip()
    if raw:
        return [int(x) for x in raw.replace(" ", "").split(",") if x]
    return [random.SystemRandom().randrange(1, 1_000_000)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fault_seed" in metafunc.fixturenames:
        seeds = fault_seeds()
        metafunc.parametrize("fault_seed", seeds, ids=[f"seed{s}" for s in seeds])


@pytest.fixture
def rng(fault_seed: int) -> random.Random:
    """The scenario's random source, seeded (printed so that a run can be replayed)."""
    print(f"FAULTS seed={fault_seed} (replay with {SEEDS_ENV}={fault_seed})", flush=True)
    return random.Random(fault_seed)


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
