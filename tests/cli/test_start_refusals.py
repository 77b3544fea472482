"""What ``magnetar standalone`` says when it cannot start, on real processes: every taken port at
once, a data directory another standalone holds, and an install without the server extra."""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.standalone import run_standalone

import magnetar

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


@contextlib.contextmanager
def taken_ports(count: int) -> Iterator[list[int]]:
    """Loopback ports held by listening sockets of this test."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            s.listen()
            ports.append(int(s.getsockname()[1]))
        yield ports


def _refused(argv: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode != 0, output
    assert "Traceback" not in output and len(output.splitlines()) == 1, output
    return output


def test_every_taken_port_is_named_in_one_line(tmp_path: Path) -> None:
    with taken_ports(3) as (service, admin, bookie):
        argv = ["standalone", "--data-dir", str(tmp_path / "data"), "--port", str(service)]
        argv += ["--web-port", str(admin), "--bookie-port", str(bookie)]
        line = _refused([*MAGNETAR, *argv])
    assert line == (
        f"magnetar standalone: ports {service} (service port), {admin} (admin port), {bookie} (bookie port) "
        "are already in use; pass --port, --web-port, --bookie-port to choose others"
    )
    assert not (tmp_path / "data").exists()  # refused before anything was opened


def test_a_second_standalone_on_the_same_data_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    with run_standalone(tmp_path) as sa:
        argv = ["standalone", "--data-dir", str(sa.data_dir), "--port", "0", "--web-port", "0", "--bookie-port", "0"]
        line = _refused([*MAGNETAR, *argv])
        assert line == (
            f"magnetar standalone: data directory {sa.data_dir.resolve()} is in use by another magnetar process; "
            "stop it first, or pass --data-dir"
        )
        # the first one is untouched and still serves
        client = magnetar.Client(sa.service_url)
        try:
            producer = client.create_producer("data-dir-lock")
            producer.send(b"still here")
        finally:
            client.close()


def _client_only_site(target: Path) -> Path:
    """A site directory holding only what ``pip install magnetar`` (no extras) installs: the
    distributions magnetar requires without an extra, and theirs, linked from this environment."""
    target.mkdir()
    seen: set[str] = set()
    todo = ["magnetar"]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0] for req in dist.requires or [] if "extra ==" not in req]
        if name == "magnetar":
            continue  # its source tree is put on the path directly
        for file in dist.files or []:
            top = file.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            link = target / top
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(top))))
    return target


def test_a_client_only_install_names_the_server_extra(tmp_path: Path) -> None:
    site = _client_only_site(tmp_path / "site")
    services = Path(magnetar.__file__).resolve().parent.parent
    env = {"PYTHONPATH": f"{services}:{site}", "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-S", "-m", "magnetar.cli.main", "standalone", "--data-dir", str(tmp_path / "d")]
    line = _refused([*argv, "--port", "0", "--web-port", "0", "--bookie-port", "0"], env=env)
    assert line.startswith("magnetar standalone needs the server extra"), line
    assert line.endswith("pip install 'magnetar[server]'"), line
    # the client tools of the same install work
    help_text = subprocess.run([*argv[:4], "produce", "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert help_text.returncode == 0, help_text.stderr
