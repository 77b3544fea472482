"""Pulsar's ``PersistentTopicInternalStats`` for one loaded topic (``GET .../internalStats``).

Besides what ``pulsar-admin topics stats-internal`` shows, the Spark jobs build on it: the data
source plans its reads from the ledger list and, with ``?metadata=true``, each ledger's ensembles
(which bookies hold which entries); the retention sweep applies the trimming rule to the ledger
sizes and close times and the cursors' positions. ``lastConfirmedEntry`` is the newest entry the
broker acknowledged to a producer, so a reader that stops there never reads past what is durable.

Differences from Pulsar, on purpose: a ledger's ``metadata`` is an object (ensembles, quorums,
state), not the Java ``toString`` of BookKeeper's LedgerMetadata; ``retainFrom`` names the position
a broker feature (deduplication's replay) still needs, which holds back trimming as a cursor would.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.admin.forwarding import topic_on_owner
from magnetar.broker.compaction.controller import CompactedTopic, TopicCompaction
from magnetar.ledger.metadata_format import LedgerMetadata
from magnetar.protocol.errors import NoSuchLedger

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def ledger_metadata_doc(md: LedgerMetadata) -> dict[str, Any]:
    """A ledger's metadata as JSON: enough for a reader outside the broker to find every entry."""
    return {
        "state": md.state.value,
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum,
        "ackQuorumSize": md.ack_quorum,
        "lastEntryId": md.last_entry_id,
        "length": md.length,
        "ctime": md.ctime,
        "ensembles": [{"firstEntry": f.first_entry, "bookies": list(f.bookies)} for f in md.fragments],
    }


async def internal_stats_of(topic: CompactedTopic, *, metadata: bool = False) -> dict[str, Any]:
    """The parts of Pulsar's PersistentTopicInternalStats this broker knows; ``metadata`` adds each
    ledger's metadata as the ``metadata=true`` query parameter asks."""
    ml = topic.ml
    current = ml.current_ledger_id
    ledgers: list[dict[str, Any]] = []
    for lid in ml.ledger_ids:
        info = ml.ledger_info(lid)
        if info is None:
            continue  # trimmed while we looked
        doc: dict[str, Any] = {
            "ledgerId": lid,
            "entries": info.entries,
            "size": info.size,
            # Not in Pulsar's LedgerInfo: messages (a batch entry holds many), for the sweep's report.
            "messages": ml.messages_in(lid),
            # When the ledger was closed, in epoch ms (0 for the one being written), as Pulsar's.
            "timestamp": int(info.closed_at * 1000),
            "offloaded": False,
            "underReplicated": False,
        }
        if metadata:
            try:
                doc["metadata"] = ledger_metadata_doc(await ml.ledger_manager.get_metadata(lid))
            except NoSuchLedger:
                continue  # trimmed while we looked
        ledgers.append(doc)
    last = ledgers[-1] if ledgers else None
    kept = ml.retain_from() if ml.retain_from is not None else None
    return {
        "entriesAddedCounter": ml.total_entries,
        "numberOfEntries": ml.total_entries,
        "totalSize": ml.total_size,
        "currentLedgerEntries": last["entries"] if last is not None and last["ledgerId"] == current else 0,
        "currentLedgerSize": last["size"] if last is not None and last["ledgerId"] == current else 0,
        "lastConfirmedEntry": str(ml.last_confirmed),
        "state": "LedgerOpened" if current is not None else "Closed",
        "ledgers": ledgers,
        "cursors": {
            name: {
                "markDeletePosition": str(cur.mark_delete),
                "readPosition": str(cur.read_position),
                "active": True,
                "state": "Open",
            }
            for name, cur in ml.cursors.items()
        },
        "retainFrom": None if kept is None else str(kept),
        "compactedLedger": topic.compaction.compacted_ledger_stats()
        if topic.compaction is not None
        else TopicCompaction.never_compacted(),
    }


def add_internal_stats_route(app: web.Application, service: BrokerService) -> None:
    """``GET /admin/v2/persistent/{tenant}/{ns}/{topic}/internalStats[?metadata=true]``, answered by
    the topic's owner (forwarded there in a cluster). Register before the ``.../{topic}/{policy}``
    catch-all."""

    async def internal_stats(request: web.Request) -> web.StreamResponse:
        topic, forwarded = await topic_on_owner(service, request)
        if forwarded is not None:
            return forwarded
        wanted = request.query.get("metadata", "false").lower() == "true"
        return web.json_response(await internal_stats_of(topic, metadata=wanted))

    app.router.add_get("/admin/v2/persistent/{tenant}/{ns}/{topic}/internalStats", internal_stats)
