"""The topics of a namespace by domain, for ``get_topics_of_namespace`` (WIRE.md R20g, R107).

Pattern consumers list their namespace with pulsar-client's ``RegexSubscriptionMode``:
persistent topics only (the default), non-persistent topics only, or both. Persistent topics are
in the metadata store, so any broker answers for them. A non-persistent topic exists only while
some broker has it loaded (``non_persistent_registry``), so, as Pulsar lists them from the owners
of the namespace's bundles, the answering broker adds its own loaded topics to those of every
other live broker, asked through the admin API's local listing
(``GET /admin/v2/non-persistent/{tenant}/{ns}?local=true``, which ``admin/non_persistent.py`` serves).
A broker that does not answer adds nothing: it may be stopping, and its topics go with it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import quote

import aiohttp

from magnetar.broker.auth.broker_credentials import outgoing_headers
from magnetar.broker.cluster.ownership import Ownership
from magnetar.broker.cluster.resources import Resources
from magnetar.broker.config import BrokerConfig
from magnetar.broker.topics.non_persistent_registry import NonPersistentTopics
from magnetar.protocol import commands as c

# Time allowed to each other broker's answer: a stuck broker must not hold up the listing.
REMOTE_LIST_TIMEOUT_SECONDS = 5.0


class ListingBroker(Protocol):
    """The broker as the listing sees it (``BrokerService``, which sits above the topics package):
    the stored topics, its loaded non-persistent ones, the live brokers, the credentials to ask them."""

    @property
    def config(self) -> BrokerConfig: ...
    @property
    def resources(self) -> Resources: ...
    @property
    def non_persistent(self) -> NonPersistentTopics: ...
    @property
    def ownership(self) -> Ownership | None: ...


async def topics_of_namespace(service: ListingBroker, tenant: str, ns: str, mode: str) -> list[str]:
    """The namespace's topics of the domains ``mode`` names (``commands.TOPICS_MODES``)."""
    out: list[str] = []
    if mode in (c.TOPICS_PERSISTENT, c.TOPICS_ALL):
        out.extend(await service.resources.persistent_topics(tenant, ns))
    if mode in (c.TOPICS_NON_PERSISTENT, c.TOPICS_ALL):
        out.extend(await non_persistent_topics(service, tenant, ns))
    return out


async def non_persistent_topics(service: ListingBroker, tenant: str, ns: str) -> list[str]:
    """The non-persistent topics of ``tenant/ns`` loaded on any live broker of the cluster."""
    names = set(service.non_persistent.in_namespace(tenant, ns))
    own = service.ownership
    if own is not None:
        path = f"/admin/v2/non-persistent/{quote(tenant, safe='')}/{quote(ns, safe='')}?local=true"
        for broker in await own.live_brokers():
            if broker.broker_id != own.me.broker_id:
                names.update(await _remote_list(service, broker.web_url + path))
    return sorted(names)


async def _remote_list(service: ListingBroker, url: str) -> list[str]:
    timeout = aiohttp.ClientTimeout(total=REMOTE_LIST_TIMEOUT_SECONDS)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, headers=outgoing_headers(service.config)) as resp,
        ):
            if resp.status != 200:
                return []
            body: Any = json.loads(await resp.read())
    except (aiohttp.ClientError, OSError, ValueError, TimeoutError):
        return []
    return [str(x) for x in body] if isinstance(body, list) else []
