"""Consumers over many topics: the topic list of ``subscribe`` and the pattern subscription's discovery.

``Client.subscribe`` takes, as pulsar-client does, one topic name, a list of names, or a compiled
regular expression. Every form ends up as one ``Consumer`` over the partitions of all the topics
(each partition a ``PartitionConsumer`` of its own, attached to its own broker); this module holds
what the list and the pattern forms need beyond the single-topic one:

- ``TopicPattern``: the namespace a pattern lists topics in, taken from its fixed prefix
  (``persistent://tenant/namespace/``, or ``tenant/namespace/``, or none: ``public/default``), the
  domains listed (pulsar-client's ``RegexSubscriptionMode``: persistent topics only by default,
  non-persistent only, or all; WIRE.md R107), and the match itself: ``re.fullmatch`` of the
  pattern without its domain against ``tenant/namespace/topic``, as pulsar-client's pattern
  consumer matches (the mode, not the pattern's domain, picks the domains);
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

from magnetar.client.options import RegexSubscriptionMode
from magnetar.client.tasks import cancel_and_wait
from magnetar.protocol import commands as cmds
from magnetar.protocol.errors import InvalidTopicName, MagnetarError
from magnetar.protocol.topic_name import DEFAULT_NAMESPACE, DEFAULT_TENANT, NON_PERSISTENT, PERSISTENT, TopicName

log = logging.getLogger(__name__)

# pulsar-client's RegexSubscriptionMode (by value: PersistentOnly, NonPersistentOnly, AllTopics)
# as a ``get_topics_of_namespace`` mode.
TOPICS_MODE_OF = {
    RegexSubscriptionMode.PersistentOnly: cmds.TOPICS_PERSISTENT,
    RegexSubscriptionMode.NonPersistentOnly: cmds.TOPICS_NON_PERSISTENT,
    RegexSubscriptionMode.AllTopics: cmds.TOPICS_ALL,
}
# The domains each ``get_topics_of_namespace`` mode lists.
_DOMAINS = {
    cmds.TOPICS_PERSISTENT: (PERSISTENT,),
    cmds.TOPICS_NON_PERSISTENT: (NON_PERSISTENT,),
    cmds.TOPICS_ALL: (PERSISTENT, NON_PERSISTENT),
}


class TopicPattern:
    """A topic pattern: the namespace its topics are listed in, and the regular expression they must match."""

    __slots__ = ("mode", "namespace", "regex")

    def __init__(self, namespace: str, regex: re.Pattern[str], mode: str = cmds.TOPICS_PERSISTENT) -> None:
        self.namespace = namespace
        self.regex = regex
        self.mode = mode

    @classmethod
    def parse(cls, pattern: re.Pattern[str], mode: str = cmds.TOPICS_PERSISTENT) -> TopicPattern:
        """Split ``pattern`` into its fixed ``tenant/namespace`` prefix and the regex without domain.

        A pattern without a ``tenant/namespace/`` prefix is in ``public/default``, as short topic
        names are. Its domain (``persistent://`` or ``non-persistent://``), if any, is dropped: the
        ``mode`` (a ``get_topics_of_namespace`` mode) says which domains are listed. The tenant and
        namespace are taken literally: a namespace cannot be a pattern (Pulsar lists one namespace
        per pattern consumer).
        """
        text = pattern.pattern
        if not isinstance(text, str):
            raise TypeError("a topic pattern must be a str pattern, not bytes")
        if mode not in cmds.TOPICS_MODES:
            raise ValueError(f"unknown topic listing mode {mode!r}")
        if "://" in text:
            domain, rest = text.split("://", 1)
            if domain not in (PERSISTENT, NON_PERSISTENT):
                raise InvalidTopicName(f"topic pattern {text!r}: the domain must be persistent:// or non-persistent://")
            full = rest
        else:
            rest = text
            full = text if "/" in text else f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{text}"
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
        return cls(f"{tenant}/{namespace}", regex, mode)

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` (a full name) is of a listed domain and matches the pattern."""
        try:
            name = TopicName.parse(topic)
        except InvalidTopicName:
            return False
        if name.domain not in _DOMAINS[self.mode]:
            return False
        return self.regex.fullmatch(name.path) is not None

    def filter(self, topics: Iterable[str]) -> set[str]:
        """The full names of the topics in ``topics`` that match."""
        found: set[str] = set()
        for t in topics:
            if self.matches(t):
                found.add(str(TopicName.parse(t)))
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
        await cancel_and_wait(task)
