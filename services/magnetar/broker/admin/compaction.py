"""Admin REST routes of compaction, on Pulsar's paths.

``PUT .../{topic}/compaction`` starts one (204; 409 "Compaction already in progress"),
``GET .../{topic}/compaction`` answers Pulsar's LongRunningProcessStatus
(``{"status": "NOT_RUN" | "RUNNING" | "SUCCESS" | "ERROR", "lastError": ""}``); internal stats
(``broker/admin/internal_stats.py``) name the compacted ledger in ``compactedLedger``. In a
cluster each runs on the topic's owner (the request is forwarded there).
On a partitioned topic, as in Pulsar, use its partitions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.admin.forwarding import topic_on_owner
from magnetar.broker.compaction.controller import CompactedTopic, TopicCompaction
from magnetar.protocol.errors import TopicNotFound

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

BASE = "/admin/v2/persistent/{tenant}/{ns}/{topic}"


def add_compaction_routes(app: web.Application, service: BrokerService) -> None:
    """Register before the ``.../{topic}/{policy}`` catch-all."""

    async def topic_of(request: web.Request) -> tuple[CompactedTopic | None, web.StreamResponse | None]:
        found: tuple[CompactedTopic | None, web.StreamResponse | None] = await topic_on_owner(service, request)
        return found

    def compaction_of(topic: CompactedTopic) -> TopicCompaction:
        comp = topic.compaction
        if comp is None:
            raise TopicNotFound(f"topic {topic.name} has no compaction")
        return comp

    async def trigger(request: web.Request) -> web.StreamResponse:
        topic, forwarded = await topic_of(request)
        if forwarded is not None:
            return forwarded
        assert topic is not None
        compaction_of(topic).trigger()
        return web.Response(status=204)

    async def status(request: web.Request) -> web.StreamResponse:
        topic, forwarded = await topic_of(request)
        if forwarded is not None:
            return forwarded
        assert topic is not None
        return web.json_response(compaction_of(topic).status_doc())

    app.router.add_put(BASE + "/compaction", trigger)
    app.router.add_get(BASE + "/compaction", status)
