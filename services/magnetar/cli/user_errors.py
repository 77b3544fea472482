"""The one place where the console scripts turn an ordinary failure into one line on stderr.

A person at a shell makes ordinary mistakes every day: the server is down, a name has a space in
it, a namespace does not exist, a token or a CA file is missing, the admin URL names the binary
port. Each of those ends the command with one line naming what went wrong and exit code 1, never
a traceback: the traceback says where in Magnetar the error surfaced, which the person did not
ask. What counts as ordinary is an error of the outside world or of the input (``ORDINARY``):
Magnetar's errors (the exception of every wire error code and of the client's own checks), the
operating system's (refused connections, unreadable files, TLS failures) and bad values. Anything
else is a bug and keeps its traceback, so that it gets reported; ``--log-level DEBUG`` (or
``MAGNETAR_LOG_LEVEL=DEBUG``) shows the traceback of an ordinary failure too.

Ctrl-C ends a command with exit code 130 and no traceback, as a shell expects of an interrupted
program.
"""

from __future__ import annotations

import logging
import os
import ssl
import sys
from collections.abc import Callable

from magnetar.protocol.errors import MagnetarError

__all__ = ["INTERRUPTED", "ORDINARY", "describe", "report", "run_reporting"]

ORDINARY: tuple[type[BaseException], ...] = (MagnetarError, OSError, ValueError)
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a program stopped by Ctrl-C


def describe(exc: BaseException) -> str:
    """``exc`` as one line: its kind (for Magnetar's errors, pulsar-client's exception name) and its
    message, with any line breaks of the message folded."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ssl.SSLError):
        return f"TLS failure: {text or exc.__class__.__name__}"
    if isinstance(exc, MagnetarError):
        return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return text or exc.__class__.__name__


def report(prog: str, exc: BaseException) -> int:
    """Print ``exc`` as ``prog: <one line>`` on stderr (its traceback too when logging is at DEBUG); 1."""
    if logging.getLogger().isEnabledFor(logging.DEBUG) or os.environ.get("MAGNETAR_LOG_LEVEL", "").upper() == "DEBUG":
        logging.getLogger(prog).debug("traceback of the failure below", exc_info=exc)
    print(f"{prog}: {describe(exc)}", file=sys.stderr, flush=True)
    return 1


def run_reporting(prog: str, command: Callable[[], int]) -> int:
    """Run ``command``; an ordinary failure becomes one line and exit code 1, Ctrl-C exit code 130."""
    try:
        return command()
    except KeyboardInterrupt:
        return INTERRUPTED
    except ORDINARY as exc:
        return report(prog, exc)
