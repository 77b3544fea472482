"""The container images built by images/build.sh, run with podman.

Each test runs a throwaway container without a network (``--network none``). The session fixture calls
images/build.sh, a no-op when the archives for the current content tag exist (the first build of
the spark image downloads pyspark, ~450 MB). Without podman or the debootstrap base image
(``scripts/k8s/deps.sh && scripts/k8s/base-images.sh``) the tests skip, except in CI, where that
is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PODMAN = ROOT / "scripts" / "k8s" / "podman.sh"
BASE_IMAGE = "localhost/bookworm-minbase:latest"
REPOS = {"server": "localhost/magnetar", "operator": "localhost/magnetar-operator", "spark": "localhost/magnetar-spark"}
OCI_LABELS = ("title", "description", "version", "revision", "source", "licenses", "vendor")

# The cold build of the spark image runs in the first test's setup.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]


@dataclass(frozen=True)
class Images:
    tag: str
    env_file: Path

    def ref(self, name: str) -> str:
        return f"{REPOS[name]}:{self.tag}"


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=check, stdin=subprocess.DEVNULL
    )


def run(images: Images, name: str, *command: str, entrypoint: str | None = None, timeout: float = 120) -> str:
    """stdout + stderr of a throwaway container of image ``name``; fails the test on a non-zero exit."""
    args = ["run", "--rm", "--network", "none"]
    if entrypoint is not None:
        args += ["--entrypoint", entrypoint]
    proc = podman(*args, images.ref(name), *command, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{name} {command}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def logs(container: str) -> str:
    proc = podman("logs", container)
    return proc.stdout + proc.stderr


def unavailable_reason() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (scripts/k8s/deps.sh)"
    if podman("image", "exists", BASE_IMAGE, check=False).returncode != 0:
        return f"{BASE_IMAGE} is missing (scripts/k8s/base-images.sh)"
    return None


@pytest.fixture(scope="session")
def images() -> Images:
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if k != "ONLY"}
    proc = subprocess.run(
        [str(ROOT / "images" / "build.sh")], capture_output=True, text=True, timeout=1700, env=env, check=False
    )
    assert proc.returncode == 0, f"images/build.sh failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    last = proc.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"MAGNETAR_IMAGE_TAG=([0-9a-f]{12})", last)
    assert match, f"images/build.sh should end with MAGNETAR_IMAGE_TAG=<tag>, got {last!r}"
    cache = Path(os.environ.get("MAGNETAR_IMAGE_CACHE", Path.home() / ".cache" / "magnetar" / "images"))
    return Images(tag=match[1], env_file=cache / "images.env")


def inspect(images: Images, name: str) -> dict[str, object]:
    out = podman("image", "inspect", images.ref(name)).stdout
    result: dict[str, object] = json.loads(out)[0]
    return result


def test_images_env_names_an_archive_per_image_for_up_sh(images: Images) -> None:
    env = dict(line.split("=", 1) for line in images.env_file.read_text().splitlines() if "=" in line)
    assert env["MAGNETAR_IMAGE_TAG"] == images.tag
    pairs = dict(item.split("=", 1) for item in env["IMAGES"].strip('"').split())
    assert set(pairs) == {"localhost/pause", *REPOS.values()}
    for repo in REPOS.values():
        archive = Path(pairs[repo])
        assert archive.name == f"{repo.removeprefix('localhost/')}-{images.tag}.oci.tar"
        assert archive.is_file()


@pytest.mark.parametrize("name", sorted(REPOS))
def test_runs_as_uid_10000(images: Images, name: str) -> None:
    assert run(images, name, "-u", entrypoint="id").strip() == "10000"
    assert run(images, name, "-g", entrypoint="id").strip() == "10000"


@pytest.mark.parametrize("name", sorted(REPOS))
def test_carries_the_oci_labels(images: Images, name: str) -> None:
    labels = inspect(images, name)["Labels"]
    assert isinstance(labels, dict)
    for key in OCI_LABELS:
        assert labels.get(f"org.opencontainers.image.{key}"), f"{name}: label org.opencontainers.image.{key} missing"
    assert labels["org.opencontainers.image.title"] == REPOS[name].removeprefix("localhost/")


@pytest.mark.parametrize("name", sorted(REPOS))
def test_tini_is_pid_1(images: Images, name: str) -> None:
    config = inspect(images, name)["Config"]
    assert isinstance(config, dict)
    assert config["Entrypoint"][:2] == ["/usr/bin/tini", "--"]
    assert config["User"] == "10000:10000"


def test_code_lives_in_thin_top_layers(images: Images) -> None:
    """A code change rebuilds only the wheel copy and its install: the top two non-empty layers
    (the pinned dependencies, Debian packages and base image are all below them)."""
    history = json.loads(podman("history", "--format", "json", images.ref("server")).stdout)
    sizes = [int(h["size"]) for h in history if int(h["size"]) > 0]  # newest first
    assert sum(sizes[:2]) < 10_000_000, sizes
    assert sizes[2] > 10_000_000, sizes  # the third-party dependencies


def test_server_runs_magnetar_and_carries_etcd(images: Images) -> None:
    assert "usage: magnetar" in run(images, "server", "--help")
    assert "magnetar-admin" in run(images, "server", "--help", entrypoint="magnetar-admin")
    assert re.search(r"etcd Version: 3\.\d+\.\d+", run(images, "server", "--version", entrypoint="etcd"))


def test_server_bookies_journal_with_the_c_writer(images: Images) -> None:
    """The wheel stage compiles the journal's writer thread (setup.py); without it a bookie would
    fall back to the pure-Python writer, correct but slower (bookie/journal_writer.py)."""
    probe = "from magnetar.bookie.journal_writer import implementation; print(implementation())"
    assert run(images, "server", "-c", probe, entrypoint="python3").strip() == "c"


def test_operator_runs_magnetar_operator(images: Images) -> None:
    assert "usage: magnetar-operator" in run(images, "operator", "--help")


def test_spark_has_pyspark_magnetar_and_java_17(images: Images) -> None:
    run(images, "spark", "python", "-c", "import pyspark, magnetar")
    assert 'version "17.' in run(images, "spark", "java", "-version")


def test_spark_runs_a_local_job_with_python_workers(images: Images) -> None:
    """JAVA_HOME and PYSPARK_PYTHON are right: a local-mode job whose map runs in Python workers."""
    job = (
        "from pyspark.sql import SparkSession; "
        "s = SparkSession.builder.master('local[1]').getOrCreate(); "
        "print('SUM', s.sparkContext.parallelize(range(10)).map(lambda x: 2 * x).sum()); s.stop()"
    )
    assert "SUM 90" in run(images, "spark", "python", "-c", job, timeout=300)


def test_sigterm_stops_the_standalone_cleanly_through_tini(images: Images) -> None:
    """`podman stop` sends SIGTERM to PID 1 (tini), which passes it to magnetar; magnetar's handler
    shuts down and exits 0. A process that ignored it would be SIGKILLed after the grace: exit 137."""
    name = f"magnetar-sigterm-{uuid.uuid4().hex[:8]}"
    podman("run", "-d", "--name", name, "--network", "none", images.ref("server"), "standalone", "--data-dir", "/tmp/x")
    try:
        deadline = time.monotonic() + 60
        out = ""
        while "magnetar standalone ready" not in out:
            assert time.monotonic() < deadline, f"no ready banner within 60 s:\n{out}"
            running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true"
            out = logs(name)
            assert running or "ready" in out, f"the container ended before it was ready:\n{out}"
            time.sleep(0.5)
        started = time.monotonic()
        podman("stop", "-t", "20", name, timeout=60)
        took = time.monotonic() - started
        exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        out = logs(name)
        assert exit_code == "0", f"exit code {exit_code} after {took:.1f} s (137: SIGKILLed after the grace)\n{out}"
        assert "magnetar: shutting down" in out
        assert took < 15, f"stop took {took:.1f} s"
    finally:
        podman("rm", "-f", name, check=False)
