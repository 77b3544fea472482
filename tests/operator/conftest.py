"""Session fixtures of the operator tests: a real Kubernetes control plane, a real standalone broker,
and the operator as a real subprocess (see harness.py for how each is run and awaited).

The control plane is scripts/k8s/up-control-plane.sh (etcd + kube-apiserver + controller manager
on free loopback ports, in a temporary run directory), started once per session and torn down
with scripts/k8s/down.sh. Without the binaries the k8s tests are skipped with the reason, except
in CI (CI=true), where a missing binary is a failure: CI builds them with scripts/k8s/build.sh.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from tests.operator.harness import (
    BIN,
    K8S_HOME,
    POOL_NAMESPACE,
    ROOT,
    SCRIPTS,
    ControlPlane,
    OperatorProcess,
    binaries_missing,
    free_port,
)
from tests.support.standalone import StandaloneProcess


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    missing = binaries_missing()
    if missing:
        message = f"Kubernetes binaries missing: {', '.join(missing)}; build them with scripts/k8s/build.sh"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message)
        pytest.skip(message)
    run_dir = tmp_path_factory.mktemp("k8s")
    env = dict(
        os.environ,
        R=str(run_dir),
        ETCD_PORT=str(free_port(pair=True)),
        API_PORT=str(free_port()),
        K8S_HOME=str(K8S_HOME),
        BIN=str(BIN),
    )
    started = time.monotonic()
    proc = subprocess.run([str(SCRIPTS / "up-control-plane.sh")], env=env, capture_output=True, text=True, timeout=180)
    took = time.monotonic() - started
    cp = ControlPlane(run_dir, run_dir / "admin.kubeconfig", took)
    try:
        if proc.returncode != 0:
            raise AssertionError(f"up-control-plane.sh failed:\n{proc.stdout}\n{proc.stderr}")
        print(f"\ncontrol plane ready in {took:.1f}s ({run_dir})")
        yield cp
    finally:
        subprocess.run([str(SCRIPTS / "down.sh")], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def crds(control_plane: ControlPlane) -> ControlPlane:
    control_plane.kubectl("apply", "-f", str(ROOT / "crds"))
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *(f"crd/{p}.magnetar.dev" for p in ("tenants", "namespaces", "topics", "bookieensembles")),
    )
    return control_plane


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """One real standalone for the session, on a fixed admin port so that a kill -9 and restart
    (the broker-down test) brings it back where the operator expects it."""
    tmp = tmp_path_factory.mktemp("broker")
    sa = StandaloneProcess(tmp / "data", tmp / "standalone.log", extra_args=["--web-port", str(free_port())])
    sa.start()
    try:
        yield sa
    finally:
        sa.stop()


@pytest.fixture(scope="session")
def operator(
    crds: ControlPlane, broker: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    crds.kubectl("create", "namespace", POOL_NAMESPACE)
    op = OperatorProcess(
        crds.kubeconfig,
        broker.admin_url,
        tmp_path_factory.mktemp("operator") / "operator.log",
        extra_env={
            "MAGNETAR_MANAGE_BROKER_POOL": "true",
            "MAGNETAR_BROKER_NAMESPACE": POOL_NAMESPACE,
            "MAGNETAR_BROKER_REPLICAS": "2",
            "MAGNETAR_BROKER_IMAGE": "localhost/magnetar-broker:test",
            # the Spark job submitter and status mirroring (spark_resources.py) pass every second
            "MAGNETAR_SPARK_POLL_INTERVAL": "1",
        },
    )
    op.start()
    try:
        yield op
    finally:
        op.stop()
        print(f"\noperator log: {op.log_path}")


@pytest.fixture
def ns(crds: ControlPlane) -> Iterator[str]:
    """A Kubernetes namespace of the test's own."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    crds.kubectl("create", "namespace", name)
    yield name


@pytest.fixture
def uid() -> str:
    """A suffix that keeps broker-side names unique across tests sharing the broker."""
    return uuid.uuid4().hex[:6]
