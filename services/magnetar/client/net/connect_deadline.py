"""When creating a producer, consumer or reader stops trying to reach a broker: ``connection_timeout_ms``.

pulsar-client gives up on a broker it cannot connect to once ``connection_timeout_ms`` has passed
and raises ``ConnectError``; retrying a refused port until the (longer) operation timeout and then
reporting ``NotConnected`` hid the cause and kept the caller waiting. So a failure to open the TCP
connection (refused, unreachable, or not opened within ``connection_timeout_ms``) is a
``ConnectFailed``: still retryable (a broker restarting comes back), but only until
``connection_timeout_ms`` after the first attempt (never past the operation timeout), and then the
caller gets ``ConnectError``, which names the broker and the reason. Once a connection opens, the
operation timeout alone bounds the rest (lookup redirects, a broker not ready yet).
"""

from __future__ import annotations

from magnetar.protocol.errors import ConnectError, NotConnected, PulsarException

__all__ = ["ConnectFailed", "as_connect_error", "give_up_at"]


class ConnectFailed(NotConnected):
    """A TCP connection to a broker could not be opened (refused, unreachable or timed out)."""


def give_up_at(exc: PulsarException, started: float, deadline: float, connect_timeout: float) -> float:
    """The loop time after which ``exc`` is no longer retried by a first attach."""
    if isinstance(exc, ConnectFailed):
        return min(deadline, started + connect_timeout)
    return deadline


def as_connect_error(exc: PulsarException) -> PulsarException:
    """What the caller gets when retrying ``exc`` stops: ``ConnectError`` for a connect failure."""
    if isinstance(exc, ConnectFailed):
        return ConnectError(str(exc))
    return exc
