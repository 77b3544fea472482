"""``magnetar-admin``'s requests to the admin REST API, and the error every verb reports.

Only the standard library (urllib), so that the admin command works wherever the client works.
A refused request becomes ``AdminError`` carrying the broker's ``reason``: the command prints it
and exits non-zero rather than showing a traceback. So do the failures before any answer, each
said in a user's terms: nothing listening, a TLS handshake that failed, and a server that does not
speak HTTP at all (the broker's binary port given as ``--admin-url``). Paths are percent-encoded,
so a name with a space reaches the broker, which refuses it by name. Credentials and TLS (cli/admin_auth.py) are
set once per command by ``use_security`` and added to every request.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from magnetar.cli.admin_auth import HttpSecurity

# Credentials and TLS for every request, set once by ``magnetar-admin``'s ``main`` from its flags.
_security = HttpSecurity()


class PlainText(str):
    """An answer pulsar-admin prints as it is (``brokers healthcheck``'s ``ok``), where any other
    text answer is a JSON value (an enum such as a subscription auth mode) and printed as JSON."""


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
        if isinstance(exc.reason, ssl.SSLError):
            raise AdminError(0, f"TLS failure with {base}: {exc.reason}{_tls_hint(exc.reason)}") from None
        raise AdminError(0, f"cannot reach {base}: {exc.reason}") from None
    except (http.client.HTTPException, ConnectionResetError) as exc:
        raise AdminError(
            0,
            f"{base} did not answer as an HTTP server ({exc.__class__.__name__}): is it the broker's binary "
            "port? --admin-url takes the admin (web service) port, e.g. http://localhost:8080",
        ) from None
    except ssl.SSLError as exc:
        raise AdminError(0, f"TLS failure with {base}: {exc}{_tls_hint(exc)}") from None
    except TimeoutError:
        raise AdminError(0, f"no answer from {base} within {timeout:g} s") from None


def _tls_hint(exc: ssl.SSLError) -> str:
    """What to try for the two TLS failures people meet: an unknown CA, and plaintext on HTTPS."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return " (pass --tls-trust-cert-path with the CA that signed the broker's certificate)"
    if "WRONG_VERSION_NUMBER" in str(exc):
        return " (the port does not speak TLS: use http://, or the broker's HTTPS port)"
    return ""


def _url(base: str, path: str) -> str:
    """``base`` + ``path`` with each character a URL may not hold (a space, a control character)
    percent-encoded; what is encoded already stays as it is."""
    return base.rstrip("/") + urllib.parse.quote(path, safe="/%:=?&@,;+!$'()*~")


def request(base: str, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        _url(base, path), data=data, method=method, headers={"Content-Type": "application/json"}
    )
    _, raw = _open(base, req, timeout)
    return json.loads(raw) if raw.strip() else None


def request_raw(base: str, method: str, path: str, timeout: float = 30) -> tuple[Mapping[str, str], bytes]:
    """Like ``request`` for an answer that is not JSON (peek): its headers and body."""
    return _open(base, urllib.request.Request(_url(base, path), method=method), timeout)
