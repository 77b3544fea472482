"""Topic names: ``{domain}://tenant/namespace/topic``, with ``-partition-N`` for partitions.

The domain is ``persistent`` (stored in a managed ledger) or ``non-persistent`` (never stored:
delivered to the consumers connected at publish time, ``broker/topics/non_persistent.py``). Short
names expand the way Pulsar's do, always to the persistent domain: ``my-topic`` is
``persistent://public/default/my-topic`` and ``tenant/ns/topic`` is
``persistent://tenant/ns/topic``; a non-persistent topic is always named in full.

Names become metadata-store keys and admin URL paths, so every way in (binary ``lookup``,
``producer``, ``subscribe``; every admin route) checks them here before anything is stored
(WIRE.md R92): a tenant, namespace or topic is 1 to 255 characters of ``A-Z a-z 0-9 _ . = : -``
(Pulsar's NamedEntity characters), not ``.`` or ``..`` (they would walk up a key path), and the
whole check is a full match (``re.match`` with ``$`` would let a trailing newline through). That
refuses ``/`` however it was encoded (an admin path's ``%2F`` arrives decoded), ``%``, NUL and
control characters, and every non-ASCII character (no look-alike or normalising names).
Subscription names are freer, as Pulsar's: anything printable except ``/``, up to 1024 characters,
and not ``.`` or ``..``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar.protocol.errors import InvalidTopicName

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
DOMAINS = (PERSISTENT, NON_PERSISTENT)
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"
_SEGMENT = re.compile(r"[A-Za-z0-9_.=:\-]+")
_PARTITIONED = re.compile(r"^(?P<base>.+)-partition-(?P<n>\d+)$")
MAX_NAME_LENGTH = 255
MAX_SUBSCRIPTION_LENGTH = 1024


def valid_segment(value: object) -> bool:
    """Whether ``value`` may be a tenant, namespace or topic (local) name (module docstring); a
    partition's ``-partition-N`` suffix does not count towards the length."""
    if not isinstance(value, str) or _SEGMENT.fullmatch(value) is None or value in (".", ".."):
        return False
    m = _PARTITIONED.match(value)
    return len(m.group("base") if m else value) <= MAX_NAME_LENGTH


def _check_segment(kind: str, value: str, full: str) -> None:
    if not valid_segment(value):
        shown = full if len(full) <= 300 else full[:300] + "..."
        raise InvalidTopicName(f"invalid {kind} {value[:300]!r} in topic name {shown!r}")


def check_namespace(tenant: str, namespace: str) -> None:
    """``InvalidTopicName`` unless both parts are valid names (module docstring)."""
    _check_segment("tenant", tenant, f"{tenant}/{namespace}")
    _check_segment("namespace", namespace, f"{tenant}/{namespace}")


def valid_subscription(name: object) -> bool:
    """Whether ``name`` may be a subscription name: 1..1024 printable characters, no ``/``."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_SUBSCRIPTION_LENGTH
        and name not in (".", "..")
        and "/" not in name
        and name.isprintable()
    )


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        if not isinstance(name, str):  # a decoded frame's field can be any msgpack value
            raise InvalidTopicName(f"a topic name must be a string, not {type(name).__name__}")
        full = name
        if "://" in name:
            domain, rest = name.split("://", 1)
            if domain not in DOMAINS:
                raise InvalidTopicName(f"unknown domain {domain!r} in topic name {full!r}")
        else:
            domain, rest = PERSISTENT, name
        parts = rest.split("/")
        if len(parts) == 1 and "://" not in name:
            tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
        elif len(parts) == 3:
            tenant, namespace, local = parts
        else:
            raise InvalidTopicName(
                f"topic name {full!r} must be 'topic', 'tenant/namespace/topic' or "
                "'{persistent|non-persistent}://tenant/namespace/topic'"
            )
        _check_segment("tenant", tenant, full)
        _check_segment("namespace", namespace, full)
        _check_segment("topic", local, full)
        return cls(domain, tenant, namespace, local)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def is_persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 for a topic that is not a partition."""
        m = _PARTITIONED.match(self.local_name)
        return int(m.group("n")) if m else -1

    @property
    def partitioned_base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        m = _PARTITIONED.match(self.local_name)
        if not m:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, m.group("base"))

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}")

    @property
    def path(self) -> str:
        """The ``tenant/namespace/topic`` form used in metadata paths and admin URLs."""
        return f"{self.tenant}/{self.namespace}/{self.local_name}"
