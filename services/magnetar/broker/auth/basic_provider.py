"""Pulsar's AuthenticationProviderBasic: a user name and password checked against an htpasswd file.

The file is named by ``basicAuthConf`` (``basic_auth_conf``) in any of the forms Pulsar reads: a
``data:`` URL, a ``file:`` URL, a path to an existing file, or the file's content in base64. Each
line is ``user:hash`` (blank lines are skipped, any other line without exactly one ``:`` stops the
broker at start, as Pulsar's refuses the file). The hashes Pulsar's provider checks are Apache's
MD5 (``$apr1$...``, ``htpasswd -m``) and the traditional crypt (13 characters, ``htpasswd -d``);
a line in another format (bcrypt, ``{SHA}``, ``$1$``...) never authenticates there either, so it
is reported once at start rather than silently refusing that user later.

The credentials are ``user:password``: in ``connect``'s ``auth_data`` under ``auth_method``
``basic``, and on HTTP as ``Authorization: Basic base64(user:password)`` (broker/auth/http.py).
A refusal says only "Unknown user or invalid password", whichever it was. The role is the user
name; it never expires.

The hashes are checked with passlib (the maintained ``libpass`` distribution provides it), loaded
only when a broker turns this provider on, so a client-only install does not need it.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes, urlparse

from magnetar.broker.auth.authenticated import Authenticated
from magnetar.broker.config import BrokerConfig
from magnetar.protocol.errors import AuthenticationError

__all__ = ["BASIC_PROVIDER_NAMES", "BasicProvider", "read_basic_auth_conf"]

log = logging.getLogger(__name__)

METHOD = "basic"
BASIC_PROVIDER_NAMES = (METHOD, "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic")
REFUSED = "Unknown user or invalid password"
_DES_CRYPT = re.compile(r"^[./0-9A-Za-z]{13}$")
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]*={0,2}\s*$")


def read_basic_auth_conf(data: str) -> bytes:
    """The htpasswd file's bytes from a ``basicAuthConf`` value (module docstring); ValueError if none."""
    if data.startswith("data:"):
        header, sep, payload = data[len("data:") :].partition(",")
        if not sep:
            raise ValueError("basicAuthConf: a data: URL needs a ',' before its content")
        raw = unquote_to_bytes(payload)
        return base64.b64decode(raw, validate=False) if header.endswith(";base64") else raw
    if data.startswith("file:"):
        return Path(unquote_to_bytes(urlparse(data).path).decode()).read_bytes()
    path = Path(data)
    if path.exists():
        return path.read_bytes()
    if _BASE64.match(data):
        try:
            return base64.b64decode(data, validate=False)
        except (binascii.Error, ValueError):
            pass
    raise ValueError(f"basicAuthConf {data!r} is not a file, a file:/data: URL or base64 content")


def _parse(content: bytes) -> dict[str, str]:
    users: dict[str, str] = {}
    for number, line in enumerate(content.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().split(":")
        if len(parts) != 2:
            raise ValueError(f"basicAuthConf line {number}: expected user:hash (htpasswd format)")
        users[parts[0]] = parts[1]
    return users


def _hash_classes() -> tuple[Any, Any]:
    """passlib's Apache MD5 and DES crypt; imported here, quietly (passlib 1.7 touches the
    deprecated ``crypt`` module when it loads)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from passlib.hash import apr_md5_crypt, des_crypt  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ValueError(
            "the Basic authentication provider needs passlib: install magnetar[server] (or the libpass package)"
        ) from None
    return apr_md5_crypt, des_crypt


class BasicProvider:
    """Pulsar's AuthenticationProviderBasic (module docstring)."""

    method = METHOD

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self._apr1, self._des = _hash_classes()
        for user, hashed in users.items():
            if not self._known_format(hashed):
                log.warning(
                    "basicAuthConf: the hash of user %r is neither Apache MD5 ($apr1$) nor crypt; "
                    "that user cannot authenticate (create it with htpasswd -m)",
                    user,
                )

    @classmethod
    def from_config(cls, config: BrokerConfig) -> BasicProvider:
        if not config.basic_auth_conf:
            raise ValueError("Basic authentication needs basicAuthConf (the htpasswd file)")
        try:
            return cls(_parse(read_basic_auth_conf(config.basic_auth_conf)))
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"basicAuthConf cannot be read: {exc}") from None

    @staticmethod
    def _known_format(hashed: str) -> bool:
        return (hashed.startswith("$apr1$") and hashed.count("$") == 3) or bool(_DES_CRYPT.match(hashed))

    def authenticate(self, data: object) -> Authenticated:
        if isinstance(data, bytes):
            try:
                data = data.decode("utf-8")
            except UnicodeDecodeError:
                raise AuthenticationError("Failed to authenticate: the credentials are not UTF-8 text") from None
        if not isinstance(data, str) or not data:
            raise AuthenticationError("Authentication required: no credentials were given")
        parts = data.split(":")
        if len(parts) != 2:
            raise AuthenticationError("Failed to authenticate: expected user:password")
        user, password = parts
        if not self._check(self.users.get(user), password):
            raise AuthenticationError(f"Failed to authenticate: {REFUSED}")
        return Authenticated(user, self.method, None)

    def _check(self, hashed: str | None, password: str) -> bool:
        if hashed is None or not self._known_format(hashed):
            return False
        scheme = self._apr1 if hashed.startswith("$apr1$") else self._des
        try:
            return bool(scheme.verify(password, hashed))
        except ValueError:  # a malformed hash: refused, as Pulsar's
            return False
