"""Where an export's progress lives: a durable subscription per partition topic, as Pulsar users keep it.

The export named ``N`` owns the subscription ``magnetar-export-N`` on every partition topic it
exports. Its mark-delete position is the last entry already committed to the target; nothing else
is stored anywhere. Two things follow, both on purpose:

- the broker keeps the progress (replicated in the metadata store with every other cursor), so a
  job needs no database, and ``magnetar-admin topics subscriptions`` / ``stats`` show an export's
  backlog like any consumer's;
- retention never trims a ledger the export has not yet passed: a subscription holds its backlog,
  so data published while the export was not running is still there when it next runs (the flip
  side, as for any idle subscription: an export that stops running for good holds its topic's
  backlog until the subscription is deleted, or a backlog quota evicts it).

Calls, all through the admin REST API (the brokers stay the only writers of cursors):

- ``ensure``: Pulsar's createSubscription (``PUT .../subscription/{sub}``) at the earliest
  message, where the subscription is missing (a 409 means another run made it first: fine);
- ``positions``: each topic's ``markDeletePosition`` from internalStats ``cursors``;
- ``commit``: Pulsar's reset-cursor by message id (``POST .../subscription/{sub}/resetcursor``)
  with ``isExcluded: true``, which puts the mark-delete position exactly on the last exported
  entry (without it the cursor would land one entry earlier and that entry would be exported
  twice).
"""

from __future__ import annotations

import urllib.parse

from magnetar.jobs.admin_client import AdminClient, AdminError, topic_path

Position = tuple[int, int]
SUBSCRIPTION_PREFIX = "magnetar-export-"
EARLIEST: Position = (-1, -1)


def subscription_name(export_name: str) -> str:
    """``magnetar-export-<name>``: the subscription that holds the export ``name``'s progress."""
    return SUBSCRIPTION_PREFIX + export_name


def parse_position(text: str) -> Position:
    """``"12:34"`` -> ``(12, 34)`` (internalStats' position format)."""
    ledger, _, entry = str(text).partition(":")
    return int(ledger), int(entry)


def format_position(pos: Position) -> str:
    return f"{pos[0]}:{pos[1]}"


class ExportProgress:
    """The progress of the export ``name`` on partition topics, read and moved over ``admin``."""

    def __init__(self, admin: AdminClient, name: str) -> None:
        self.admin = admin
        self.subscription = subscription_name(name)

    def _path(self, topic: str) -> str:
        return f"{topic_path(topic)}/subscription/{urllib.parse.quote(self.subscription, safe='')}"

    def ensure(self, topic: str) -> None:
        """Create the subscription on ``topic`` at the earliest message if it is missing."""
        cursors = self.admin.internal_stats(topic).get("cursors") or {}
        if self.subscription in cursors:
            return
        try:
            self.admin.put(self._path(topic), {"ledgerId": -1, "entryId": -1, "partitionIndex": -1})
        except AdminError as exc:
            if exc.status != 409:  # 409: made meanwhile (by a concurrent run): its position stands
                raise

    def position(self, topic: str) -> Position:
        """The last entry of ``topic`` already exported (``(L, -1)``: none of ledger L yet)."""
        cursors = self.admin.internal_stats(topic).get("cursors") or {}
        cursor = cursors.get(self.subscription)
        if cursor is None:
            raise AdminError(404, f"subscription {self.subscription} is missing on {topic}")
        return parse_position(cursor["markDeletePosition"])

    def start(self, topics: list[str]) -> dict[str, Position]:
        """Each topic's position, its subscription made first where missing."""
        out = {}
        for topic in topics:
            self.ensure(topic)
            out[topic] = self.position(topic)
        return out

    def commit(self, topic: str, last_exported: Position) -> None:
        """Record that everything up to and including ``last_exported`` is in the target."""
        body = {
            "ledgerId": last_exported[0],
            "entryId": last_exported[1],
            "partitionIndex": -1,
            "isExcluded": True,
        }
        self.admin.post(self._path(topic) + "/resetcursor", body)
