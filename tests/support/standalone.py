"""Run a real ``magnetar standalone`` process for tests, on free loopback ports.

The process is started with ``--port 0 --web-port 0 --bookie-port 0`` and the test waits for its
banner line (``magnetar standalone ready: service ... admin ...``), so there is no sleep and no
port race. ``kill9()`` and ``restart()`` give the durability tests a real crash on the same data
directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.process import ProcessControl

_BANNER = re.compile(r"magnetar standalone ready: service (\S+) admin (\S+) bookie (\S+)")
# The ready line's TLS listeners, when the standalone has them (brokerServicePortTls, webServicePortTls).
_TLS_BANNER = re.compile(r"service-tls (\S+) admin-tls (\S+)")


@dataclass
class StandaloneProcess(ProcessControl):
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    service_url: str = ""
    admin_url: str = ""
    bookie_address: str = ""
    service_url_tls: str = ""  # magnetar+ssl://..., with a TLS binary listener
    admin_url_tls: str = ""  # https://..., with a TLS admin listener
    extra_args: list[str] = field(default_factory=list)

    def start(self, timeout: float = 60.0) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "magnetar.cli.main",
                "standalone",
                "--data-dir",
                str(self.data_dir),
                "--port",
                "0",
                "--web-port",
                "0",
                "--bookie-port",
                "0",
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
        found = threading.Event()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout

        def pump() -> None:
            for raw in stdout:
                line = raw.decode(errors="replace")
                log.write(raw)
                log.flush()
                m = _BANNER.search(line)
                if m and not found.is_set():
                    self.service_url, self.admin_url, self.bookie_address = m.groups()
                    tls = _TLS_BANNER.search(line)
                    self.service_url_tls, self.admin_url_tls = tls.groups() if tls else ("", "")
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"standalone exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill9()
                raise TimeoutError(f"standalone not ready after {timeout}s; log:\n{self.log_tail()}")

    def restart(self) -> None:
        self.stop()
        self.start()


@contextlib.contextmanager
def run_standalone(tmp_path: Path, *extra_args: str) -> Iterator[StandaloneProcess]:
    """Start a standalone broker with its data under ``tmp_path``; stop it at the end."""
    sa = StandaloneProcess(tmp_path / "data", tmp_path / "standalone.log", extra_args=list(extra_args))
    sa.start()
    try:
        yield sa
    finally:
        sa.stop()


def admin_call(sa: StandaloneProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """Call the standalone's admin REST API directly (``path`` from ``/admin/...``): the status and
    the decoded JSON body (None when empty), for errors too."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        sa.admin_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw.strip() else None
