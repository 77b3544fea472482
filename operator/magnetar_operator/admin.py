"""A small typed asyncio client for the brokers' admin REST API (Pulsar's `/admin/v2` shape).

Why our own client: the operator needs a dozen calls, and it needs their failures sorted by what
the operator should do next. Each HTTP status class has its own exception, so handlers decide with
`except` clauses rather than status arithmetic: `InvalidRequest` (400) and `PreconditionFailed`
(412) mean the spec is wrong, `NotFound` (404) usually means "something this depends on is
missing", `Conflict` (409) means "already exists", and `ServerError` (5xx, with `TimedOut` for a
504: the broker stopped waiting for work that goes on) / `BrokerUnavailable` (no connection,
timeout) are retryable — their `retryable` flag says so.

Results with more than one field come back as frozen dataclasses (`Bookie`, `DrainReport`), so
that a handler reads `report.complete`, not `body["complete"]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar
from urllib.parse import quote

import aiohttp

from . import identity

_MISSING: Any = object()


class AdminError(Exception):
    """A failed admin call; `reason` is the broker's own error text, kept for conditions."""

    retryable: ClassVar[bool] = False

    def __init__(self, status: int, reason: str, *, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path} -> {status}: {reason}" if method else reason)
        self.status = status
        self.reason = reason


class InvalidRequest(AdminError):
    """400: the broker refused the request as invalid (e.g. quorums out of order)."""


class Unauthorized(AdminError):
    """401/403: the broker refused the operator's identity (no token, a token signed with a key the
    brokers do not use, or a role without the rights). Not the spec's fault, so not an invalid
    request: retried, with the status in the condition, until the identity is fixed."""


class NotFound(AdminError):
    """404: the tenant, namespace, topic or policy is missing."""


class Conflict(AdminError):
    """409: already exists, or still in use (a tenant that still has namespaces), or a schema
    upload the live versions forbid under the compatibility strategy (IncompatibleSchema)."""


class PreconditionFailed(AdminError):
    """412: the change is impossible from the current state (e.g. fewer partitions)."""


class ServerError(AdminError):
    """5xx: the broker failed; try again later."""

    retryable = True


class TimedOut(ServerError):
    """504: the broker stopped waiting (a bookie drain still running); the work goes on, ask again."""


class BrokerUnavailable(AdminError):
    """No HTTP answer at all: connection refused, reset, or timed out."""

    retryable = True


