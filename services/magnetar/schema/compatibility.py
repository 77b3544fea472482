"""Whether one schema can read what another wrote, and Pulsar's compatibility strategies on top.

The broker's registry asks two questions (WIRE.md R119, R120): may a producer register a new
version (``check_compatible``), and may a consumer read the versions that exist (``check_reader``).
Both reduce to ``can_read(reader, writer)``: for AVRO and JSON (whose definitions are Avro schemas
in Pulsar) it applies the schema-resolution rules of the Avro 1.11 specification statically, i.e.
"every datum the writer can produce decodes with the reader", which is what lets a consumer decode
each message with the version it was written with into its own reader schema. The answer is a
reason rather than a bool because a refused producer gets ``IncompatibleSchema`` and its user has
to know which field broke which strategy against which version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from magnetar.protocol.errors import IncompatibleSchema, InvalidCommand
from magnetar.schema.info import AVRO_DEFINED, CompatibilityStrategy, SchemaInfo, SchemaType

__all__ = ["can_read", "check_compatible", "check_reader"]

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

# Writer type -> reader types its values are promoted to (Avro 1.11, "Schema Resolution").
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


class _BadDefinition(Exception):
    """A definition that is not a valid Avro schema: reported as the reason, never as a crash."""


# --------------------------------------------------------------------------------------------
# Parsed Avro schemas. Named types are registered in a per-schema table before their fields are
# parsed, and references stay ``_Ref`` nodes looked up on use, so recursive types are a graph.


@dataclass(eq=False)
class _Primitive:
    name: str


@dataclass(eq=False)
class _Field:
    name: str
    aliases: frozenset[str]
    type: _Node
    has_default: bool


@dataclass(eq=False)
class _Record:
    fullname: str
    aliases: frozenset[str]
    fields: list[_Field] = field(default_factory=list)


@dataclass(eq=False)
class _Enum:
    fullname: str
    aliases: frozenset[str]
    symbols: list[str]
    default: str | None


@dataclass(eq=False)
class _Fixed:
    fullname: str
    aliases: frozenset[str]
    size: int


@dataclass(eq=False)
class _Array:
    items: _Node


@dataclass(eq=False)
class _Map:
    values: _Node


@dataclass(eq=False)
class _Union:
    branches: list[_Node]


@dataclass(eq=False)
class _Ref:
    name: str
    namespace: str
    table: dict[str, _Named]

    @property
    def fullname(self) -> str:
        """The referenced type: the name qualified by the enclosing namespace, else as written
        (a type of the null namespace referenced from inside a namespace)."""
        qualified = _qualify(self.name, self.namespace)
        return qualified if qualified in self.table else self.name


_Named = _Record | _Enum | _Fixed
_Node = _Primitive | _Record | _Enum | _Fixed | _Array | _Map | _Union | _Ref


def _qualify(name: str, namespace: str) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _short(fullname: str) -> str:
    return fullname.rsplit(".", 1)[-1]


def _parse_avro(definition: Any) -> _Node:
    table: dict[str, _Named] = {}
    return _parse(definition, "", table)


def _parse(d: Any, namespace: str, table: dict[str, _Named]) -> _Node:
    if isinstance(d, str):
        if d in _PRIMITIVES:
            return _Primitive(d)
        return _Ref(d, namespace, table)
    if isinstance(d, list):
        return _Union([_parse(b, namespace, table) for b in d])
    if not isinstance(d, dict):
        raise _BadDefinition(f"a schema must be a name, a list or an object, got {d!r}")
    kind = d.get("type")
    if isinstance(kind, (dict, list)):
        return _parse(kind, namespace, table)
    if not isinstance(kind, str):
        raise _BadDefinition(f"schema object without a valid 'type': {d!r}")
    if kind in _PRIMITIVES:  # e.g. {"type": "long", "logicalType": "timestamp-millis"}
        return _Primitive(kind)
    if kind == "array":
        return _Array(_parse(d.get("items"), namespace, table))
    if kind == "map":
        return _Map(_parse(d.get("values"), namespace, table))
    if kind in ("record", "error", "enum", "fixed"):
        return _parse_named(d, kind, namespace, table)
    return _parse(kind, namespace, table)  # {"type": "SomeNamedType"}


def _parse_named(d: dict[str, Any], kind: str, namespace: str, table: dict[str, _Named]) -> _Named:
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise _BadDefinition(f"a {kind} needs a name: {d!r}")
    ns = d.get("namespace")
    if "." in name:
        fullname = name
    else:
        fullname = _qualify(name, ns if isinstance(ns, str) else namespace)
    own_ns = fullname.rsplit(".", 1)[0] if "." in fullname else ""
    aliases = frozenset(_qualify(a, own_ns) for a in d.get("aliases") or [] if isinstance(a, str))
    node: _Named
    if kind == "enum":
        symbols = d.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise _BadDefinition(f"enum {fullname!r} needs a list of symbols")
        default = d.get("default")
        node = _Enum(fullname, aliases, list(symbols), default if isinstance(default, str) else None)
    elif kind == "fixed":
        size = d.get("size")
        if not isinstance(size, int):
            raise _BadDefinition(f"fixed {fullname!r} needs an integer size")
        node = _Fixed(fullname, aliases, size)
    else:
        node = _Record(fullname, aliases)
    table[fullname] = node
    if isinstance(node, _Record):
        fields = d.get("fields")
        if not isinstance(fields, list):
            raise _BadDefinition(f"record {fullname!r} needs a list of fields")
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise _BadDefinition(f"record {fullname!r} has a field without a name: {f!r}")
            falias = frozenset(a for a in f.get("aliases") or [] if isinstance(a, str))
            node.fields.append(_Field(f["name"], falias, _parse(f.get("type"), own_ns, table), "default" in f))
    return node


def _deref(node: _Node) -> _Node:
    if isinstance(node, _Ref):
        target = node.table.get(node.fullname)
        if target is None:
            raise _BadDefinition(f"unknown type name {node.fullname!r}")
        return target
    return node


def _describe(node: _Node) -> str:
    node = _deref(node)
    if isinstance(node, _Primitive):
        return node.name
    if isinstance(node, _Record):
        return f"record {_short(node.fullname)}"
    if isinstance(node, _Enum):
        return f"enum {_short(node.fullname)}"
    if isinstance(node, _Fixed):
        return f"fixed {_short(node.fullname)}({node.size})"
    if isinstance(node, _Array):
        return f"array<{_describe(node.items)}>"
    if isinstance(node, _Map):
        return f"map<{_describe(node.values)}>"
    if isinstance(node, _Union):
        return "union[" + ", ".join(_describe(b) for b in node.branches) + "]"
    raise _BadDefinition(f"unresolved reference {node.name!r}")


# --------------------------------------------------------------------------------------------
# Resolution.


@dataclass(frozen=True)
class _Problem:
    """Why a reader cannot read a writer; ``missing`` marks a reader field the writer lacks
    (no default), which check_compatible words as "added"/"removed" depending on the direction."""

    path: str
    detail: str
    missing: bool = False

    def where(self) -> str:
        return f"field '{self.path}'" if self.path else "the top-level schema"

    def text(self) -> str:
        if self.missing:
            return f"field '{self.path}' has no default in the reader's schema and the writer's schema lacks it"
        return f"{self.where()}: {self.detail}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _names_match(reader: _Named, writer: _Named) -> bool:
    """Avro 1.11 matches named types by unqualified name, or by one of the reader's aliases."""
    if _short(reader.fullname) == _short(writer.fullname):
        return True
    return writer.fullname in reader.aliases or _short(writer.fullname) in {_short(a) for a in reader.aliases}


