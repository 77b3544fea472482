"""Admin-API helpers for tests on a real standalone, built on ``standalone.admin_call``: a topic's
admin path, its stats (and one subscription's), and a namespace of the test's own with policies.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.support.standalone import StandaloneProcess, admin_call

from magnetar.protocol.topic_name import TopicName


def topic_path(topic: str) -> str:
    """``/admin/v2/{persistent|non-persistent}/tenant/namespace/topic``: the topic's admin path."""
    name = TopicName.parse(topic)
    return f"/admin/v2/{name.domain}/{name.path}"


def topic_stats(sa: StandaloneProcess, topic: str) -> dict[str, Any]:
    """The topic's stats (``GET .../stats``), which must answer 200."""
    status, body = admin_call(sa, "GET", topic_path(topic) + "/stats")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def sub_stats(sa: StandaloneProcess, topic: str, sub: str) -> dict[str, Any]:
    """The stats of subscription ``sub`` of ``topic``."""
    return dict(topic_stats(sa, topic)["subscriptions"][sub])


def create_namespace(sa: StandaloneProcess, prefix: str, *, tenant: str = "public", **policies: Any) -> str:
    """Create ``{tenant}/{prefix}{8 random hex digits}`` and POST each of ``policies`` to it
    (``retention={...}`` goes to ``/admin/v2/namespaces/{ns}/retention``); every call must answer 204."""
    ns = f"{tenant}/{prefix}{uuid.uuid4().hex[:8]}"
    assert admin_call(sa, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    for path, body in policies.items():
        status, reply = admin_call(sa, "POST", f"/admin/v2/namespaces/{ns}/{path}", body)
        assert status == 204, reply
    return ns
