"""Namespace bundles and their ownership by brokers, through ephemeral keys in the metadata store.

A namespace is split into bundles: hash ranges of the 32-bit CRC32C of the topic name (Pulsar uses
Murmur3). Its ranges are those stored under ``bundles`` in its policies (Pulsar's BundlesData, written
by ``namespaces create --bundles`` and by splits), else the broker's ``bundles`` equal ranges (Pulsar's
``defaultNumberOfNamespaceBundles``), so a namespace created before splits existed keeps its bundles.
The ranges are cached per namespace and refreshed on every change of the namespace's record
(``namespace_changed``); ``acquire`` reads them again before it writes an ownership key, so a stale
cache never takes a bundle that a split has just replaced. A bundle is owned by the broker that created
``/ownership/{tenant}/{ns}/{bundle}`` — an ephemeral key, so ownership ends with the broker's
session: a broker that dies or is paused past its lease loses every bundle at once, and the next
lookup gives them to a live broker, which fences and recovers each topic's last ledger before it
writes (managed ledger ``open``).

Unowned bundles are placed by, in order: a live destination chosen when the bundle was unloaded
(``unload --destinationBroker``, or the leader's shedding: ``paths.bundle_destination``, deleted
once the bundle is taken); the load manager's choice (the ``choose`` hook); else rendezvous hashing
over the live brokers (``/brokers/available``), so bundles spread without a central balancer and
every broker computes the same answer from the same membership. A broker asked about a bundle that
should go elsewhere answers with a redirect to that broker, which then takes it.

Namespace isolation policies (``isolation.py``) narrow the live brokers to those that may own the
namespace before the rendezvous choice, and a broker refuses to take a bundle the policies give to
others (``acquire``), so a direct producer or subscribe on the wrong broker loads nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.cluster.advertised_listeners import Listener, choose, from_doc, to_doc
from magnetar.broker.cluster.isolation import NamespaceIsolation, NoBrokerAvailable
from magnetar.broker.loadbalance.bundle_ranges import BundleRanges, InvalidBundle, equal
from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.errors import BadVersion, NotFound, ServiceNotReady
from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: str
    broker_url: str
    web_url: str
    # The TLS listeners (``magnetar+ssl://``, ``https://``) when the broker has them; optional in
    # the JSON, so brokers of the same cluster with and without this field read each other.
    broker_url_tls: str | None = None
    web_url_tls: str | None = None
    # advertisedListeners / internalListenerName (advertised_listeners.py); optional in the JSON too.
    listeners: Mapping[str, Listener] = field(default_factory=dict, hash=False)
    internal_listener: str | None = None
    # Which run of the broker process wrote the record (random per start). A broker restarted on the
    # same host:port has the same id as its dead predecessor, whose ephemeral ownership keys live on
    # until that predecessor's lease expires: the incarnation tells them apart (``Ownership.acquire``).
    incarnation: str | None = field(default=None, compare=False)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {"id": self.broker_id, "broker_url": self.broker_url, "web_url": self.web_url}
        if self.broker_url_tls:
            doc["broker_url_tls"] = self.broker_url_tls
        if self.web_url_tls:
            doc["web_url_tls"] = self.web_url_tls
        if self.listeners:
            doc["listeners"] = to_doc(self.listeners)
            doc["internal_listener"] = self.internal_listener
        if self.incarnation:
            doc["incarnation"] = self.incarnation
        return json.dumps(doc).encode()

    def lookup_urls(self, listener_name: str | None) -> tuple[str, str | None]:
        """(url, tls_url) a lookup answers for this broker to a client that named ``listener_name`` (R110)."""
        return choose(
            self.broker_id, self.broker_url, self.broker_url_tls, self.listeners, self.internal_listener, listener_name
        )

    @classmethod
    def from_json(cls, raw: bytes) -> BrokerInfo:
        doc = json.loads(raw)
        tls, web_tls = doc.get("broker_url_tls"), doc.get("web_url_tls")
        return cls(
            str(doc["id"]),
            str(doc["broker_url"]),
            str(doc["web_url"]),
            str(tls) if tls else None,
            str(web_tls) if web_tls else None,
            from_doc(doc.get("listeners")),
            str(doc["internal_listener"]) if doc.get("internal_listener") else None,
            str(doc["incarnation"]) if doc.get("incarnation") else None,
        )


def topic_hash(topic: TopicName) -> int:
    """The 32-bit hash placing ``topic`` in a bundle (a partition hashes by its own full name)."""
    return crc32c(str(topic.partitioned_base if topic.partition_index < 0 else topic).encode())


def bundle_of(topic: TopicName, bundles: int | BundleRanges) -> str:
    """The bundle (``0x00000000_0x40000000`` style, as Pulsar names them) holding ``topic``, among
    ``bundles`` equal ranges or the given ranges."""
    ranges = equal(bundles) if isinstance(bundles, int) else bundles
    return ranges.find(topic_hash(topic))


# The load manager's placement: (candidate brokers, full bundle name ``tenant/ns/0x.._0x..``) -> one.
ChooseBroker = Callable[[list["BrokerInfo"], str], "BrokerInfo"]


def _score(bundle_path: str, broker_id: str) -> int:
    """The rendezvous score of a broker for a bundle: the highest-scoring live broker is placed.

    A cryptographic hash, not CRC: CRC is linear, so for inputs of one length the difference of two
    brokers' scores barely depends on the bundle, and a namespace's bundles all went to the same
    broker far more often than chance (20 namespaces in a row in one test run)."""
    return int.from_bytes(hashlib.blake2b(f"{bundle_path}|{broker_id}".encode(), digest_size=8).digest(), "big")


class Ownership:
    def __init__(
        self, store: MetadataStore, me: BrokerInfo, *, bundles: int = 4, isolation: NamespaceIsolation | None = None
    ) -> None:
        self.store = store
        self.me = me
        self.bundles = bundles
        self.default_ranges = equal(bundles)
        self.owned: set[str] = set()
        self.isolation = isolation
        self.choose: ChooseBroker | None = None  # set by the load manager; else rendezvous
        self.leaving = False  # out of the live set (a drain or a stop): takes no more bundles
        self._ranges: dict[str, BundleRanges] = {}  # "tenant/ns" -> its stored ranges
        self._refreshing: set[asyncio.Task[None]] = set()
        # Bundles being handed over (unload, split): lookups and takes of them wait until released.
        self._handing_over: dict[str, asyncio.Event] = {}

    # ------------------------------------------------------------------ membership
    async def register(self) -> None:
        self.leaving = False
        await self.store.put(paths.broker_available(self.me.broker_id), self.me.to_json(), ephemeral=True)

    async def unregister(self) -> None:
        """Leave the live set; from now on this broker takes no bundle (it keeps those it owns)."""
        self.leaving = True
        try:
            await self.store.delete(paths.broker_available(self.me.broker_id))
        except NotFound:
            pass

    async def live_brokers(self) -> list[BrokerInfo]:
        out = []
        for name in await self.store.children(paths.BROKERS_AVAILABLE):
            found = await self.store.get(paths.broker_available(name))
            if found is not None:
                out.append(BrokerInfo.from_json(found.value))
        return out

    async def _ids(self) -> list[str]:
        return [b.broker_id for b in await self.live_brokers()]

    # ------------------------------------------------------------------ bundle ranges
    def ranges_of(self, tenant: str, ns: str) -> BundleRanges:
        """The namespace's ranges as last read (the default equal ranges until read)."""
        return self._ranges.get(f"{tenant}/{ns}", self.default_ranges)

    async def read_ranges(self, tenant: str, ns: str) -> tuple[BundleRanges, int | None]:
        """(ranges, version of the namespace record) from the store, cached; version None when the
        namespace does not exist (its default ranges then)."""
        found = await self.store.get(paths.namespace(tenant, ns))
        if found is None:
            self._ranges.pop(f"{tenant}/{ns}", None)
            return self.default_ranges, None
        ranges = self.default_ranges
        try:
            raw = json.loads(found.value).get("bundles")
            if raw is not None:
                ranges = BundleRanges.from_json(raw)
        except (ValueError, AttributeError, InvalidBundle) as exc:
            log.warning("namespace %s/%s: unreadable bundles %s; using %d equal ones", tenant, ns, exc, self.bundles)
        self._ranges[f"{tenant}/{ns}"] = ranges
        return ranges, found.version

    def namespace_changed(self, tenant: str, ns: str) -> None:
        """The namespace's record changed (the namespaces watch): read its ranges again."""
        task = asyncio.get_running_loop().create_task(self._refresh(tenant, ns))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def _refresh(self, tenant: str, ns: str) -> None:
        try:
            await self.read_ranges(tenant, ns)
        except Exception as exc:  # the store is away: the next acquire reads them again
            log.info("bundle ranges of %s/%s not refreshed: %s", tenant, ns, exc)

    def set_ranges(self, tenant: str, ns: str, ranges: BundleRanges) -> None:
        """Ranges this broker has just written (a split): used at once, before the watch fires."""
        self._ranges[f"{tenant}/{ns}"] = ranges

    # ------------------------------------------------------------------ bundles
    def bundle_name(self, topic: TopicName) -> str:
        return self.ranges_of(topic.tenant, topic.namespace).find(topic_hash(topic))

    def bundle_path(self, topic: TopicName) -> str:
        return paths.ownership(topic.tenant, topic.namespace, self.bundle_name(topic))

    async def _fresh_path(self, topic: TopicName) -> str:
        await self.read_ranges(topic.tenant, topic.namespace)
        return self.bundle_path(topic)

    async def owner(self, topic: TopicName) -> BrokerInfo | None:
        found = await self.store.get(await self._fresh_path(topic))
        return BrokerInfo.from_json(found.value) if found is not None else None

    def owns(self, topic: TopicName) -> bool:
        return self.bundle_path(topic) in self.owned

    async def acquire(self, topic: TopicName) -> BrokerInfo:
        """Take the topic's bundle if nobody owns it; return whoever owns it afterwards."""
        path = self.bundle_path(topic)
        if path in self.owned:
            return self.me
        path = await self._fresh_path(topic)  # a split may have replaced the bundle: never take a gone one
        if path in self._handing_over:
            await self._handing_over[path].wait()
            return await self.acquire(topic)
        if path in self.owned:
            return self.me
        if self.leaving:
            raise ServiceNotReady(f"broker {self.me.broker_id} is leaving the cluster")
        bundle = path.rsplit("/", 1)[-1]
        elsewhere = await self._destination_elsewhere(topic.tenant, topic.namespace, bundle)
        if elsewhere is not None:  # unloaded towards another broker: leave it to that one
            raise ServiceNotReady(f"bundle {bundle} is moving to broker {elsewhere}")
        if self.isolation is not None:  # refuse before taking it: ServiceNotReady naming the policy
            try:
                await self.isolation.check_may_own(f"{topic.tenant}/{topic.namespace}", self.me.broker_id, self._ids)
            except ServiceNotReady:
                current = await self.owner(topic)
                if current is not None and current.broker_id != self.me.broker_id:
                    return current  # owned elsewhere already: answered as before
                raise
        try:
            await self.store.put(path, self.me.to_json(), MUST_NOT_EXIST, ephemeral=True)
        except BadVersion:
            found = await self.store.get(path)
            if found is None:  # released between our write and our read: try once more
                return await self.acquire(topic)
            current = BrokerInfo.from_json(found.value)
            if self.is_me(current):
                self.owned.add(path)
            elif self._is_former_me(current):
                await self._drop_former(path, found.version)
                return await self.acquire(topic)
            return current
        self.owned.add(path)
        log.info("broker %s now owns bundle %s", self.me.broker_id, path)
        await self._drop_destination(topic.tenant, topic.namespace, path.rsplit("/", 1)[-1])
        return self.me

    async def _destination_elsewhere(self, tenant: str, ns: str, bundle: str) -> str | None:
        """The live broker other than this one that ``bundle`` was unloaded towards, if any."""
        hint = await self.store.get(paths.bundle_destination(tenant, ns, bundle))
        if hint is None:
            return None
        wanted = hint.value.decode()
        if wanted == self.me.broker_id or await self.store.get(paths.broker_available(wanted)) is None:
            return None  # here, or a destination that has died since: any broker may take it
        return wanted

    async def _drop_destination(self, tenant: str, ns: str, bundle: str) -> None:
        """The destination hint has served once the bundle is owned again (by anyone)."""
        try:
            await self.store.delete(paths.bundle_destination(tenant, ns, bundle))
        except NotFound:
            pass

    async def set_destination(self, tenant: str, ns: str, bundle: str, broker_id: str) -> None:
        """Where the next placement of ``bundle`` should go (``unload --destinationBroker``)."""
        await self.store.put(paths.bundle_destination(tenant, ns, bundle), broker_id.encode())

    async def acquire_or_place(self, topic: TopicName) -> BrokerInfo:
        """``acquire``, except that a broker the isolation policies keep out of the bundle answers
        the broker that should take it instead (the admin API forwards there) rather than refusing."""
        try:
            return await self.acquire(topic)
        except NoBrokerAvailable:
            raise
        except ServiceNotReady:
            return await self.placement(topic)

    async def placement(self, topic: TopicName) -> BrokerInfo:
        """Where an unowned bundle should go, among the live brokers the namespace isolation
        policies allow (NoBrokerAvailable when none): a live destination hint, else the ``choose``
        hook's pick, else the highest rendezvous score."""
        brokers = await self.live_brokers()
        if self.isolation is not None:
            ns = f"{topic.tenant}/{topic.namespace}"
            allowed = set(await self.isolation.allowed(ns, [b.broker_id for b in brokers]))
            brokers = [b for b in brokers if b.broker_id in allowed]
        if not brokers:
            return self.me
        bundle = self.bundle_name(topic)
        hint = await self.store.get(paths.bundle_destination(topic.tenant, topic.namespace, bundle))
        if hint is not None:
            wanted = hint.value.decode()
            for b in brokers:
                if b.broker_id == wanted:
                    return b
        if self.choose is not None:
            return self.choose(brokers, f"{topic.tenant}/{topic.namespace}/{bundle}")
        path = self.bundle_path(topic)
        return max(brokers, key=lambda b: _score(path, b.broker_id))

    def is_me(self, info: BrokerInfo) -> bool:
        """Whether an ownership record is this very process's (id and incarnation)."""
        return info.broker_id == self.me.broker_id and info.incarnation == self.me.incarnation

    def _is_former_me(self, info: BrokerInfo) -> bool:
        """A record of an earlier run of this broker (same host:port, another incarnation): that
        process is dead, since we hold its port, but its key lives until its lease expires."""
        return info.broker_id == self.me.broker_id and info.incarnation != self.me.incarnation

    async def _drop_former(self, path: str, version: int) -> None:
        """Delete a former incarnation's ownership key (by version: if anything else changed it,
        the next attempt reads it again). Adopting it instead would make this broker serve the
        bundle under the *old* lease and unload it when that lease expires, a few seconds later,
        while its producers are writing (a burst of resends, duplicates without deduplication)."""
        log.info("broker %s: removing %s, left by a previous run of this broker", self.me.broker_id, path)
        try:
            await self.store.delete(path, version)
        except (NotFound, BadVersion):
            pass

    async def lookup(self, topic: TopicName) -> tuple[BrokerInfo, bool]:
        """(broker, redirect): the owner with redirect False, or a broker to ask with redirect True."""
        path = await self._fresh_path(topic)
        if path in self._handing_over:  # answered once it is released: by then it has its next place
            await self._handing_over[path].wait()
            return await self.lookup(topic)
        found = await self.store.get(path)
        current = BrokerInfo.from_json(found.value) if found is not None else None
        if found is not None and current is not None:
            if self._is_former_me(current):
                await self._drop_former(path, found.version)
                return await self.acquire(topic), False
            if self.is_me(current):
                self.owned.add(path)
            return current, False
        target = await self.placement(topic)
        if target.broker_id != self.me.broker_id:
            return target, True
        return await self.acquire(topic), False

    async def release(self, bundle_path: str) -> None:
        self.owned.discard(bundle_path)
        try:
            await self.store.delete(bundle_path)
        except NotFound:
            pass

    @contextlib.asynccontextmanager
    async def handing_over(self, bundle_path: str) -> AsyncIterator[None]:
        """Stop serving ``bundle_path`` (its topics are unloaded inside), then release its key.

        Meanwhile this broker's lookups and takes of the bundle wait, so a client told to reconnect
        is not given the bundle back here before it is released (Pulsar holds lookups of a bundle
        being unloaded the same way)."""
        done = self._handing_over[bundle_path] = asyncio.Event()
        was_owned = bundle_path in self.owned
        self.owned.discard(bundle_path)
        try:
            yield
        finally:
            try:
                if was_owned:
                    await self.release(bundle_path)
            finally:
                del self._handing_over[bundle_path]
                done.set()

    async def release_all(self) -> None:
        for path in list(self.owned):
            await self.release(path)
