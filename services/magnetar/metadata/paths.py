"""Builders for every path of the metadata tree (DESIGN.md §5), so nobody hand-writes them.

One place decides how names become path segments. A path segment can never contain ``/``, so
names that may (a full topic name ``persistent://t/ns/x``) are spread over several segments the
way Pulsar lays out its managed ledgers: ``/managed-ledgers/t/ns/persistent/x``. That keeps
``children()`` meaningful at every level (the topics of a namespace are the children of its
folder) and keeps the tree identical in the LMDB and etcd stores.
"""

from __future__ import annotations

from magnetar.protocol.topic_name import TopicName

TENANTS = "/tenants"
NAMESPACES = "/namespaces"
TOPICS = "/topics"
MANAGED_LEDGERS = "/managed-ledgers"
LEDGERS = "/ledgers"
LEDGER_ID_COUNTER = "/counters/ledger-id"
BOOKIES = "/bookies"
BOOKIES_AVAILABLE = "/bookies/available"
BOOKIES_COOKIES = "/bookies/cookies"
BROKERS_AVAILABLE = "/brokers/available"
OWNERSHIP = "/ownership"
UNDERREPLICATED = "/underreplicated"
SCHEMAS = "/schemas"
LOADBALANCE_BROKERS = "/loadbalance/brokers"
LOADBALANCE_LEADER = "/loadbalance/leader"
BUNDLE_DESTINATIONS = "/loadbalance/bundle-destinations"


def _segment(kind: str, value: str) -> str:
    """Refuse a value that would change the shape of the tree (an empty or ``/``-bearing name)."""
    if not value or "/" in value:
        raise ValueError(f"invalid {kind} {value!r} for a metadata path segment")
    return value


def join(*segments: str) -> str:
    """``join("a", "b") == "/a/b"``; each segment is checked."""
    return "/" + "/".join(_segment("segment", s) for s in segments)


def tenant(name: str) -> str:
    return f"{TENANTS}/{_segment('tenant', name)}"


def namespace(tenant_name: str, ns: str) -> str:
    """Namespace policies live at ``/namespaces/{tenant}/{ns}``."""
    return f"{NAMESPACES}/{_segment('tenant', tenant_name)}/{_segment('namespace', ns)}"


def namespaces_of(tenant_name: str) -> str:
    """The folder whose children are a tenant's namespaces."""
    return f"{NAMESPACES}/{_segment('tenant', tenant_name)}"


def topic(tenant_name: str, ns: str, name: str) -> str:
    """A topic's own record (its partition count): ``/topics/{tenant}/{ns}/{name}``."""
    t, n, x = _segment("tenant", tenant_name), _segment("namespace", ns), _segment("topic", name)
    return f"{TOPICS}/{t}/{n}/{x}"


def topics_of(tenant_name: str, ns: str) -> str:
    return f"{TOPICS}/{_segment('tenant', tenant_name)}/{_segment('namespace', ns)}"


def managed_ledger(topic_name: TopicName | str) -> str:
    """``/managed-ledgers/{tenant}/{ns}/{domain}/{local}``: the ledger list of one topic (or
    partition). Accepts a ``TopicName`` or any string ``TopicName.parse`` understands."""
    t = topic_name if isinstance(topic_name, TopicName) else TopicName.parse(topic_name)
    return f"{MANAGED_LEDGERS}/{t.tenant}/{t.namespace}/{t.domain}/{t.local_name}"


def managed_ledger_cursor(topic_name: TopicName | str, cursor: str) -> str:
    """A durable cursor (subscription) of a managed ledger, one key per cursor so that cursor
    updates do not contend with ledger-list updates on the same version."""
    return f"{managed_ledger(topic_name)}/cursors/{_segment('cursor', cursor)}"


def managed_ledger_cursors(topic_name: TopicName | str) -> str:
    return f"{managed_ledger(topic_name)}/cursors"


def managed_ledger_compaction(topic_name: TopicName | str) -> str:
    """A topic's compaction record: its compacted ledger and horizon (broker/compaction/controller.py)."""
    return f"{managed_ledger(topic_name)}/compaction"


def managed_ledger_properties(topic_name: TopicName | str) -> str:
    """The folder of a managed ledger's properties: state kept by features of the topic (the
    deduplication snapshot), deleted with the managed ledger."""
    return f"{managed_ledger(topic_name)}/properties"


def managed_ledger_property(topic_name: TopicName | str, key: str) -> str:
    return f"{managed_ledger_properties(topic_name)}/{_segment('property', key)}"


def schema(tenant_name: str, ns: str, local: str) -> str:
    """A topic's schema registry record (WIRE.md R123): ``/schemas/{tenant}/{ns}/{local}``, keyed by
    the base topic (no domain, no ``-partition-N``) so partitions and both domains share it."""
    t, n, x = _segment("tenant", tenant_name), _segment("namespace", ns), _segment("topic", local)
    return f"{SCHEMAS}/{t}/{n}/{x}"


def ledger(ledger_id: int) -> str:
    if ledger_id < 0:
        raise ValueError(f"ledger ids are non-negative, got {ledger_id}")
    return f"{LEDGERS}/{ledger_id}"


def bookie_available(bookie_id: str) -> str:
    """Ephemeral registration of a running bookie; its value is the bookie's address."""
    return f"{BOOKIES_AVAILABLE}/{_segment('bookie id', bookie_id)}"


def bookie_cookie(bookie_id: str) -> str:
    """Persistent identity cookie of a bookie: a wiped disk must not rejoin silently."""
    return f"{BOOKIES_COOKIES}/{_segment('bookie id', bookie_id)}"


def broker_available(broker_id: str) -> str:
    """Ephemeral registration of a live broker; its value is the broker's service and admin URLs."""
    return f"{BROKERS_AVAILABLE}/{_segment('broker id', broker_id)}"


def load_report(broker_id: str) -> str:
    """A broker's load report (Pulsar's ``/loadbalance/brokers/{broker}``, ``LocalBrokerData`` JSON),
    ephemeral: a dead broker's report goes with its session."""
    return f"{LOADBALANCE_BROKERS}/{_segment('broker id', broker_id)}"


def bundle_destination(tenant_name: str, ns: str, bundle: str) -> str:
    """Where the next owner of an unloaded bundle should be (``unload --destinationBroker``, and the
    leader's choice when it sheds), read by the placement of that bundle."""
    t, n, b = _segment("tenant", tenant_name), _segment("namespace", ns), _segment("bundle", bundle)
    return f"{BUNDLE_DESTINATIONS}/{t}/{n}/{b}"


def ownership(tenant_name: str, ns: str, bundle: str) -> str:
    """Ephemeral ownership of a namespace bundle by one broker."""
    t, n, b = _segment("tenant", tenant_name), _segment("namespace", ns), _segment("bundle", bundle)
    return f"{OWNERSHIP}/{t}/{n}/{b}"


def underreplicated(ledger_id: int) -> str:
    if ledger_id < 0:
        raise ValueError(f"ledger ids are non-negative, got {ledger_id}")
    return f"{UNDERREPLICATED}/{ledger_id}"
