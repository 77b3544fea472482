"""Whether one schema can read what another wrote (``can_read``), with the reason when it cannot.

For AVRO and JSON (whose definitions are Avro schemas in Pulsar) this applies the schema-resolution
rules of the Avro 1.11 specification statically, i.e. "every datum the writer can produce decodes
with the reader", which is what lets a consumer decode each message with the version it was
written with into its own reader schema. The answer is a ``Problem`` (a path and a reason) rather
than a bool, because the compatibility strategies word it for the user whose schema is refused.

Names are checked where Java Avro's ``Resolver`` checks them, since Pulsar's broker decides with it
(``SchemaValidatorBuilder`` over ``ResolvingGrammarGenerator``): two records are resolved field by
field whatever their names, so renaming a record class is a compatible change; enums and fixed
compare their unqualified names. Inside a reader union a name picks the branch: a writer's named
type takes the branch of the same full name (or of a reader alias); failing that a record takes the
first record branch it resolves against, preferring one of the same unqualified name.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol.errors import InvalidCommand
from magnetar.schema.avro_graph import (
    AvroArray,
    AvroEnum,
    AvroFixed,
    AvroMap,
    AvroNamed,
    AvroNode,
    AvroPrimitive,
    AvroRecord,
    AvroUnion,
    BadDefinition,
    deref,
    describe,
    parse_avro,
    short_name,
)
from magnetar.schema.info import AVRO_DEFINED, SchemaInfo, SchemaType

__all__ = ["Problem", "can_read", "problem_of"]

# Writer type -> reader types its values are promoted to (Avro 1.11, "Schema Resolution").
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}


@dataclass(frozen=True)
class Problem:
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


def _names_match(reader: AvroNamed, writer: AvroNamed) -> bool:
    """Enums and fixed: the same unqualified name, or one of the reader's aliases (Java's
    ``Resolver`` compares ``getName()`` after applying the reader's aliases to the writer)."""
    if short_name(reader.fullname) == short_name(writer.fullname):
        return True
    return writer.fullname in reader.aliases or short_name(writer.fullname) in {short_name(a) for a in reader.aliases}


def _same_full_name(reader: AvroNamed, writer: AvroNamed) -> bool:
    """The exact match that picks a reader union branch for a named type (aliases count, as Java
    applies them to the writer before resolving)."""
    return reader.fullname == writer.fullname or writer.fullname in reader.aliases


def _same_kind(reader: AvroNode, writer: AvroNode) -> bool:
    return type(reader) is type(writer)


