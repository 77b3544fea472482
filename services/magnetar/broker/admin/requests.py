"""What the admin routes read from a request, and the one refusal they share.

The JSON body (empty means none), the ``?force=true`` flag, an integer path part, the persistent
topic a ``{tenant}/{ns}/{topic}`` path names, and a policy endpoint's field: every resource module
reads them the same way, so they are defined once here. ``NotAllowed`` is the 405 Pulsar answers
for an operation it refuses on a kind of topic (the server's error middleware maps it).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from magnetar.broker.policies.model import POLICY_ENDPOINTS
from magnetar.protocol.errors import InvalidCommand, MagnetarError, NotFound
from magnetar.protocol.topic_name import TopicName


class NotAllowed(MagnetarError):
    """HTTP 405: an operation Pulsar refuses on this kind of topic."""


async def json_body(request: web.Request) -> Any:
    text = await request.text()
    return json.loads(text) if text.strip() else None


def is_forced(request: web.Request) -> bool:
    return request.query.get("force", "false").lower() == "true"


def int_param(request: web.Request, key: str) -> int:
    raw = request.match_info[key]
    try:
        return int(raw)
    except ValueError:
        raise InvalidCommand(f"{key} must be an integer, got {raw!r}") from None


def topic_name(request: web.Request) -> TopicName:
    """The persistent topic of a ``.../{tenant}/{ns}/{topic}`` path."""
    m = request.match_info
    return TopicName.parse(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")


def policy_field(request: web.Request) -> str:
    """The policy field a ``.../{policy}`` path names (``POLICY_ENDPOINTS``); 404 for another name."""
    policy = request.match_info["policy"]
    field = POLICY_ENDPOINTS.get(policy)
    if field is None:
        raise NotFound(f"unknown policy endpoint {policy!r}")
    return field
