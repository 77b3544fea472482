"""Run a real single-member ``etcd`` for tests, on free loopback ports with its data in a tmp dir.

etcd cannot be told to listen on port 0 and report the port (it must advertise its URLs), so the
ports are picked free just before starting, and a start that loses the race for them is retried
on new ones. Readiness is ``/health`` answering ``{"health": "true"}`` (a leader is elected and
the gateway is up), polled until a deadline. ``kill9()``, ``pause()``/``resume()`` and
``restart()`` (same data dir, same ports) give fault tests a real crash or stall.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.process import ProcessControl


def etcd_binary() -> str | None:
    """``$MAGNETAR_ETCD`` if set (and executable), else ``etcd`` on the PATH, else None."""
    explicit = os.environ.get("MAGNETAR_ETCD")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("etcd")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EtcdProcess(ProcessControl):
    data_dir: Path
    log_path: Path
    binary: str = "etcd"
    client_port: int = 0
    peer_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        """The metadata URL (``etcd://127.0.0.1:PORT``) for ``open_metadata_store``."""
        return f"etcd://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start on fresh ports (first start) or on the same ports (restart); retry on a port race."""
        fresh_ports = self.client_port == 0
        for attempt in range(3):
            if fresh_ports:
                self.client_port, self.peer_port = _free_port(), _free_port()
            self._spawn()
            try:
                self._wait_healthy(timeout)
                return
            except RuntimeError:
                if not fresh_ports or attempt == 2 or "address already in use" not in self.log_tail():
                    raise
                self.data_dir = self.data_dir.with_name(self.data_dir.name + "-retry")

    def _spawn(self) -> None:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--name=test",
                    f"--data-dir={self.data_dir}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster=test={peer}",
                    "--initial-cluster-state=new",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/health", timeout=1) as resp:
                    if json.loads(resp.read()).get("health") == "true":
                        return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.kill9()
                raise TimeoutError(f"etcd not healthy after {timeout}s; log:\n{self.log_tail()}")
            time.sleep(0.05)  # poll interval while etcd boots; there is no event to wait on

    def stop(self, timeout: float = 15.0) -> int | None:
        return super().stop(timeout)

    def restart(self, *, hard: bool = True) -> None:
        """Bring etcd back on the same ports and data; ``hard`` kills it with -9 first."""
        if hard:
            self.kill9()
        else:
            self.stop()
        self.start()


@contextlib.contextmanager
def run_etcd(tmp_path: Path, binary: str | None = None) -> Iterator[EtcdProcess]:
    """Start etcd with its data under ``tmp_path``; kill it at the end."""
    found = binary or etcd_binary()
    if found is None:
        raise FileNotFoundError("no etcd binary (install Debian's etcd-server or set MAGNETAR_ETCD)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    etcd = EtcdProcess(tmp_path / "etcd-data", tmp_path / "etcd.log", binary=found)
    etcd.start()
    try:
        yield etcd
    finally:
        etcd.stop()