class _Resolver:
    """One reader/writer comparison; it holds the seen-set that makes recursive types terminate."""

    def __init__(self) -> None:
        # Pairs of named types being (or already) resolved: recursion assumes they resolve, and
        # any real mismatch surfaces at the first visit of the pair.
        self.seen: set[tuple[int, int]] = set()

    def resolve(self, reader: AvroNode, writer: AvroNode, path: str) -> Problem | None:
        reader, writer = deref(reader), deref(writer)
        if isinstance(writer, AvroUnion):
            for branch in writer.branches:
                problem = self.resolve(reader, branch, path)
                if problem is not None:
                    if isinstance(reader, AvroUnion) or problem.path != path or problem.missing:
                        return problem
                    return Problem(
                        path,
                        f"the writer's union branch {describe(branch)} cannot be read as {describe(reader)}",
                    )
            return None
        if isinstance(reader, AvroUnion):
            picked = self._branch(reader, writer, path)
            if picked is None:
                return Problem(
                    path, f"the writer's {describe(writer)} matches no branch of the reader's {describe(reader)}"
                )
            return self.resolve(picked, writer, path)
        if isinstance(reader, AvroPrimitive) and isinstance(writer, AvroPrimitive):
            if reader.name == writer.name or reader.name in _PROMOTIONS.get(writer.name, frozenset()):
                return None
            return Problem(path, f"type changed from {writer.name} to {reader.name}, which is not an Avro promotion")
        if isinstance(reader, AvroArray) and isinstance(writer, AvroArray):
            return self.resolve(reader.items, writer.items, f"{path}[]")
        if isinstance(reader, AvroMap) and isinstance(writer, AvroMap):
            return self.resolve(reader.values, writer.values, f"{path}{{}}")
        if isinstance(reader, AvroFixed) and isinstance(writer, AvroFixed):
            if not _names_match(reader, writer):
                return Problem(
                    path,
                    f"fixed {writer.fullname!r} cannot be read as fixed {reader.fullname!r} "
                    "(names differ and no reader alias matches)",
                )
            if reader.size != writer.size:
                return Problem(
                    path, f"fixed {short_name(reader.fullname)} changed size from {writer.size} to {reader.size}"
                )
            return None
        if isinstance(reader, AvroEnum) and isinstance(writer, AvroEnum):
            return self._enum(reader, writer, path)
        if isinstance(reader, AvroRecord) and isinstance(writer, AvroRecord):
            return self._record(reader, writer, path)
        return Problem(path, f"type changed from {describe(writer)} to {describe(reader)}")

    def _enum(self, reader: AvroEnum, writer: AvroEnum, path: str) -> Problem | None:
        if not _names_match(reader, writer):
            return Problem(
                path,
                f"enum {writer.fullname!r} cannot be read as enum {reader.fullname!r} "
                "(names differ and no reader alias matches)",
            )
        unknown = [s for s in writer.symbols if s not in reader.symbols]
        if unknown and (reader.default is None or reader.default not in reader.symbols):
            return Problem(
                path,
                f"enum {short_name(reader.fullname)} lacks the writer's symbols {unknown} "
                "and has no default to read them as",
            )
        return None

    def _branch(self, reader: AvroUnion, writer: AvroNode, path: str) -> AvroNode | None:
        """The reader union's branch that decodes ``writer``'s values, as Java's ``ReaderUnion``
        picks it: the first branch of the same kind (a named type: of the same full name), else for
        a record the first record branch it resolves against (one of the same unqualified name
        preferred), else the first branch a promotion reaches; None when none does."""
        branches = [deref(b) for b in reader.branches]
        structural: AvroNode | None = None
        for b in branches:
            if not _same_kind(b, writer):
                continue
            if isinstance(b, AvroRecord | AvroEnum | AvroFixed):
                assert isinstance(writer, AvroRecord | AvroEnum | AvroFixed)
                if _same_full_name(b, writer):
                    return b
                if isinstance(b, AvroRecord) and isinstance(writer, AvroRecord):
                    fits = _Resolver().resolve(b, writer, path) is None
                    same_short = short_name(b.fullname) == short_name(writer.fullname)
                    if fits and (structural is None or same_short):
                        structural = b
            elif not (isinstance(b, AvroPrimitive) and isinstance(writer, AvroPrimitive)) or b.name == writer.name:
                return b  # an array, a map, or the same primitive
        if structural is not None:
            return structural
        if isinstance(writer, AvroPrimitive):
            wider = _PROMOTIONS.get(writer.name, frozenset())
            return next((b for b in branches if isinstance(b, AvroPrimitive) and b.name in wider), None)
        return None

    def _record(self, reader: AvroRecord, writer: AvroRecord, path: str) -> Problem | None:
        # No name check: Java's resolver matches two records by their fields only.
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
                return Problem(fpath, "", missing=True)
            problem = self.resolve(rfield.type, wfield.type, fpath)
            if problem is not None:
                return problem
        return None  # writer-only fields are skipped by readers


def problem_of(reader: SchemaInfo, writer: SchemaInfo) -> Problem | None:
    if reader.type is not writer.type:
        return Problem("", f"the schema type changed from {writer.type.name} to {reader.type.name}")
    if reader.type in AVRO_DEFINED:
        try:
            rdef = reader.definition()
        except InvalidCommand as exc:
            return Problem("", f"the reader's definition is unusable: {exc}")
        try:
            wdef = writer.definition()
        except InvalidCommand as exc:
            return Problem("", f"the writer's definition is unusable: {exc}")
        try:
            return _Resolver().resolve(parse_avro(rdef), parse_avro(wdef), "")
        except BadDefinition as exc:
            return Problem("", f"not a valid Avro schema: {exc}")
    if reader.type is SchemaType.PROTOBUF_NATIVE:
        try:
            rroot, wroot = _protobuf_root(reader), _protobuf_root(writer)
        except InvalidCommand as exc:
            return Problem("", str(exc))
        if rroot != wroot:
            return Problem("", f"the root message type changed from {wroot!r} to {rroot!r}")
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
    problem = problem_of(reader, writer)
    return None if problem is None else problem.text()
