"""The schema admin REST API: Pulsar's ``SchemasResource`` paths and bodies, and the schema policies.

``/admin/v2/schemas/{tenant}/{namespace}/{topic}/...``: read a version (or all), upload (checked
with the effective strategy, but not subject to ``isAllowAutoUpdateSchema``: uploading is how a
schema gets in when producers may not register one), delete (a tombstone, or the whole record
with ``?force=true``), test compatibility, and find the version of a schema. Every broker answers
these itself: the registry lives in the metadata store (``schema/registry.py``), so there is no owner
to forward to. Bodies are Pulsar's JSON (``GetSchemaResponse``: version, type, timestamp, data,
properties; ``PostSchemaResponse``; ``DeleteSchemaResponse``; ``IsCompatibilityResponse``;
``LongSchemaVersion``); an incompatible upload is 409 with the reason, as in Pulsar.

Also here, the schema policy routes whose verbs or defaults differ from the generic policy routes
of ``namespaces.py`` and ``topics.py``: Pulsar sets ``schemaCompatibilityStrategy`` with PUT
(namespace and topic level; POST and DELETE go through the generic routes), and a GET of an unset
namespace policy answers Pulsar's defaults (UNDEFINED, false, true) rather than null.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.broker.schema import admission as schema_admission
from magnetar.broker.schema.registry import SchemaRegistry, SchemaVersion
from magnetar.protocol.errors import IncompatibleSchema, InvalidCommand, NotFound
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import CompatibilityStrategy, SchemaInfo

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

SCHEMAS = "/admin/v2/schemas/{tenant}/{ns}/{topic}"
NS_POLICY = "/admin/v2/namespaces/{tenant}/{ns}"
TOPIC_POLICY = "/admin/v2/persistent/{tenant}/{ns}/{topic}"

# Namespace policy -> (REST endpoint, Pulsar's value when unset).
_NS_DEFAULTS: dict[str, tuple[str, Any]] = {
    "schema_compatibility_strategy": ("schemaCompatibilityStrategy", CompatibilityStrategy.UNDEFINED.name),
    "schema_validation_enforced": ("schemaValidationEnforced", False),
    "is_allow_auto_update_schema": ("isAllowAutoUpdateSchema", True),
}


def schema_response(v: SchemaVersion) -> dict[str, Any]:
    """Pulsar's ``GetSchemaResponse``: the definition is text (``data``), as Pulsar serves it."""
    return {
        "version": v.version,
        "type": v.info.type.name,
        "timestamp": v.timestamp,
        "data": v.info.schema,
        "properties": dict(v.info.properties),
    }


def _topic(request: web.Request) -> TopicName:
    m = request.match_info
    return TopicName.parse(f"persistent://{m['tenant']}/{m['ns']}/{m['topic']}")


async def _payload(request: web.Request) -> SchemaInfo:
    """A ``PostSchemaPayload`` ({type, schema, properties}); 400 for anything else."""
    text = await request.text()
    if not text.strip():
        raise InvalidCommand('the body must be a schema: {"type": ..., "schema": ..., "properties": {...}}')
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise InvalidCommand(f"invalid JSON body: {exc}") from None
    return SchemaInfo.from_wire(body)


def _conflict(exc: IncompatibleSchema) -> web.Response:
    return web.json_response({"reason": str(exc)}, status=409)


