"""The ``logger`` option of ``Client``: pulsar-client 3.x's ``ConsoleLogger``, ``FileLogger`` and ``LoggerLevel``.

pulsar-client hands its C++ core a logger: a ``logging.Logger`` (every client log line goes to it),
``ConsoleLogger(log_level)`` (standard output) or ``FileLogger(log_level, log_file)``. Magnetar's
client logs through the standard ``logging`` module under the ``magnetar.client`` logger, so each
choice becomes a handler on that logger (``install``): the lines go to the given logger, standard
output or the file, at the given level, and no longer propagate to the root logger (pulsar-client's
lines never reach Python's root logger either). ``uninstall`` undoes it when the client closes.

The ``magnetar.client`` logger is one per process, so two clients with different loggers share
the last one installed until it closes (pulsar-client keeps one per client); ``logger=None`` leaves
Python's logging configuration alone (pulsar-client then logs INFO to standard output).
"""

from __future__ import annotations

import logging
import sys
import threading
from enum import Enum
from typing import Any

__all__ = ["ConsoleLogger", "FileLogger", "LoggerLevel", "install", "uninstall"]

CLIENT_LOGGER = "magnetar.client"


class LoggerLevel(Enum):
    """The level of a ``ConsoleLogger`` / ``FileLogger``; pulsar-client's names and values."""

    Debug = 0
    Info = 1
    Warn = 2
    Error = 3

    @property
    def logging_level(self) -> int:
        """The ``logging`` module's level for this one."""
        return _LEVELS[self]


_LEVELS = {
    LoggerLevel.Debug: logging.DEBUG,
    LoggerLevel.Info: logging.INFO,
    LoggerLevel.Warn: logging.WARNING,
    LoggerLevel.Error: logging.ERROR,
}


def _check_level(log_level: object) -> LoggerLevel:
    if not isinstance(log_level, LoggerLevel):
        raise ValueError(
            f"Argument log_level is expected to be of type 'LoggerLevel' and not '{type(log_level).__name__}'"
        )
    return log_level


class ConsoleLogger:
    """Client log lines on standard output, from ``log_level`` up."""

    def __init__(self, log_level: LoggerLevel = LoggerLevel.Info) -> None:
        self.log_level = _check_level(log_level)

    def __repr__(self) -> str:
        return f"ConsoleLogger({self.log_level})"


class FileLogger:
    """Client log lines appended to ``log_file``, from ``log_level`` up."""

    def __init__(self, log_level: LoggerLevel, log_file: str) -> None:
        self.log_level = _check_level(log_level)
        if not isinstance(log_file, str):
            raise ValueError(f"Argument log_file is expected to be of type 'str' and not '{type(log_file).__name__}'")
        self.log_file = log_file

    def __repr__(self) -> str:
        return f"FileLogger({self.log_level}, {self.log_file!r})"


# A line as the C++ client writes it: time, level, logger, message.
_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-5s [%(threadName)s] %(name)s | %(message)s"
_DATE = "%Y-%m-%d %H:%M:%S"


class _Forward(logging.Handler):
    """Hands each record to the application's ``logging.Logger`` if that logger's level lets it through."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__(logging.NOTSET)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self.target.isEnabledFor(record.levelno):
            self.target.handle(record)


class Installed:
    """What ``install`` changed on the ``magnetar.client`` logger, to undo it."""

    def __init__(self, handler: logging.Handler, level: int, propagate: bool) -> None:
        self.handler = handler
        self.level = level
        self.propagate = propagate


_lock = threading.Lock()


def check(logger: Any) -> None:
    """pulsar-client's check of the ``logger`` argument: ``ValueError`` for anything else."""
    if logger is not None and not isinstance(logger, logging.Logger | ConsoleLogger | FileLogger):
        raise ValueError(
            "Logger is expected to be either None, logger.Logger, pulsar.ConsoleLogger or pulsar.FileLogger"
        )


def install(logger: Any) -> Installed | None:
    """Send the client's log lines where ``logger`` says; None (nothing changed) for ``logger=None``."""
    check(logger)
    if logger is None:
        return None
    if isinstance(logger, logging.Logger) and (logger.name + ".").startswith(CLIENT_LOGGER + "."):
        return None  # the client's own logger (or one below it): its lines already go there
    handler: logging.Handler
    if isinstance(logger, logging.Logger):
        handler = _Forward(logger)
        level = logger.getEffectiveLevel()
    else:
        handler = (
            logging.FileHandler(logger.log_file, encoding="utf-8")
            if isinstance(logger, FileLogger)
            else logging.StreamHandler(sys.stdout)
        )
        handler.setFormatter(logging.Formatter(_FORMAT, _DATE))
        level = logger.log_level.logging_level
    target = logging.getLogger(CLIENT_LOGGER)
    with _lock:
        installed = Installed(handler, target.level, target.propagate)
        target.addHandler(handler)
        target.setLevel(level)
        target.propagate = False
    return installed


def uninstall(installed: Installed | None) -> None:
    """Undo ``install`` (when the client closes)."""
    if installed is None:
        return
    target = logging.getLogger(CLIENT_LOGGER)
    with _lock:
        target.removeHandler(installed.handler)
        if not any(h for h in target.handlers):
            target.setLevel(installed.level)
            target.propagate = installed.propagate
    installed.handler.close()
