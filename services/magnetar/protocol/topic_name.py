"""Topic names: ``{domain}://tenant/namespace/topic``, with ``-partition-N`` for partitions.

The domain is ``persistent`` (stored in a managed ledger) or ``non-persistent`` (never stored:
delivered to the consumers connected at publish time, ``broker/non_persistent_topic.py``). Short
names expand the way Pulsar's do, always to the persistent domain: ``my-topic`` is
``persistent://public/default/my-topic`` and ``tenant/ns/topic`` is
``persistent://tenant/ns/topic``; a non-persistent topic is always named in full.
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
_SEGMENT = re.compile(r"^[A-Za-z0-9_.=:\-]+$")
_PARTITIONED = re.compile(r"^(?P<base>.+)-partition-(?P<n>\d+)$")


def _check_segment(kind: str, value: str, full: str) -> None:
    if not value or not _SEGMENT.match(value):
        raise InvalidTopicName(f"invalid {kind} {value!r} in topic name {full!r}")


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local_name: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
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
