"""The broker's loaded persistent topics, indexed by namespace and by name.

A change to a namespace or topic record (its policies) must reach the loaded topics it governs.
Finding them by walking every loaded topic and parsing its name made each topic creation cost
O(loaded topics), because creating a topic writes its record and so fires that watch: loading 3,000
topics in one namespace spent a quarter of the broker's time there, and 100,000 would have taken
hours (the exhaustion scenario, tests/faults/test_exhaustion.py). ``LoadedTopics`` is the ``dict``
the service always used, ``str(name) -> PersistentTopic``, that also keeps the parsed names and two
indexes up to date on every insert and removal, so the watch finds what it governs in O(what it
governs).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn

from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent import PersistentTopic

_NsKey = tuple[str, str]
_NameKey = tuple[str, str, str]


class LoadedTopics(dict[str, "PersistentTopic"]):
    """``dict[str, PersistentTopic]`` with ``name_of``, ``in_namespace`` and ``named``.

    Only the mutators the broker uses are supported (``[]=``, ``del``, ``pop``, ``clear``); the
    others raise rather than bypass the indexes."""

    def __init__(self) -> None:
        super().__init__()
        self._names: dict[str, TopicName] = {}
        self._by_namespace: dict[_NsKey, set[str]] = {}
        self._by_name: dict[_NameKey, set[str]] = {}

    # ------------------------------------------------------------------ queries
    def name_of(self, key: str) -> TopicName:
        """The parsed name of a loaded topic."""
        return self._names[key]

    def in_namespace(self, tenant: str, namespace: str) -> list[str]:
        """Keys of the loaded topics of ``tenant/namespace``."""
        return list(self._by_namespace.get((tenant, namespace), ()))

    def named(self, tenant: str, namespace: str, local: str) -> list[str]:
        """Keys of the loaded topics a topic record ``local`` governs: the topic of that name and,
        when ``local`` is a partitioned topic's name, each of its loaded partitions."""
        return list(self._by_name.get((tenant, namespace, local), ()))

    # ------------------------------------------------------------------ mutators
    def __setitem__(self, key: str, topic: PersistentTopic) -> None:
        if key not in self:
            name = TopicName.parse(key)
            self._names[key] = name
            self._by_namespace.setdefault((name.tenant, name.namespace), set()).add(key)
            for local in self._locals(name):
                self._by_name.setdefault((name.tenant, name.namespace, local), set()).add(key)
        super().__setitem__(key, topic)

    def __delitem__(self, key: str) -> None:
        super().__delitem__(key)
        self._forget(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            return super().pop(key, *default)
        topic = super().pop(key)
        self._forget(key)
        return topic

    def clear(self) -> None:
        super().clear()
        self._names.clear()
        self._by_namespace.clear()
        self._by_name.clear()

    def _unsupported(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("LoadedTopics supports []=, del, pop and clear only (they keep its indexes)")

    update = setdefault = popitem = __ior__ = _unsupported

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _locals(name: TopicName) -> Iterable[str]:
        yield name.local_name
        base = name.partitioned_base.local_name
        if base != name.local_name:
            yield base

    def _forget(self, key: str) -> None:
        name = self._names.pop(key)
        ns = (name.tenant, name.namespace)
        _discard(self._by_namespace, ns, key)
        for local in self._locals(name):
            _discard(self._by_name, (*ns, local), key)


def _discard(index: dict[Any, set[str]], at: Any, key: str) -> None:
    keys = index.get(at)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[at]