def _shallow_match(reader: _Node, writer: _Node) -> bool:
    """The specification's "match" that picks a reader union branch (resolved deeply afterwards)."""
    if isinstance(reader, _Primitive) and isinstance(writer, _Primitive):
        return reader.name == writer.name or reader.name in _PROMOTIONS.get(writer.name, frozenset())
    if isinstance(reader, _Array) and isinstance(writer, _Array):
        return True
    if isinstance(reader, _Map) and isinstance(writer, _Map):
        return True
    if isinstance(reader, _Fixed) and isinstance(writer, _Fixed):
        return reader.size == writer.size and _names_match(reader, writer)
    if isinstance(reader, _Record) and isinstance(writer, _Record):
        return _names_match(reader, writer)
    if isinstance(reader, _Enum) and isinstance(writer, _Enum):
        return _names_match(reader, writer)
    return False


class _Resolver:
    """One reader/writer comparison; it holds the seen-set that makes recursive types terminate."""

    def __init__(self) -> None:
        # Pairs of named types being (or already) resolved: recursion assumes they resolve, and
        # any real mismatch surfaces at the first visit of the pair.
        self.seen: set[tuple[int, int]] = set()

    def resolve(self, reader: _Node, writer: _Node, path: str) -> _Problem | None:
        reader, writer = _deref(reader), _deref(writer)
        if isinstance(writer, _Union):
            for branch in writer.branches:
                problem = self.resolve(reader, branch, path)
                if problem is not None:
                    if isinstance(reader, _Union) or problem.path != path or problem.missing:
                        return problem
                    return _Problem(
                        path,
                        f"the writer's union branch {_describe(branch)} cannot be read as {_describe(reader)}",
                    )
            return None
        if isinstance(reader, _Union):
            # The first matching branch decodes the value; an exact match wins over a promotion,
            # as the Java resolver does (the verdict is the same either way).
            branches = [_deref(b) for b in reader.branches]
            exact = [b for b in branches if _shallow_match(b, writer) and not _is_promotion(b, writer)]
            promoted = [b for b in branches if _shallow_match(b, writer)]
            if not promoted:
                return _Problem(
                    path, f"the writer's {_describe(writer)} matches no branch of the reader's {_describe(reader)}"
                )
            return self.resolve((exact or promoted)[0], writer, path)
        if isinstance(reader, _Primitive) and isinstance(writer, _Primitive):
            if reader.name == writer.name or reader.name in _PROMOTIONS.get(writer.name, frozenset()):
                return None
            return _Problem(path, f"type changed from {writer.name} to {reader.name}, which is not an Avro promotion")
        if isinstance(reader, _Array) and isinstance(writer, _Array):
            return self.resolve(reader.items, writer.items, f"{path}[]")
        if isinstance(reader, _Map) and isinstance(writer, _Map):
            return self.resolve(reader.values, writer.values, f"{path}{{}}")
        if isinstance(reader, _Fixed) and isinstance(writer, _Fixed):
            if not _names_match(reader, writer):
                return _Problem(
                    path,
                    f"fixed {writer.fullname!r} cannot be read as fixed {reader.fullname!r} "
                    "(names differ and no reader alias matches)",
                )
            if reader.size != writer.size:
                return _Problem(
                    path, f"fixed {_short(reader.fullname)} changed size from {writer.size} to {reader.size}"
                )
            return None
        if isinstance(reader, _Enum) and isinstance(writer, _Enum):
            return self._enum(reader, writer, path)
        if isinstance(reader, _Record) and isinstance(writer, _Record):
            return self._record(reader, writer, path)
        return _Problem(path, f"type changed from {_describe(writer)} to {_describe(reader)}")

    def _enum(self, reader: _Enum, writer: _Enum, path: str) -> _Problem | None:
        if not _names_match(reader, writer):
            return _Problem(
                path,
                f"enum {writer.fullname!r} cannot be read as enum {reader.fullname!r} "
                "(names differ and no reader alias matches)",
            )
        unknown = [s for s in writer.symbols if s not in reader.symbols]
        if unknown and (reader.default is None or reader.default not in reader.symbols):
            return _Problem(
                path,
                f"enum {_short(reader.fullname)} lacks the writer's symbols {unknown} "
                "and has no default to read them as",
            )
        return None

    def _record(self, reader: _Record, writer: _Record, path: str) -> _Problem | None:
        if not _names_match(reader, writer):
            return _Problem(
                path,
                f"record {writer.fullname!r} cannot be read as record {reader.fullname!r} "
                "(names differ and no reader alias matches)",
            )
        key = (id(reader), id(writer))
        if key in self.seen:
            return None
        self.seen.add(key)
        by_name = {f.name: f for f in writer.fields}
        for rfield in reader.fields:
            wfield = by_name.get(rfield.name)
            if wfield is None:
                wfield = next((by_name[a] for a in sorted(rfield.aliases) if a in by_name), None)
            fpath = _join(path, rfield.name)
            if wfield is None:
                if rfield.has_default:
                    continue
                return _Problem(fpath, "", missing=True)
            problem = self.resolve(rfield.type, wfield.type, fpath)
            if problem is not None:
                return problem
        return None  # writer-only fields are skipped by readers


