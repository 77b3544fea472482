"""``magnetar-admin``'s requests to the admin REST API, and the error every verb reports.

Only the standard library (urllib), so that the admin command works wherever the client works.
A refused request becomes ``AdminError`` carrying the broker's ``reason``: the command prints it
and exits non-zero rather than showing a traceback. Credentials and TLS (cli/admin_auth.py) are
set once per command by ``use_security`` and added to every request.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from magnetar.cli.admin_auth import HttpSecurity

# Credentials and TLS for every request, set once by ``magnetar-admin``'s ``main`` from its flags.
_security = HttpSecurity()


class AdminError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def use_security(security: HttpSecurity) -> None:
    """Send every following request with ``security``'s credentials and TLS context."""
    global _security
    _security = security


def _open(base: str, req: urllib.request.Request, timeout: float) -> tuple[Mapping[str, str], bytes]:
    """Send ``req``; its headers and body, or ``AdminError`` with the broker's ``reason``."""
    try:
        for name, value in _security.headers().items():
            req.add_header(name, value)
    except OSError as exc:  # a token file that cannot be read
        raise AdminError(0, f"cannot read the token: {exc}") from None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_security.ssl_context) as resp:
            return dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode(errors="replace")
        try:
            reason = json.loads(text).get("reason", text)
        except (ValueError, AttributeError):
            reason = text
        raise AdminError(exc.code, reason) from None
    except urllib.error.URLError as exc:
        raise AdminError(0, f"cannot reach {base}: {exc.reason}") from None


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base.rstrip("/") + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    _, raw = _open(base, req, timeout)
    return json.loads(raw) if raw.strip() else None


def request_raw(base: str, method: str, path: str, timeout: float = 30) -> tuple[Mapping[str, str], bytes]:
    """Like ``request`` for an answer that is not JSON (peek): its headers and body."""
    return _open(base, urllib.request.Request(base.rstrip("/") + path, method=method), timeout)
