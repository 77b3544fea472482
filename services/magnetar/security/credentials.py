"""The credentials a server process sends as a client: Pulsar's ``*ClientAuthenticationPlugin`` and
``*ClientAuthenticationParameters`` pairs, turned into a token supplier.

A broker writing to bookies (``bookkeeperClientAuthentication*``), a bookie's autorecovery copying
entries between bookies, and a Spark job (``authPluginClassName``/``authParams``) all name their
token the same ways: ``token:<jwt>``, ``file:///path`` (read again on every call, so a token that a
Kubernetes Secret or a secret manager rotates in place is picked up on the next connection),
Pulsar's JSON ``{"token": "..."}``, or a bare JWT. The plugin is ``token`` or Pulsar's
``org.apache.pulsar.client.impl.auth.AuthenticationToken``; any other plugin is refused at start-up
rather than running without the credentials asked for.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path

TokenSupplier = Callable[[], str]

# Names a ``*AuthenticationPlugin`` setting may hold for token credentials.
TOKEN_PLUGIN_NAMES = ("token", "org.apache.pulsar.client.impl.auth.AuthenticationToken")


class CredentialsError(ValueError):
    """Unusable credential settings (the message names the setting)."""


def _file_supplier(url: str) -> TokenSupplier:
    path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)) if url.startswith("file:") else Path(url)

    def read() -> str:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise CredentialsError(f"cannot read token file {path}: {exc.strerror}") from None

    return read


def token_supplier(
    plugin: str | None, params: str | None, *, setting: str = "AuthenticationParameters"
) -> TokenSupplier | None:
    """A callable returning the current token, or None when ``params`` is empty (no credentials).

    ``setting`` names the settings in error messages (``bookkeeperClientAuthentication``...).
    A ``file:`` token is read once here, so a missing file stops the process at start-up.
    """
    if not params or not params.strip():
        return None
    if plugin and plugin.strip() not in TOKEN_PLUGIN_NAMES:
        raise CredentialsError(f"{setting}Plugin {plugin!r} is not supported (supported: token)")
    text = params.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise CredentialsError(f"{setting}Parameters is not valid JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("token"), str):
            raise CredentialsError(f'{setting}Parameters as JSON must be {{"token": "..."}}')
        return token_supplier(plugin, doc["token"], setting=setting)
    if text.startswith("file:"):
        supplier = _file_supplier(text)
        supplier()  # fail at start-up, not on the first write
        return supplier
    token = text[len("token:") :].strip() if text.startswith("token:") else text
    if not token:
        raise CredentialsError(f"{setting}Parameters holds an empty token")
    return lambda: token