def _is_promotion(reader: _Node, writer: _Node) -> bool:
    return isinstance(reader, _Primitive) and isinstance(writer, _Primitive) and reader.name != writer.name


def _problem(reader: SchemaInfo, writer: SchemaInfo) -> _Problem | None:
    if reader.type is not writer.type:
        return _Problem("", f"the schema type changed from {writer.type.name} to {reader.type.name}")
    if reader.type in AVRO_DEFINED:
        try:
            rdef = reader.definition()
        except InvalidCommand as exc:
            return _Problem("", f"the reader's definition is unusable: {exc}")
        try:
            wdef = writer.definition()
        except InvalidCommand as exc:
            return _Problem("", f"the writer's definition is unusable: {exc}")
        try:
            return _Resolver().resolve(_parse_avro(rdef), _parse_avro(wdef), "")
        except _BadDefinition as exc:
            return _Problem("", f"not a valid Avro schema: {exc}")
    if reader.type is SchemaType.PROTOBUF_NATIVE:
        try:
            rroot, wroot = _protobuf_root(reader), _protobuf_root(writer)
        except InvalidCommand as exc:
            return _Problem("", str(exc))
        if rroot != wroot:
            return _Problem("", f"the root message type changed from {wroot!r} to {rroot!r}")
    return None