_BY_STATUS: dict[int, type[AdminError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Unauthorized,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    504: TimedOut,
}


def error_for(status: int, reason: str, *, method: str = "", path: str = "") -> AdminError:
    """The exception for one HTTP status; other 5xx are server errors, other 4xx invalid requests."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else InvalidRequest)
    return cls(status, reason, method=method, path=path)


@dataclass(frozen=True)
class Bookie:
    """One registered (running) bookie, as `GET bookies` lists it."""

    id: str
    host: str
    port: int
    read_only: bool
    decommissioning: bool


@dataclass(frozen=True)
class DrainReport:
    """A finished drain: no ledger references the bookie any more, so it may be removed."""

    bookie: str
    ledgers_moved: int
    seconds: float
    complete: bool

    def to_json(self) -> dict[str, Any]:
        """The broker's own JSON shape (what condition messages quote)."""
        return {
            "bookie": self.bookie,
            "ledgersMoved": self.ledgers_moved,
            "seconds": self.seconds,
            "complete": self.complete,
        }


#: Extra HTTP time over a drain's own deadline: the broker answers after it, not at it.
_DRAIN_GRACE = 30.0


def _seg(*parts: str) -> str:
    """Join path segments, each quoted, so that names can never smuggle in a `/`."""
    return "/".join(quote(p, safe="") for p in parts)


class AdminClient:
    """One aiohttp session against one broker admin base URL. Use as an async context manager."""

    def __init__(
        self, base_url: str, *, timeout: float = 10.0, token: Callable[[], str | None] = identity.operator_token
    ) -> None:
        """``token``: the operator's own token, asked for on every request (identity.py mints it at
        start-up when auth is on; None sends no ``Authorization``)."""
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        # Created lazily so that the session belongs to the loop that uses it (kopf's loop).
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = _MISSING,
        params: dict[str, str] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - one call (a drain) outlasts the session's timeout
    ) -> Any:
        """Send one request; return the decoded JSON body (None when empty) or raise AdminError."""
        url = f"{self.base_url}/admin/v2/{path}"
        kwargs: dict[str, Any] = {"params": params or {}}
        if timeout is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout)
        headers: dict[str, str] = {}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if body is not _MISSING:
            kwargs["data"] = json.dumps(body)
            headers["Content-Type"] = "application/json"
        if headers:
            kwargs["headers"] = headers
        try:
            async with self._http().request(method, url, **kwargs) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise error_for(resp.status, _reason(text, resp.reason), method=method, path=path)
                if not text.strip():
                    return None
                try:
                    return json.loads(text)
                except ValueError:
                    return text
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise BrokerUnavailable(
                0, f"broker admin API unreachable at {self.base_url}: {exc!r}", method=method, path=path
            ) from exc

    # --- health
    async def healthy(self) -> bool:
        try:
            await self.request("GET", "brokers/health")
        except AdminError:
            return False
        return True

    # --- bookies
    async def list_bookies(self) -> list[Bookie]:
        return [
            Bookie(
                id=str(b["id"]),
                host=str(b.get("host", "")),
                port=int(b.get("port", 0)),
                read_only=bool(b.get("read_only", False)),
                decommissioning=bool(b.get("decommissioning", False)),
            )
            for b in await self.request("GET", "bookies") or []
        ]

    async def underreplicated_ledgers(self) -> list[int]:
        """Ids of the ledgers marked under-replicated right now (empty when all have their copies)."""
        found = await self.request("GET", _seg("bookies", "underreplicated")) or {}
        return [int(x) for x in found.get("ledgers") or []]

    async def decommission_bookie(self, bookie_id: str, *, wait: float) -> DrainReport:
        """Drain a bookie: its ledgers re-replicated elsewhere, waiting up to `wait` seconds.

        Raises TimedOut while the drain goes on (call again), PreconditionFailed when it can never
        finish (fewer bookies left than an ensemble needs)."""
        path = _seg("bookies", bookie_id, "decommission")
        got = await self.request("POST", path, params={"timeout": f"{wait:g}"}, timeout=wait + _DRAIN_GRACE)
        return DrainReport(
            bookie=str(got.get("bookie", bookie_id)),
            ledgers_moved=int(got.get("ledgersMoved", 0)),
            seconds=float(got.get("seconds", 0.0)),
            complete=bool(got.get("complete", True)),
        )

    async def forget_bookie(self, bookie_id: str) -> None:
        """Remove a removed bookie's identity; Conflict while it still runs or holds ledgers."""
        await self.request("DELETE", _seg("bookies", bookie_id))

    # --- tenants
    async def list_tenants(self) -> list[str]:
        return list(await self.request("GET", "tenants") or [])

    async def get_tenant(self, tenant: str) -> dict[str, Any]:
        return dict(await self.request("GET", _seg("tenants", tenant)) or {})

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self.request("PUT", _seg("tenants", tenant), body=info)

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self.request("POST", _seg("tenants", tenant), body=info)

    async def delete_tenant(self, tenant: str, *, force: bool = False) -> None:
        await self.request("DELETE", _seg("tenants", tenant), params=_force(force))

    # --- namespaces
    async def list_namespaces(self, tenant: str) -> list[str]:
        return list(await self.request("GET", _seg("namespaces", tenant)) or [])

    async def get_namespace_policies(self, tenant: str, namespace: str) -> dict[str, Any]:
        return dict(await self.request("GET", _seg("namespaces", tenant, namespace)) or {})

    async def create_namespace(self, tenant: str, namespace: str) -> None:
        await self.request("PUT", _seg("namespaces", tenant, namespace))

    async def delete_namespace(self, tenant: str, namespace: str, *, force: bool = False) -> None:
        await self.request("DELETE", _seg("namespaces", tenant, namespace), params=_force(force))

    async def get_namespace_policy(self, tenant: str, namespace: str, policy: str) -> Any:
        return await self.request("GET", _seg("namespaces", tenant, namespace, policy))

    async def set_namespace_policy(
        self,
        tenant: str,
        namespace: str,
        policy: str,
        value: Any,
        *,
        params: dict[str, str] | None = None,
        method: str = "POST",
    ) -> None:
        """``method``: POST, or PUT for the endpoints Pulsar sets with PUT (schemaCompatibilityStrategy)."""
        path = _seg("namespaces", tenant, namespace, policy)
        await self.request(method, path, body=value, params=params)

    async def remove_namespace_policy(self, tenant: str, namespace: str, policy: str) -> None:
        await self.request("DELETE", _seg("namespaces", tenant, namespace, policy))

    # --- topics (persistent only)
    async def list_topics(self, tenant: str, namespace: str) -> list[str]:
        return list(await self.request("GET", _seg("persistent", tenant, namespace)) or [])

    async def get_partitions(self, tenant: str, namespace: str, topic: str) -> int:
        meta = await self.request("GET", _seg("persistent", tenant, namespace, topic, "partitions"))
        return int((meta or {}).get("partitions", 0))

    async def create_topic(self, tenant: str, namespace: str, topic: str) -> None:
        await self.request("PUT", _seg("persistent", tenant, namespace, topic))

    async def create_partitioned_topic(self, tenant: str, namespace: str, topic: str, partitions: int) -> None:
        path = _seg("persistent", tenant, namespace, topic, "partitions")
        await self.request("PUT", path, body=partitions)

    async def update_partitions(self, tenant: str, namespace: str, topic: str, partitions: int) -> None:
        path = _seg("persistent", tenant, namespace, topic, "partitions")
        await self.request("POST", path, body=partitions)

    async def delete_topic(self, tenant: str, namespace: str, topic: str, *, force: bool = False) -> None:
        await self.request("DELETE", _seg("persistent", tenant, namespace, topic), params=_force(force))

    async def delete_partitioned_topic(self, tenant: str, namespace: str, topic: str, *, force: bool = False) -> None:
        path = _seg("persistent", tenant, namespace, topic, "partitions")
        await self.request("DELETE", path, params=_force(force))

    async def get_topic_policy(self, tenant: str, namespace: str, topic: str, policy: str) -> Any:
        return await self.request("GET", _seg("persistent", tenant, namespace, topic, policy))

    async def set_topic_policy(
        self,
        tenant: str,
        namespace: str,
        topic: str,
        policy: str,
        value: Any,
        *,
        params: dict[str, str] | None = None,
    ) -> None:
        path = _seg("persistent", tenant, namespace, topic, policy)
        await self.request("POST", path, body=value, params=params)

    async def remove_topic_policy(self, tenant: str, namespace: str, topic: str, policy: str) -> None:
        await self.request("DELETE", _seg("persistent", tenant, namespace, topic, policy))

    # --- schemas (Pulsar's SchemasResource: /admin/v2/schemas/{tenant}/{namespace}/{topic}/...)
    async def get_schema(self, tenant: str, namespace: str, topic: str) -> dict[str, Any] | None:
        """The newest live version (``GetSchemaResponse``: version, type, data, properties, timestamp),
        or None when the topic has no live schema (never uploaded, or deleted)."""
        try:
            found = await self.request("GET", _seg("schemas", tenant, namespace, topic, "schema"))
        except NotFound:
            return None
        return dict(found) if isinstance(found, dict) else None

    async def upload_schema(self, tenant: str, namespace: str, topic: str, payload: dict[str, Any]) -> None:
        """POST a ``PostSchemaPayload`` {type, schema, properties}; Conflict (409) carries the
        broker's IncompatibleSchema reason."""
        await self.request("POST", _seg("schemas", tenant, namespace, topic, "schema"), body=payload)

    async def delete_schema(self, tenant: str, namespace: str, topic: str, *, force: bool = False) -> None:
        """Delete the live versions (a tombstone; ``force`` removes the whole history)."""
        await self.request("DELETE", _seg("schemas", tenant, namespace, topic, "schema"), params=_force(force))

    async def schema_compatibility(
        self, tenant: str, namespace: str, topic: str, payload: dict[str, Any]
    ) -> tuple[bool, str]:
        """Whether the payload may be uploaded now, and the effective strategy the broker used."""
        got = await self.request("POST", _seg("schemas", tenant, namespace, topic, "compatibility"), body=payload)
        got = got if isinstance(got, dict) else {}
        ok = got.get("isCompatibility", got.get("compatibility", False))
        return bool(ok), str(got.get("schemaCompatibilityStrategy", ""))

    # --- where bundles live (the load manager's admin calls, Pulsar's paths)
    async def namespace_bundles(self, tenant: str, namespace: str) -> list[str]:
        """The namespace's bundle boundaries (Pulsar's BundlesData ``boundaries``), lowest first."""
        got = await self.request("GET", _seg("namespaces", tenant, namespace, "bundles")) or {}
        return [str(b) for b in got.get("boundaries") or []]

    async def list_brokers(self) -> list[str]:
        """The ids of the live brokers of the cluster the called broker belongs to."""
        return [str(b) for b in await self.request("GET", "brokers") or []]

    async def cluster_name(self) -> str:
        """The called broker's cluster (its ``clusterName`` setting)."""
        got = await self.request("GET", _seg("brokers", "configuration", "runtime")) or {}
        return str(got.get("clusterName") or "")

    async def owned_namespaces(self, cluster: str, broker: str) -> dict[str, Any]:
        """``tenant/namespace/range`` -> Pulsar's NamespaceOwnershipStatus, for one broker."""
        return dict(await self.request("GET", _seg("brokers", cluster, broker, "ownedNamespaces")) or {})

    # --- namespace isolation policies (broker groups; the broker's isolation_admin.py)
    async def list_clusters(self) -> list[str]:
        return [str(c) for c in await self.request("GET", "clusters") or []]

    async def get_isolation_policy(self, cluster: str, name: str) -> dict[str, Any]:
        return dict(await self.request("GET", _seg("clusters", cluster, "namespaceIsolationPolicies", name)) or {})

    async def set_isolation_policy(self, cluster: str, name: str, data: dict[str, Any]) -> None:
        await self.request("POST", _seg("clusters", cluster, "namespaceIsolationPolicies", name), body=data)

    async def delete_isolation_policy(self, cluster: str, name: str) -> None:
        await self.request("DELETE", _seg("clusters", cluster, "namespaceIsolationPolicies", name))


def _force(force: bool) -> dict[str, str]:
    return {"force": "true"} if force else {}


def _reason(text: str, fallback: str | None) -> str:
    """The broker's `{"reason": ...}` text, or the raw body, or the HTTP reason phrase."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip() or (fallback or "")
    if isinstance(data, dict) and "reason" in data:
        return str(data["reason"])
    return text.strip() or (fallback or "")
