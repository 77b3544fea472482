"""Moving bundles off their broker: unload (optionally towards a destination), split, and drain.

Each runs on the bundle's owner (the admin API forwards there). The bundle's topics are unloaded:
their clients are told to close and look the topics up again, which places the bundle anew, and
with deduplication on a resent message is not stored twice. A split writes the namespace's new
ranges by compare-and-set on the policies record (a concurrent split or policy change makes it
fail and be asked again), then releases the parent's key. Without ``unload`` (Pulsar's default for
a split by hand) this broker takes both halves first and keeps their topics loaded: nothing moves.

A drain (``brokers shutdown``) takes this broker out of the live set and unloads every bundle it
owns, at most ``max_per_second`` a second, so the clients move to the other brokers before the
process ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.cluster.ownership import BrokerInfo, Ownership, bundle_of, topic_hash
from magnetar.broker.cluster.resources import Conflict, Resources
from magnetar.broker.loadbalance import bundle_ranges as br
from magnetar.broker.loadbalance.bundle_ranges import BundleRanges, InvalidBundle
from magnetar.broker.policies.model import PolicyError
from magnetar.metadata import paths
from magnetar.metadata.store import MUST_NOT_EXIST, MetadataStore
from magnetar.protocol.errors import BadVersion
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig

log = logging.getLogger(__name__)


class NonPersistentKeys(Protocol):
    @property
    def topics(self) -> Any: ...


class BundleHost(Protocol):
    """What moving bundles needs of the broker service."""

    @property
    def store(self) -> MetadataStore: ...
    @property
    def resources(self) -> Resources: ...
    @property
    def ownership(self) -> Ownership | None: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def bundles(self) -> int: ...
    @property
    def topics(self) -> Any: ...
    @property
    def non_persistent(self) -> NonPersistentKeys: ...

    async def unload_topic(self, key: str) -> None: ...


def _precondition(exc: InvalidBundle) -> PolicyError:
    return PolicyError(str(exc), status=412)


async def namespace_ranges(host: BundleHost, tenant: str, ns: str) -> tuple[BundleRanges, int]:
    """(the namespace's bundle ranges, its record's version); NamespaceNotFound when absent."""
    doc, version = await host.resources.get_namespace(tenant, ns)
    raw = doc.get("bundles")
    try:
        return (BundleRanges.from_json(raw) if raw is not None else br.equal(host.bundles)), version
    except InvalidBundle as exc:
        raise _precondition(exc) from None


def loaded_keys(host: BundleHost) -> list[str]:
    return [*host.topics, *host.non_persistent.topics]


def keys_in_bundle(keys: Iterable[str], tenant: str, ns: str, bundle: str, ranges: BundleRanges) -> list[str]:
    """The topic keys of ``tenant/ns`` whose bundle under ``ranges`` is ``bundle``."""
    out = []
    for key in keys:
        name = TopicName.parse(key)
        if name.tenant == tenant and name.namespace == ns and bundle_of(name, ranges) == bundle:
            out.append(key)
    return out


async def _unload_keys(host: BundleHost, keys: Iterable[str]) -> None:
    for key in keys:
        await host.unload_topic(key)


async def resolve_broker(host: BundleHost, wanted: str) -> BrokerInfo:
    """The live broker named ``wanted``: its id (``host:port``) or its admin address (Pulsar's
    broker ids are ``host:webport``). 412 when no live broker has that name."""
    own = host.ownership
    brokers = await own.live_brokers() if own is not None else []
    for b in brokers:
        web = (b.web_url or b.web_url_tls or "").split("://", 1)[-1].rstrip("/")
        if wanted in (b.broker_id, web):
            return b
    raise PolicyError(f"Broker {wanted} is not an available broker", status=412)


async def unload_bundle(host: BundleHost, tenant: str, ns: str, bundle: str, destination: str | None = None) -> None:
    """Unload ``bundle`` of ``tenant/ns`` from this broker (its owner, or nobody's), its next owner
    ``destination`` when given."""
    ranges, _ = await namespace_ranges(host, tenant, ns)
    try:
        ranges.check(bundle)
    except InvalidBundle as exc:
        raise _precondition(exc) from None
    own = host.ownership
    if own is not None and destination:
        target = await resolve_broker(host, destination)
        await own.set_destination(tenant, ns, bundle, target.broker_id)
    if own is None:  # standalone: the topics reload here on their next use
        await _unload_keys(host, keys_in_bundle(loaded_keys(host), tenant, ns, bundle, ranges))
        return
    path = paths.ownership(tenant, ns, bundle)
    async with own.handing_over(path):
        await _unload_keys(host, keys_in_bundle(loaded_keys(host), tenant, ns, bundle, ranges))
    log.info("unloaded bundle %s/%s/%s%s", tenant, ns, bundle, f" towards {destination}" if destination else "")


async def split_bundle(
    host: BundleHost, tenant: str, ns: str, bundle: str, *, algorithm: str | None = None, unload: bool = False
) -> tuple[str, str] | None:
    """Split ``bundle`` of ``tenant/ns`` on its owner (this broker); the two halves, or None when
    the algorithm finds no boundary (a bundle of fewer than two topics by topic count: Pulsar then
    leaves it whole and answers success)."""
    algorithm = algorithm or host.config.load_balancer.default_namespace_bundle_split_algorithm
    if algorithm not in br.ALGORITHMS:
        raise PolicyError(
            f"Unsupported namespace bundle split algorithm, supported algorithms are {list(br.ALGORITHMS)}", status=412
        )
    ranges, version = await namespace_ranges(host, tenant, ns)
    try:
        lo, hi = ranges.check(bundle)
    except InvalidBundle as exc:
        raise _precondition(exc) from None
    limit = host.config.load_balancer.namespace_maximum_bundles
    if ranges.count >= limit:
        raise PolicyError(
            f"Namespace {tenant}/{ns} has {ranges.count} bundles, the maximum (loadBalancerNamespaceMaximumBundles)",
            status=412,
        )
    hashes: list[int] = []
    if algorithm == br.TOPIC_COUNT_EQUALLY_DIVIDE:
        names = set(await host.resources.persistent_topics(tenant, ns))
        names.update(k for k in host.non_persistent.topics if k.split("://", 1)[-1].startswith(f"{tenant}/{ns}/"))
        hashes = [topic_hash(TopicName.parse(n)) for n in names]
    halves = br.split(lo, hi, algorithm, hashes)
    if halves is None:
        log.info("bundle %s/%s/%s: %s finds no boundary inside it; not split", tenant, ns, bundle, algorithm)
        return None
    boundary = br.parse_bundle(halves[0])[1]
    new_ranges = ranges.with_split(bundle, boundary)
    own = host.ownership
    if own is None:  # standalone: one broker serves every bundle; only the ranges change
        await _write_ranges(host, tenant, ns, new_ranges, version)
        await _unload_if(host, unload, tenant, ns, bundle, ranges)
        return halves
    children = [paths.ownership(tenant, ns, h) for h in halves]
    parent = paths.ownership(tenant, ns, bundle)
    async with own.handing_over(parent):
        taken: list[str] = []
        if not unload:  # take both halves before they exist, so no other broker can
            for child in children:
                try:
                    await host.store.put(child, own.me.to_json(), MUST_NOT_EXIST, ephemeral=True)
                    taken.append(child)
                except BadVersion:
                    pass  # a leftover key: the half goes to whoever holds it, by lookup
        try:
            await _write_ranges(host, tenant, ns, new_ranges, version)
        except BaseException:
            for child in taken:
                await own.release(child)
            raise
        own.set_ranges(tenant, ns, new_ranges)
        own.owned.update(taken)
        keep = set(taken)
        keys = keys_in_bundle(loaded_keys(host), tenant, ns, bundle, ranges)
        await _unload_keys(host, [k for k in keys if own.bundle_path(TopicName.parse(k)) not in keep])
    log.info("split bundle %s/%s/%s into %s and %s (%s)", tenant, ns, bundle, *halves, algorithm)
    return halves


async def _unload_if(host: BundleHost, unload: bool, tenant: str, ns: str, bundle: str, ranges: BundleRanges) -> None:
    if unload:
        await _unload_keys(host, keys_in_bundle(loaded_keys(host), tenant, ns, bundle, ranges))


async def _write_ranges(host: BundleHost, tenant: str, ns: str, ranges: BundleRanges, version: int) -> None:
    doc, current = await host.resources.get_namespace(tenant, ns)
    if current != version:
        raise Conflict(f"namespace {tenant}/{ns} changed while its bundle was being split; try again")
    doc["bundles"] = ranges.to_json()
    try:
        await host.store.put(paths.namespace(tenant, ns), json.dumps(doc).encode(), version)
    except BadVersion:
        raise Conflict(f"namespace {tenant}/{ns} changed while its bundle was being split; try again") from None


async def drain(host: BundleHost, max_per_second: float = 0.0) -> int:
    """Leave the live set and unload every bundle this broker owns (at most ``max_per_second`` a
    second when positive); how many bundles were unloaded."""
    own = host.ownership
    if own is None:
        for key in loaded_keys(host):
            await host.unload_topic(key)
        return 0
    await own.unregister()
    count = 0
    for path in sorted(own.owned):
        parts = path.strip("/").split("/")
        tenant, ns, bundle = parts[1], parts[2], parts[3]
        ranges = own.ranges_of(tenant, ns)
        async with own.handing_over(path):
            await _unload_keys(host, keys_in_bundle(loaded_keys(host), tenant, ns, bundle, ranges))
        count += 1
        if max_per_second > 0:
            await asyncio.sleep(1.0 / max_per_second)
    log.info("drained: %d bundles unloaded", count)
    return count