def add_schema_routes(app: web.Application, service: BrokerService) -> None:
    """Mount the routes on the admin ``app``."""
    registry = SchemaRegistry(service.store)

    async def namespace_exists(name: TopicName) -> None:
        await service.resources.get_namespace(name.tenant, name.namespace)  # 404 when it does not

    async def get_latest(request: web.Request) -> web.StreamResponse:
        name = _topic(request)
        await namespace_exists(name)
        found = await registry.get(name)
        if found is None:
            raise NotFound(f"Schema not found for topic {name}")
        return web.json_response(schema_response(found))

    async def get_version(request: web.Request) -> web.StreamResponse:
        name = _topic(request)
        raw = request.match_info["version"]
        try:
            version = int(raw)
        except ValueError:
            raise InvalidCommand(f"version must be an integer, got {raw!r}") from None
        await namespace_exists(name)
        found = await registry.get(name, version)
        if found is None:
            raise NotFound(f"no schema version {version} for topic {name}")
        return web.json_response(schema_response(found))

    async def get_all(request: web.Request) -> web.StreamResponse:
        """Every version that is a schema (deleted ones included, tombstones not), oldest first."""
        name = _topic(request)
        await namespace_exists(name)
        versions = [v for v in await registry.versions(name) if not v.deleted]
        if not versions:
            raise NotFound(f"Schema not found for topic {name}")
        return web.json_response({"getSchemaResponses": [schema_response(v) for v in versions]})

    async def post_schema(request: web.Request) -> web.StreamResponse:
        name = _topic(request)
        info = await _payload(request)
        await namespace_exists(name)
        try:
            version = await schema_admission.register(
                service.store, service.resources, service.config, name, info, upload=True
            )
        except IncompatibleSchema as exc:
            return _conflict(exc)
        return web.json_response({"version": {"version": version}})

    async def delete_schema(request: web.Request) -> web.StreamResponse:
        name = _topic(request)
        await namespace_exists(name)
        if request.query.get("force", "false").lower() == "true":
            versions = await registry.versions(name)
            await registry.remove(name)
            return web.json_response({"version": versions[-1].version if versions else -1})
        tombstone = await registry.delete(name)
        return web.json_response({"version": -1 if tombstone is None else tombstone})

    async def compatibility(request: web.Request) -> web.StreamResponse:
        """Pulsar's ``IsCompatibilityResponse``: would an upload of the body be accepted now."""
        name = _topic(request)
        info = await _payload(request)
        await namespace_exists(name)
        policies = await schema_admission.effective_policies(service.resources, service.config, name)
        live = await registry.live(name)
        ok = True
        if not any(v.info.same_schema(info) for v in live):
            try:
                schema_admission.check_new_schema(policies, info, upload=True)(live)
            except IncompatibleSchema:
                ok = False
        return web.json_response({"compatibility": ok, "schemaCompatibilityStrategy": policies.strategy.name})

    async def version_of(request: web.Request) -> web.StreamResponse:
        """Pulsar's ``LongSchemaVersion`` of the body's schema among the live versions; 404 if none."""
        name = _topic(request)
        info = await _payload(request)
        await namespace_exists(name)
        version = await registry.version_of(name, info)
        if version is None:
            raise NotFound(f"Not found schema for topic {name}")
        return web.json_response({"version": version})

    def get_ns_policy(name: str, default: Any) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            doc, _ = await service.resources.get_namespace(request.match_info["tenant"], request.match_info["ns"])
            value = doc.get(name)
            return web.json_response(default if value is None else value)

        return handler

    async def put_ns_strategy(request: web.Request) -> web.StreamResponse:
        await service.resources.set_namespace_policy(
            request.match_info["tenant"],
            request.match_info["ns"],
            "schema_compatibility_strategy",
            await _json(request),
        )
        return web.Response(status=204)

    async def put_topic_strategy(request: web.Request) -> web.StreamResponse:
        await service.resources.set_topic_policy(_topic(request), "schema_compatibility_strategy", await _json(request))
        return web.Response(status=204)

    r = app.router
    r.add_get(SCHEMAS + "/schema", get_latest)
    r.add_get(SCHEMAS + "/schema/{version}", get_version)
    r.add_get(SCHEMAS + "/schemas", get_all)
    r.add_post(SCHEMAS + "/schema", post_schema)
    r.add_delete(SCHEMAS + "/schema", delete_schema)
    r.add_post(SCHEMAS + "/compatibility", compatibility)
    r.add_post(SCHEMAS + "/version", version_of)
    for name, (endpoint, default) in _NS_DEFAULTS.items():
        r.add_get(f"{NS_POLICY}/{endpoint}", get_ns_policy(name, default))
    r.add_put(NS_POLICY + "/schemaCompatibilityStrategy", put_ns_strategy)
    r.add_put(TOPIC_POLICY + "/schemaCompatibilityStrategy", put_topic_strategy)


async def _json(request: web.Request) -> Any:
    """A JSON body; a bare word (``BACKWARD``, as some tools send a strategy) is taken as text."""
    text = (await request.text()).strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
