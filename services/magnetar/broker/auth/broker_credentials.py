"""The credentials a broker sends to another broker.

A broker that forwards a request to another broker (the topic's owner) sends the caller's own
``Authorization`` header on, so the owner authenticates (and, later, authorizes) the caller and
not the forwarding broker: forwarding cannot raise anyone's privileges. A call a broker makes on
its own, outside any request, carries the broker's own token
(``brokerClientAuthenticationParameters``: ``token:<jwt>``, ``file:///path`` read on every call so
that a rotated file is picked up, or Pulsar's JSON ``{"token": "..."}``).

Kept apart from the admin API's middleware (``http``) so that the broker code that calls another
broker's admin API without serving one (the namespace listing of ``topics/namespace_topics.py``)
does not load the aiohttp server; the middleware records the caller's header here.
"""

from __future__ import annotations

import contextvars
import json
import urllib.parse
from pathlib import Path

from magnetar.broker.config import BrokerConfig
from magnetar.security.credentials import TOKEN_PLUGIN_NAMES  # what brokerClientAuthenticationPlugin may name

# The ``Authorization`` header of the request being served, for forwarding it (module docstring):
# set by the admin API's middleware (``http``); "" for a caller authenticated by its certificate.
CALLER_AUTHORIZATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "magnetar_caller_authorization", default=None
)


def broker_token(config: BrokerConfig) -> str | None:
    """The broker's own token from ``brokerClientAuthentication*``, or None when it has none."""
    params = config.broker_client_authentication_parameters
    if not params:
        return None
    plugin = config.broker_client_authentication_plugin
    if plugin and plugin not in TOKEN_PLUGIN_NAMES:
        raise ValueError(f"brokerClientAuthenticationPlugin {plugin!r} is not supported (supported: token)")
    params = params.strip()
    if params.startswith("{"):
        doc = json.loads(params)
        return str(doc["token"]).strip() if isinstance(doc, dict) and "token" in doc else None
    if params.startswith("token:"):
        return params[len("token:") :].strip()
    if params.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(params).path)).read_text().strip()
    return params


def outgoing_headers(config: BrokerConfig) -> dict[str, str]:
    """``Authorization`` for a call to another broker: the caller's, else the broker's own."""
    caller = CALLER_AUTHORIZATION.get()
    if caller is not None:
        return {"Authorization": caller} if caller else {}
    token = broker_token(config)
    return {"Authorization": f"Bearer {token}"} if token else {}
