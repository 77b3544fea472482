"""Signals and logs of one child process, shared by the standalone, etcd and cluster harnesses.

Fault tests pause processes (SIGSTOP), so every way of ending one continues it first: a stopped
process acts on neither SIGTERM nor SIGKILL until it runs again.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path


class ProcessControl:
    """Mixin: the class provides ``proc`` (the running child, or None) and ``log_path``."""

    proc: subprocess.Popen[bytes] | None
    log_path: Path

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def kill9(self) -> None:
        """SIGKILL (after SIGCONT, in case it is paused) and reap."""
        if self.proc is None:
            return
        self.resume()
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, wait up to ``timeout`` for a clean exit, then SIGKILL. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.resume()
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode
