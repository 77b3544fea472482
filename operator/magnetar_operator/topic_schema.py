"""A Topic's `spec.schemaInfo` kept as the newest live schema of the broker's registry.

Why the operator only talks REST here: the registry and its compatibility rules live in the broker
(WIRE.md R119-R124), so an upload is judged exactly as a producer's schema would be, and the
broker's refusal text is what the user reads in the SchemaApplied condition.

The rules, pass by pass (the create/update handlers and the drift timer all run `apply`):
- an impossible schemaInfo (a type the registry does not store, a definition that is not JSON for
  the JSON-defined types) is refused before any broker call (`validate`, InvalidSpec);
- the newest live version equal to the spec (definitions compared as JSON, as the broker does):
  nothing to do, so a steady state costs one GET;
- missing (never uploaded, deleted behind the operator's back) or different: POST it. The broker
  checks it under the effective strategy; a 409 (IncompatibleSchema) leaves Ready False with the
  broker's reason, never Ready with the wrong schema;
- an upload that leaves another version newest means the spec's schema is an older live version
  (someone uploaded a newer one): when the broker says going back is compatible, the live versions
  are deleted (a tombstone, history kept) and the spec's schema uploaded again, so it is put back.

Removing spec.schemaInfo does not delete the broker's schema: producers and consumers may have
registered it, and pulsar-resources-operator leaves it in place too. Deleting the Topic (with
CleanUpAfterDeletion) deletes the topic, and the broker deletes its schema with it (R123).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import conditions
from .admin import AdminClient, Conflict, InvalidRequest, PreconditionFailed
from .conditions import SCHEMA, Condition
from .policies import InvalidSpec
from .reconciling import Outcome, Refused

#: The schema types a registry stores and a spec may name (Pulsar's SchemaType names). Left out:
#: NONE/BYTES (no schema at all), AUTO* (client-side placeholders) and KEY_VALUE (its definition
#: is binary, two length-prefixed schemas, which a string field cannot hold).
SCHEMA_TYPES = (
    "AVRO",
    "JSON",
    "PROTOBUF",
    "PROTOBUF_NATIVE",
    "STRING",
    "BOOLEAN",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FLOAT",
    "DOUBLE",
    "DATE",
    "TIME",
    "TIMESTAMP",
    "INSTANT",
    "LOCAL_DATE",
    "LOCAL_TIME",
    "LOCAL_DATE_TIME",
)
#: Types whose definition is JSON text (Avro schema JSON; the descriptor JSON for PROTOBUF_NATIVE):
#: the broker parses them, and compares them as JSON, whatever the whitespace.
JSON_DEFINED = frozenset({"AVRO", "JSON", "PROTOBUF_NATIVE"})


class InvalidSchema(InvalidSpec):
    """spec.schemaInfo cannot be a schema; reported in SchemaApplied (and Ready), not PoliciesApplied."""

    condition_type = SCHEMA


def payload(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `PostSchemaPayload` {type, schema, properties} the spec asks for; None without schemaInfo."""
    info = spec.get("schemaInfo")
    if info is None:
        return None
    return {
        "type": str(info.get("type", "")),
        "schema": str(info.get("schema") or ""),
        "properties": {str(k): str(v) for k, v in (info.get("properties") or {}).items()},
    }


def validate(spec: Mapping[str, Any]) -> None:
    """Refuse a schemaInfo no registry can hold, saying why (no broker call)."""
    want = payload(spec)
    if want is None:
        return
    kind, text = want["type"], want["schema"]
    if kind not in SCHEMA_TYPES:
        raise InvalidSchema(
            f"spec.schemaInfo.type {kind!r} is not a schema type the broker stores (one of {', '.join(SCHEMA_TYPES)})"
        )
    if kind not in JSON_DEFINED:
        return
    if not text.strip():
        raise InvalidSchema(f"spec.schemaInfo.schema is empty: a {kind} schema needs its definition (JSON text)")
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise InvalidSchema(
            f"spec.schemaInfo.schema is not valid JSON, which a {kind} definition must be: {exc}"
        ) from None
    if kind in ("AVRO", "JSON") and not isinstance(parsed, dict | list | str):
        raise InvalidSchema(
            f"spec.schemaInfo.schema is JSON but not an Avro schema (an object, a union list or a type name), "
            f"which a {kind} definition must be"
        )


