"""Consumers over many topics: the topic list of ``subscribe`` and the pattern subscription's discovery.

``Client.subscribe`` takes, as pulsar-client does, one topic name, a list of names, or a compiled
regular expression. Every form ends up as one ``Consumer`` over the partitions of all the topics
(each partition a ``PartitionConsumer`` of its own, attached to its own broker); this module holds
what the list and the pattern forms need beyond the single-topic one:

- ``TopicPattern``: the namespace a pattern lists topics in, taken from its fixed prefix
  (``persistent://tenant/namespace/``, or ``tenant/namespace/``, or none: ``public/default``), and
  the match itself, ``re.fullmatch`` against the full topic name, as Pulsar's
  ``PatternMultiTopicsConsumerImpl`` matches;
- ``PatternWatcher``: re-lists the namespace (``get_topics_of_namespace``, WIRE.md R20g) every
  ``pattern_auto_discovery_period`` seconds, subscribes the matching topics that appeared and drops
  the ones that are gone, on the live consumer. The list names a partitioned topic once, by its
  own name; the caller subscribes each of its partitions;

The retry topic a consumer with ``retry_enable`` also subscribes to is ``dead_letter.retry_letter_topic``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable

from magnetar.protocol.errors import InvalidTopicName, MagnetarError
from magnetar.protocol.topic_name import DEFAULT_NAMESPACE, DEFAULT_TENANT, TopicName

log = logging.getLogger(__name__)

PERSISTENT_PREFIX = "persistent://"


class TopicPattern:
    """A topic pattern: the namespace its topics are listed in, and the regular expression they must match."""

    __slots__ = ("namespace", "regex")

    def __init__(self, namespace: str, regex: re.Pattern[str]) -> None:
        self.namespace = namespace
        self.regex = regex

    @classmethod
    def parse(cls, pattern: re.Pattern[str]) -> TopicPattern:
        """Split ``pattern`` into its fixed ``tenant/namespace`` prefix and the full-name regex.

        A pattern without the ``persistent://`` domain is matched as if it had it, and one without a
        ``tenant/namespace/`` prefix is in ``public/default``, as short topic names are. The tenant
        and namespace are taken literally: a namespace cannot be a pattern (Pulsar lists one
        namespace per pattern consumer).
        """
        text = pattern.pattern
        if not isinstance(text, str):
            raise TypeError("a topic pattern must be a str pattern, not bytes")
        if "://" in text:
            domain, rest = text.split("://", 1)
            if domain != "persistent":
                raise InvalidTopicName(
                    f"topic pattern {text!r}: only persistent topics can be subscribed to "
                    "(RegexSubscriptionMode.PersistentOnly)"
                )
            full = text
        else:
            rest = text
            full = PERSISTENT_PREFIX + (text if "/" in text else f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{text}")
        parts = rest.split("/", 2)
        if len(parts) == 1 and "://" not in text:
            tenant, namespace = DEFAULT_TENANT, DEFAULT_NAMESPACE
        elif len(parts) == 3:
            tenant, namespace = parts[0], parts[1]
            TopicName.parse(f"{tenant}/{namespace}/x")  # the prefix must be a real namespace
        else:
            raise InvalidTopicName(
                f"topic pattern {text!r} must be 'persistent://tenant/namespace/<regex>', "
                "'tenant/namespace/<regex>' or '<regex>'"
            )
        regex = pattern if full == text else re.compile(full, pattern.flags)
        return cls(f"{tenant}/{namespace}", regex)

    def matches(self, topic: str) -> bool:
        return self.regex.fullmatch(topic) is not None

    def filter(self, topics: Iterable[str]) -> set[str]:
        """The full names of the persistent topics in ``topics`` that match."""
        found: set[str] = set()
        for t in topics:
            try:
                name = str(TopicName.parse(t))
            except InvalidTopicName:
                continue
            if self.matches(name):
                found.add(name)
        return found


class PatternWatcher:
    """Keeps a pattern consumer's topics in step with its namespace: lists, adds, removes, every period.

    ``add_topics`` subscribes new topics (every partition of a partitioned one) and adds them to the
    consumer; ``remove_topics`` closes and drops the partition consumers of topics that are gone.
    A failed round (broker unreachable, a topic that cannot be subscribed yet) is logged and tried
    again next period: the topics it did not add are still "new" then.
    """

    def __init__(
        self,
        pattern: TopicPattern,
        period_seconds: float,
        known: Iterable[str],
        *,
        list_topics: Callable[[str], Awaitable[list[str]]],
        add_topics: Callable[[list[str]], Awaitable[list[str]]],
        remove_topics: Callable[[list[str]], Awaitable[None]],
        is_closed: Callable[[], bool],
    ) -> None:
        if period_seconds <= 0:
            raise ValueError("pattern_auto_discovery_period must be positive")
        self.pattern = pattern
        self.period = float(period_seconds)
        self.known: set[str] = set(known)
        self._list = list_topics
        self._add = add_topics
        self._remove = remove_topics
        self._is_closed = is_closed
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # completed discovery rounds (for tests and logs)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"magnetar-pattern-discovery {self.pattern.regex.pattern}"
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            if self._is_closed():
                return
            try:
                await self.discover_once()
            except MagnetarError as exc:
                log.warning(
                    "pattern %s: topic discovery failed (%s); retrying in %ss",
                    self.pattern.regex.pattern,
                    exc,
                    self.period,
                )

    async def discover_once(self) -> None:
        """One round: list the namespace, subscribe what is new, drop what is gone."""
        topics = self.pattern.filter(await self._list(self.pattern.namespace))
        new = sorted(topics - self.known)
        gone = sorted(self.known - topics)
        if gone:
            await self._remove(gone)
            self.known.difference_update(gone)
        if new:
            added = await self._add(new)
            self.known.update(added)
        self.rounds += 1

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
