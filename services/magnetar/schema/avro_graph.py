"""Avro schemas parsed into a graph of nodes, for the compatibility checks to walk.

A registry definition is JSON text; the checks need its types with names resolved. Named types
(records, enums, fixed) are registered in a per-schema table before their fields are parsed, and a
reference stays an ``AvroRef`` looked up on use (``deref``), so a recursive type is a graph rather
than an endless tree. A definition that is not a valid Avro schema raises ``BadDefinition``, which
the checks report as the reason a schema is refused, never as a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AvroArray",
    "AvroEnum",
    "AvroField",
    "AvroFixed",
    "AvroMap",
    "AvroNamed",
    "AvroNode",
    "AvroPrimitive",
    "AvroRecord",
    "AvroRef",
    "AvroUnion",
    "BadDefinition",
    "deref",
    "describe",
    "parse_avro",
    "short_name",
]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class BadDefinition(Exception):
    """A definition that is not a valid Avro schema: reported as the reason, never as a crash."""


@dataclass(eq=False)
class AvroPrimitive:
    name: str


@dataclass(eq=False)
class AvroField:
    name: str
    aliases: frozenset[str]
    type: AvroNode
    has_default: bool


@dataclass(eq=False)
class AvroRecord:
    fullname: str
    aliases: frozenset[str]
    fields: list[AvroField] = field(default_factory=list)


@dataclass(eq=False)
class AvroEnum:
    fullname: str
    aliases: frozenset[str]
    symbols: list[str]
    default: str | None


@dataclass(eq=False)
class AvroFixed:
    fullname: str
    aliases: frozenset[str]
    size: int


@dataclass(eq=False)
class AvroArray:
    items: AvroNode


@dataclass(eq=False)
class AvroMap:
    values: AvroNode


@dataclass(eq=False)
class AvroUnion:
    branches: list[AvroNode]


@dataclass(eq=False)
class AvroRef:
    name: str
    namespace: str
    table: dict[str, AvroNamed]

    @property
    def fullname(self) -> str:
        """The referenced type: the name qualified by the enclosing namespace, else as written
        (a type of the null namespace referenced from inside a namespace)."""
        qualified = _qualify(self.name, self.namespace)
        return qualified if qualified in self.table else self.name


AvroNamed = AvroRecord | AvroEnum | AvroFixed
AvroNode = AvroPrimitive | AvroRecord | AvroEnum | AvroFixed | AvroArray | AvroMap | AvroUnion | AvroRef


def _qualify(name: str, namespace: str) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def short_name(fullname: str) -> str:
    return fullname.rsplit(".", 1)[-1]


def parse_avro(definition: Any) -> AvroNode:
    table: dict[str, AvroNamed] = {}
    return _parse(definition, "", table)


def _parse(d: Any, namespace: str, table: dict[str, AvroNamed]) -> AvroNode:
    if isinstance(d, str):
        if d in _PRIMITIVES:
            return AvroPrimitive(d)
        return AvroRef(d, namespace, table)
    if isinstance(d, list):
        return AvroUnion([_parse(b, namespace, table) for b in d])
    if not isinstance(d, dict):
        raise BadDefinition(f"a schema must be a name, a list or an object, got {d!r}")
    kind = d.get("type")
    if isinstance(kind, (dict, list)):
        return _parse(kind, namespace, table)
    if not isinstance(kind, str):
        raise BadDefinition(f"schema object without a valid 'type': {d!r}")
    if kind in _PRIMITIVES:  # e.g. {"type": "long", "logicalType": "timestamp-millis"}
        return AvroPrimitive(kind)
    if kind == "array":
        return AvroArray(_parse(d.get("items"), namespace, table))
    if kind == "map":
        return AvroMap(_parse(d.get("values"), namespace, table))
    if kind in ("record", "error", "enum", "fixed"):
        return _parse_named(d, kind, namespace, table)
    return _parse(kind, namespace, table)  # {"type": "SomeNamedType"}


def _parse_named(d: dict[str, Any], kind: str, namespace: str, table: dict[str, AvroNamed]) -> AvroNamed:
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise BadDefinition(f"a {kind} needs a name: {d!r}")
    ns = d.get("namespace")
    if "." in name:
        fullname = name
    else:
        fullname = _qualify(name, ns if isinstance(ns, str) else namespace)
    own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
    aliases = frozenset(_qualify(a, own_ns) for a in d.get("aliases") or [] if isinstance(a, str))
    node: AvroNamed
    if kind == "enum":
        symbols = d.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise BadDefinition(f"enum {fullname!r} needs a list of symbols")
        default = d.get("default")
        node = AvroEnum(fullname, aliases, list(symbols), default if isinstance(default, str) else None)
    elif kind == "fixed":
        size = d.get("size")
        if not isinstance(size, int):
            raise BadDefinition(f"fixed {fullname!r} needs an integer size")
        node = AvroFixed(fullname, aliases, size)
    else:
        node = AvroRecord(fullname, aliases)
    table[fullname] = node
    if isinstance(node, AvroRecord):
        fields = d.get("fields")
        if not isinstance(fields, list):
            raise BadDefinition(f"record {fullname!r} needs a list of fields")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise BadDefinition(f"record {fullname!r} has a field without a name: {f!r}")
            falias = frozenset(a for a in f.get("aliases") or [] if isinstance(a, str))
            node.fields.append(AvroField(f["name"], falias, _parse(f.get("type"), own_ns, table), "default" in f))
    return node


def deref(node: AvroNode) -> AvroNode:
    if isinstance(node, AvroRef):
        target = node.table.get(node.fullname)
        if target is None:
            raise BadDefinition(f"unknown type name {node.fullname!r}")
        return target
    return node


def describe(node: AvroNode) -> str:
    node = deref(node)
    if isinstance(node, AvroPrimitive):
        return node.name
    if isinstance(node, AvroRecord):
        return f"record {short_name(node.fullname)}"
    if isinstance(node, AvroEnum):
        return f"enum {short_name(node.fullname)}"
    if isinstance(node, AvroFixed):
        return f"fixed {short_name(node.fullname)}({node.size})"
    if isinstance(node, AvroArray):
        return f"array<{describe(node.items)}>"
    if isinstance(node, AvroMap):
        return f"map<{describe(node.values)}>"
    if isinstance(node, AvroUnion):
        return "union[" + ", ".join(describe(b) for b in node.branches) + "]"
    raise BadDefinition(f"unresolved reference {node.name!r}")