def _protobuf_root(info: SchemaInfo) -> str:
    definition = info.definition()
    root = definition.get("rootMessageTypeName") if isinstance(definition, dict) else None
    if not isinstance(root, str) or not root:
        raise InvalidCommand("PROTOBUF_NATIVE definition has no rootMessageTypeName")
    return root


def can_read(reader: SchemaInfo, writer: SchemaInfo) -> str | None:
    """None when every datum written with ``writer`` decodes with ``reader``, else the reason.

    AVRO/JSON: Avro 1.11 schema resolution (field defaults and aliases, promotions, unions, enum
    defaults, named types and recursion). PROTOBUF_NATIVE: the same root message type (protobuf's
    own wire rules cover field changes). Any other type: the same type.
    """
    problem = _problem(reader, writer)
    return None if problem is None else problem.text()


# --------------------------------------------------------------------------------------------
# Strategies.


def _effective(strategy: CompatibilityStrategy) -> CompatibilityStrategy:
    # Callers resolve topic/namespace/broker levels first; an UNDEFINED left over means the default.
    return CompatibilityStrategy.FULL if strategy is CompatibilityStrategy.UNDEFINED else strategy


def _label(index: int, versions: Sequence[int] | None) -> str:
    """How a message names a live version: the registry's number when the caller gave the numbers
    (after a deletion, index and number differ), else its index in ``existing``."""
    return f"version {versions[index]}" if versions is not None else f"version index {index}"


