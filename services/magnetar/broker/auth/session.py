"""Authentication of one binary-protocol connection (WIRE.md R60-R63).

With authentication on, a connection admits ``connect`` and nothing else until a ``connect``
carried valid credentials. A connection whose credentials expire is re-challenged as Pulsar's
ServerCnx does: every ``authentication_refresh_check_seconds`` (Pulsar's
``authenticationRefreshCheckSeconds``) the broker looks at the expiry; once it has passed it
pushes ``auth_challenge`` and waits one more period for an ``auth_response`` with fresh, valid
credentials for the same role. No answer in time, or a bad one, closes the connection with
``AuthenticationError``. Producers and consumers are untouched by a successful refresh. The
timer runs only for credentials that expire, so connections with non-expiring tokens (and
every connection while authentication is off) cost nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from magnetar.broker.auth.providers import Authenticated, Authentication
from magnetar.protocol import commands as c
from magnetar.protocol.errors import AuthenticationError

# Commands a connection admits before it is authenticated.
_BEFORE_CONNECT = frozenset({c.CONNECT})


class ConnectionAuth:
    def __init__(
        self,
        authentication: Authentication | None,
        challenge: Callable[[], None],
        fail: Callable[[str], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``challenge`` pushes ``auth_challenge``; ``fail`` closes the connection with that reason."""
        self.authentication = authentication
        self._challenge = challenge
        self._fail = fail
        self._clock = clock
        self.current: Authenticated | None = None
        self.challenged = False
        self._timer: asyncio.TimerHandle | None = None

    @property
    def role(self) -> str | None:
        """The authenticated role; None while authentication is off or not yet done."""
        return self.current.role if self.current is not None else None

    def admits(self, name: str) -> bool:
        """Whether a command may run now (anything, once authenticated or with auth off)."""
        return self.authentication is None or self.current is not None or name in _BEFORE_CONNECT

    def on_connect(self, cmd: c.Connect) -> None:
        """Check ``connect``'s credentials; ``AuthenticationError`` refuses the connection."""
        if self.authentication is None:
            return
        self._accept(self.authentication.authenticate(cmd.get("auth_method"), cmd.get("auth_data")))

    def on_response(self, cmd: c.AuthResponse) -> None:
        """Fresh credentials: they must be valid and for the role the connection already has."""
        if self.authentication is None:
            return  # nothing asked for: ignored, as an unknown optional feature
        got = self.authentication.authenticate(cmd.get("auth_method"), cmd.get("auth_data"))
        if self.current is not None and got.role != self.current.role:
            raise AuthenticationError(
                f"Failed to authenticate: refreshed credentials are for role {got.role!r}, "
                f"the connection's is {self.current.role!r}"
            )
        self._accept(got)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------------ refresh
    def _accept(self, got: Authenticated) -> None:
        self.current = got
        self.challenged = False
        self.close()
        if got.expires_at is not None:
            self._schedule()

    def _schedule(self) -> None:
        assert self.authentication is not None
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.authentication.refresh_check_seconds, self._check)

    def _check(self) -> None:
        self._timer = None
        current = self.current
        if current is None or current.expires_at is None:
            return
        if self.challenged:
            self._fail("Failed to authenticate: no fresh credentials in answer to auth_challenge in time")
            return
        if self._clock() >= current.expires_at:
            self.challenged = True
            self._challenge()
        self._schedule()
