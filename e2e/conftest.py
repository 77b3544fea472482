"""Fixtures of the end-to-end suite: images, a cluster, and the installed chart.

The suite is ordered (install, use, break, scale, upgrade, uninstall) and shares one node and one
release per session, as a user's cluster would be. Without the local node's prerequisites it is
skipped, except in CI (``CI=true``), where that is a failure: CI installs them (scripts/test).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.operator.harness import ROOT

from e2e.cluster import FIGURES, Cluster, LocalNode, missing_for_local_node
from e2e.release import Images, Release

IMAGE_CACHE = Path(os.environ.get("MAGNETAR_IMAGE_CACHE", str(Path.home() / ".cache/magnetar/images")))


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"end-to-end prerequisites missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def images() -> Images:
    """Build (or find cached) the images with images/build.sh; read the tag it wrote."""
    if os.environ.get("MAGNETAR_E2E_IMAGE_TAG"):
        return Images(os.environ["MAGNETAR_E2E_IMAGE_TAG"], os.environ.get("IMAGES", ""))
    missing = missing_for_local_node()
    if missing:
        _unavailable(f"missing {', '.join(missing)} (scripts/k8s/deps.sh, build.sh, helm.sh)")
    log = IMAGE_CACHE / "build.log"
    IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.run(
            ["bash", str(ROOT / "images" / "build.sh")], stdout=out, stderr=subprocess.STDOUT, timeout=2400
        )
    if proc.returncode != 0:
        pytest.fail(f"images/build.sh failed:\n{log.read_text()[-3000:]}")
    env: dict[str, str] = {}
    for line in (IMAGE_CACHE / "images.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = " ".join(shlex.split(value))
    return Images(env["MAGNETAR_IMAGE_TAG"], env["IMAGES"])


@pytest.fixture(scope="session")
def cluster(images: Images) -> Iterator[Cluster]:
    external = os.environ.get("MAGNETAR_E2E_KUBECONFIG")
    if external:
        yield Cluster(Path(external), os.environ.get("MAGNETAR_E2E_STORAGE_CLASS") or None, pods_reachable=False)
        return
    node = LocalNode(images.archives)
    try:
        yield node.up()
    finally:
        print(node.down())


@pytest.fixture(scope="session")
def release(cluster: Cluster, images: Images) -> Release:
    rel = Release(cluster, images)
    started = time.monotonic()
    rel.helm_upgrade(install=True)
    rel.wait_ready(bookies=3, brokers=2)
    FIGURES["helm install to Ready (s)"] = round(time.monotonic() - started, 1)
    return rel


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Uninstalling ends the session's release, so the e2e uninstall tests run last: the tests of
    files collected after the main one (the Spark export) use the release before it goes. The
    secure install and the load balancer's (test_secure_install.py, test_load_balancer_on_kubernetes.py:
    releases of their own, one at a time) come after that uninstall."""
    here = Path(__file__).parent
    own_release = (here / "test_load_balancer_on_kubernetes.py", here / "test_secure_install.py")
    secure = [i for i in items if Path(i.path) in own_release]
    last = [i for i in items if i.name.startswith("test_uninstall") and Path(i.path).parent == here]
    if last or secure:
        items[:] = [i for i in items if i not in last and i not in secure] + last + secure


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures the suite measured (install time, recovery times...)."""
    if FIGURES:
        terminalreporter.write_sep("-", "magnetar e2e figures")
        for key, value in FIGURES.items():
            terminalreporter.write_line(f"{key}: {value}")