def _header(
    strategy: str, index: int, count: int, subject: str = "Schema", versions: Sequence[int] | None = None
) -> str:
    place = "the newest" if index == count - 1 else "0 = the oldest"
    return f"{subject} incompatible under {strategy} with live {_label(index, versions)} ({place}, of {count})"


def _worded(problem: _Problem, new_reads: bool, index: int, versions: Sequence[int] | None = None) -> str:
    """The reason in the direction checked: a field the reader lacks is "added" when the new schema
    reads older data, and "removed" when readers still on an older version read the new one."""
    which = _label(index, versions)
    if problem.missing and new_reads:
        return (
            f"field '{problem.path}' added without a default: readers using the new schema cannot fill it "
            f"in data written with {which}"
        )
    if problem.missing:
        return (
            f"field '{problem.path}' removed (or renamed) although {which} has no default for "
            "it: readers still on that version cannot fill it in data written with the new schema"
        )
    if new_reads:
        return f"the new schema cannot read data written with {which}: {problem.text()}"
    return f"readers on {which} cannot read data written with the new schema: {problem.text()}"


def check_compatible(
    new: SchemaInfo,
    existing: Sequence[SchemaInfo],
    strategy: CompatibilityStrategy,
    versions: Sequence[int] | None = None,
) -> None:
    """Whether a producer (or an upload) may add ``new`` after ``existing`` (live versions, oldest
    first); raises ``IncompatibleSchema`` naming the strategy, the version and the field (the
    registry's ``versions`` numbers of ``existing`` when given, else indexes).

    BACKWARD: the new schema reads the last version's data; FORWARD: the last version's readers read
    the new data; FULL: both; the ``_TRANSITIVE`` forms against every live version.
    """
    if not existing:
        return
    strategy = _effective(strategy)
    name = strategy.name
    if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema(
            f"{_header('ALWAYS_INCOMPATIBLE', len(existing) - 1, len(existing), versions=versions)}: "
            "this strategy refuses any "
            "schema other than the live ones"
        )
    count = len(existing)
    indexes = range(count - 1, -1, -1) if strategy.transitive else [count - 1]
    backward = strategy.name.startswith(("BACKWARD", "FULL"))
    forward = strategy.name.startswith(("FORWARD", "FULL"))
    for index in indexes:
        old = existing[index]
        checks = ([(True, _problem(new, old))] if backward else []) + ([(False, _problem(old, new))] if forward else [])
        for new_reads, problem in checks:
            if problem is not None:
                reason = _worded(problem, new_reads, index, versions)
                raise IncompatibleSchema(f"{_header(name, index, count, versions=versions)}: {reason}")


def check_reader(
    reader: SchemaInfo,
    existing: Sequence[SchemaInfo],
    strategy: CompatibilityStrategy,
    versions: Sequence[int] | None = None,
) -> None:
    """Whether a consumer with schema ``reader`` may read a topic whose live versions are ``existing``
    (Pulsar's checkConsumerCompatibility). Callers admit a schema equal to a live version first.

    BACKWARD and the transitive strategies: it must read every live version; FORWARD and FULL: the
    newest (older data is the producers' promise under those strategies).
    """
    if not existing:
        return
    strategy = _effective(strategy)
    name = strategy.name
    if strategy is CompatibilityStrategy.ALWAYS_COMPATIBLE:
        return
    count = len(existing)
    if strategy is CompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema(
            f"{_header('ALWAYS_INCOMPATIBLE', count - 1, count, 'Reader schema', versions)}: this strategy admits no "
            "schema other than the live ones"
        )
    every = strategy in (CompatibilityStrategy.BACKWARD,) or strategy.transitive
    indexes = range(count - 1, -1, -1) if every else [count - 1]
    for index in indexes:
        problem = _problem(reader, existing[index])
        if problem is not None:
            raise IncompatibleSchema(
                f"{_header(name, index, count, 'Reader schema', versions)}: it cannot read data written with "
                f"{_label(index, versions)}: {problem.text()}"
            )