def _definition(kind: str, text: str) -> Any:
    if kind in JSON_DEFINED:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def same(want: Mapping[str, Any], have: Mapping[str, Any] | None) -> bool:
    """Whether the broker's `GetSchemaResponse` is the schema `want` asks for: same type, same
    properties, same definition (as JSON for the JSON-defined types)."""
    if have is None or str(have.get("type", "")).upper() != want["type"]:
        return False
    if dict(have.get("properties") or {}) != dict(want["properties"]):
        return False
    text = have.get("data", have.get("schema", ""))
    text = text if isinstance(text, str) else json.dumps(text)
    return bool(_definition(want["type"], text) == _definition(want["type"], want["schema"]))


def _version(found: Mapping[str, Any] | None) -> int | None:
    value = (found or {}).get("version")
    return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else None


def _applied(want: Mapping[str, Any], version: int | None) -> Condition:
    where = f"version {version}" if version is not None else "the newest version"
    return Condition(
        SCHEMA, True, "Applied", f"the broker's newest live schema ({where}) is the spec's {want['type']} schema"
    )


async def apply(
    admin: AdminClient,
    tenant: str,
    namespace: str,
    topic: str,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    out: Outcome,
) -> None:
    """Make the spec's schema the topic's newest live schema; record the change and condition in `out`.

    Raises reconciling.Refused when the broker refuses it (Ready turns False with the reason).
    """
    want = payload(spec)
    if want is None:
        # Not managed (any more): whatever the broker holds stays. Only say so when we said something before.
        if conditions.find(status.get("conditions"), SCHEMA) is not None:
            out.status["schemaVersion"] = None  # a merge patch's null: the field goes
            out.conditions.append(
                Condition(
                    SCHEMA, True, "NotManaged", "no spec.schemaInfo; the broker's schema, if any, is left as it is"
                )
            )
        return
    have = await admin.get_schema(tenant, namespace, topic)
    if same(want, have):
        out.status["schemaVersion"] = _version(have)
        out.conditions.append(_applied(want, _version(have)))
        return

    def refused(reason: str, cond_reason: str, message: str) -> Refused:
        return Refused(reason, Condition(SCHEMA, False, cond_reason, message), out)

    try:
        await admin.upload_schema(tenant, namespace, topic, want)
    except Conflict as exc:
        raise refused(
            "SchemaIncompatible", "Incompatible", f"the broker refused spec.schemaInfo: {exc.reason}"
        ) from exc
    except (InvalidRequest, PreconditionFailed) as exc:
        raise refused("SchemaRejected", "Rejected", f"the broker refused spec.schemaInfo: {exc.reason}") from exc
    after = await admin.get_schema(tenant, namespace, topic)
    if same(want, after):
        what = "uploaded" if have is None else f"replaced version {_version(have)} with"
        out.changes.append(f"{what} the spec's {want['type']} schema (version {_version(after)})")
    else:
        # The spec's schema is an older live version: the upload answered it, but another one is newest.
        newest = _version(after)
        ok, strategy = await admin.schema_compatibility(tenant, namespace, topic, want)
        if not ok:
            raise refused(
                "SchemaIncompatible",
                "Incompatible",
                f"the broker refused spec.schemaInfo: it is an older live version than the newest (version {newest}), "
                f"and going back to it is not compatible under the {strategy or 'effective'} strategy",
            )
        await admin.delete_schema(tenant, namespace, topic)
        await admin.upload_schema(tenant, namespace, topic, want)
        after = await admin.get_schema(tenant, namespace, topic)
        if not same(want, after):
            raise refused(
                "SchemaNotApplied",
                "NotStored",
                f"the broker accepted spec.schemaInfo but its newest live schema is still version {_version(after)}",
            )
        out.changes.append(
            f"put the spec's {want['type']} schema back over version {newest} (version {_version(after)})"
        )
    out.status["schemaVersion"] = _version(after)
    out.conditions.append(_applied(want, _version(after)))
