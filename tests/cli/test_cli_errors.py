"""Ordinary mistakes at the shell end in one line on stderr and a non-zero exit, never a traceback.

Each console script (``magnetar``, ``magnetar-admin``, ``magnetar-jobs``) runs as its own process
against a real standalone, with the mistakes people make every day: the server down, a name with a
space, a namespace that does not exist, the admin URL pointed at the binary port, plaintext
against TLS. Authentication and TLS failures against a secured standalone are in
test_client_security.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from tests.support.standalone import StandaloneProcess


def run(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=timeout)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (asserting there is exactly one, and no traceback)."""
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def binary_as_http(sa: StandaloneProcess) -> str:
    return sa.service_url.replace("magnetar://", "http://")


# ---------------------------------------------------------------- magnetar produce / consume


def test_produce_to_a_server_that_is_down(closed_port: int) -> None:
    done = run("magnetar.cli.main", "produce", "t", "--url", f"magnetar://127.0.0.1:{closed_port}")
    line = one_line(done)
    assert line.startswith("magnetar produce: ConnectError:") and "Connection refused" in line


@pytest.mark.parametrize("command", [["produce"], ["consume", "-s", "sub"]])
def test_a_topic_name_with_a_space(standalone: StandaloneProcess, command: list[str]) -> None:
    done = run("magnetar.cli.main", command[0], "my topic", *command[1:], "--url", standalone.service_url)
    assert "InvalidTopicName" in one_line(done) and "'my topic'" in one_line(done)


def test_produce_to_a_namespace_that_does_not_exist(standalone: StandaloneProcess) -> None:
    done = run("magnetar.cli.main", "produce", "persistent://public/no-such-ns/t", "--url", standalone.service_url)
    assert "namespace public/no-such-ns does not exist" in one_line(done)


# ---------------------------------------------------------------- magnetar-admin


def test_admin_with_the_server_down(closed_port: int) -> None:
    done = run("magnetar.cli.admin", "--admin-url", f"http://127.0.0.1:{closed_port}", "tenants", "list")
    assert one_line(done) == f"error: cannot reach http://127.0.0.1:{closed_port}: [Errno 111] Connection refused"


def test_admin_on_the_binary_port(standalone: StandaloneProcess) -> None:
    done = run("magnetar.cli.admin", "--admin-url", binary_as_http(standalone), "tenants", "list")
    line = one_line(done)
    assert "did not answer as an HTTP server" in line and "binary port" in line


def test_admin_https_on_a_plaintext_port(standalone: StandaloneProcess) -> None:
    done = run(
        "magnetar.cli.admin", "--admin-url", standalone.admin_url.replace("http://", "https://"), "tenants", "list"
    )
    line = one_line(done)
    assert line.startswith("error: TLS failure") and "does not speak TLS" in line


@pytest.mark.parametrize(
    ("verb", "expected"),
    [
        (["namespaces", "create", "public/bad ns"], "error: Namespace name is not valid: 'bad ns' (HTTP 412)"),
        (["topics", "list", "public/bad ns"], "error: Namespace name is not valid: 'bad ns' (HTTP 412)"),
        (["topics", "stats", "persistent://public/default/bad topic"], "error: InvalidTopicName: invalid topic"),
        (["topics", "list", "public/no-such-ns"], "error: namespace public/no-such-ns does not exist (HTTP 404)"),
        (["topics", "create", "persistent://public/no-such-ns/t"], "error: namespace public/no-such-ns does not"),
    ],
)
def test_admin_bad_or_missing_names(standalone: StandaloneProcess, verb: list[str], expected: str) -> None:
    done = run("magnetar.cli.admin", "--admin-url", standalone.admin_url, *verb)
    assert one_line(done).startswith(expected)


# ---------------------------------------------------------------- magnetar-jobs (checked before Spark starts)


def test_jobs_with_the_server_down(closed_port: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = str(tmp_path_factory.mktemp("export"))
    done = run(
        "magnetar.cli.jobs",
        "export",
        "--admin-url",
        f"http://127.0.0.1:{closed_port}",
        "--topic",
        "t",
        "--target",
        target,
    )
    assert one_line(done).startswith(f"export: cannot reach http://127.0.0.1:{closed_port}")


def test_jobs_bad_topic_and_missing_namespace(
    standalone: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = str(tmp_path_factory.mktemp("export"))
    admin = ["--admin-url", standalone.admin_url, "--target", target]
    bad = run("magnetar.cli.jobs", "export", *admin, "--topic", "bad topic")
    assert one_line(bad).startswith("export: InvalidTopicName: invalid topic 'bad topic'")
    missing = run("magnetar.cli.jobs", "export", *admin, "--namespace", "public/no-such-ns")
    assert one_line(missing) == "export: namespace public/no-such-ns does not exist (HTTP 404)"
    sweep = run(
        "magnetar.cli.jobs", "retention-sweep", "--admin-url", standalone.admin_url, "--namespace", "public/bad ns"
    )
    assert one_line(sweep).startswith("retention-sweep: InvalidTopicName: invalid namespace 'bad ns'")


def test_jobs_on_the_binary_port(standalone: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory) -> None:
    target = str(tmp_path_factory.mktemp("export"))
    done = run(
        "magnetar.cli.jobs", "export", "--admin-url", binary_as_http(standalone), "--topic", "t", "--target", target
    )
    assert "did not answer as an HTTP server" in one_line(done)
