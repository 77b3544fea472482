"""The compatibility table the issue asks for: every strategy against the usual record evolutions.

Each verdict is written down by hand in ``TABLE`` (so a reader sees what Magnetar promises), then
checked three ways: ``check_compatible`` must agree with it, ``can_read`` must agree with it, and
fastavro's own resolution (write samples with the writer schema, read them with the reader schema)
must agree with ``can_read`` in both directions, so the table is not just our rules checked against
themselves. The transitive strategies get 3-version chains where only the transitive form refuses.
"""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError

from magnetar.protocol.errors import IncompatibleSchema
from magnetar.schema.compatibility import can_read, check_compatible
from magnetar.schema.info import CompatibilityStrategy, SchemaInfo, SchemaType

S = CompatibilityStrategy

# --------------------------------------------------------------------------------------------
# fastavro as the referee.


def _samples(schema: Any, named: dict[str, Any], variant: int, depth: int = 0) -> Any:
    """One datum of ``schema``; ``variant`` picks the union branch / enum symbol, so a handful of
    variants visits every branch (a static "readable" must hold for every datum, not one)."""
    if isinstance(schema, list):
        branches = schema
        if depth > 3 and "null" in branches:
            return None
        return _samples(branches[variant % len(branches)], named, variant, depth + 1)
    if isinstance(schema, str):
        if schema in named:
            return _samples(named[schema], named, variant, depth + 1)
        return {
            "null": None,
            "boolean": True,
            "int": 7,
            "long": 7,
            "float": 1.5,
            "double": 2.5,
            "bytes": b"b",
            "string": "s",
        }[schema]
    kind = schema["type"]
    if not isinstance(kind, str) or kind not in ("record", "enum", "fixed", "array", "map"):
        return _samples(kind, named, variant, depth)
    if kind == "record":
        named[schema["name"]] = schema
        return {f["name"]: _samples(f["type"], named, variant, depth + 1) for f in schema["fields"]}
    if kind == "enum":
        named[schema["name"]] = schema
        return schema["symbols"][variant % len(schema["symbols"])]
    if kind == "fixed":
        named[schema["name"]] = schema
        return b"\0" * schema["size"]
    if kind == "array":
        return [] if depth > 3 else [_samples(schema["items"], named, variant, depth + 1)]
    return {} if depth > 3 else {"k": _samples(schema["values"], named, variant, depth + 1)}


def fastavro_reads(reader: dict[str, Any] | list[Any] | str, writer: dict[str, Any] | list[Any] | str) -> bool:
    """Whether fastavro decodes, with ``reader``, every sample datum written with ``writer``."""
    parsed_writer = fastavro.parse_schema(writer)
    parsed_reader = fastavro.parse_schema(reader)
    for variant in range(4):
        datum = _samples(writer, {}, variant)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed_writer, datum)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, parsed_writer, parsed_reader)
        except (SchemaResolutionError, KeyError, ValueError, TypeError):
            return False
    return True


def avro(definition: Any, stype: SchemaType = SchemaType.AVRO) -> SchemaInfo:
    return SchemaInfo(stype, json.dumps(definition))


def record(*fields: dict[str, Any], name: str = "Order") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}


ID = {"name": "id", "type": "string"}
QTY = {"name": "qty", "type": "int"}
BASE = record(ID, QTY)

# (old, new) for every evolution named in TABLE.
EVOLUTIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "add optional field (nullable, default null)": (
        BASE,
        record(ID, QTY, {"name": "note", "type": ["null", "string"], "default": None}),
    ),
    "add required field (no default)": (BASE, record(ID, QTY, {"name": "note", "type": "string"})),
    "add field with a default": (BASE, record(ID, QTY, {"name": "note", "type": "string", "default": "-"})),
    "remove field that had a default": (record(ID, QTY, {"name": "note", "type": "string", "default": "-"}), BASE),
    "remove required field (no default)": (record(ID, QTY, {"name": "note", "type": "string"}), BASE),
    "rename field, no alias": (BASE, record(ID, {"name": "quantity", "type": "int"})),
    "rename field with an alias": (BASE, record(ID, {"name": "quantity", "type": "int", "aliases": ["qty"]})),
    "change type with a promotion (int->long)": (BASE, record(ID, {"name": "qty", "type": "long"})),
    "change type without one (string->int)": (BASE, record({"name": "id", "type": "int"}, QTY)),
    "nullable -> required": (
        record(ID, QTY, {"name": "note", "type": ["null", "string"], "default": None}),
        record(ID, QTY, {"name": "note", "type": "string"}),
    ),
}

# The verdicts Magnetar promises when a producer registers `new` over the live `old` (ok = admitted).
# AI = ALWAYS_INCOMPATIBLE, AC = ALWAYS_COMPATIBLE, *_T = the transitive forms (same as their plain
# form with one live version; the chains below show where they differ).
TABLE = """
evolution                                    | AI | AC | BACKWARD | FORWARD | FULL | BACKWARD_T | FORWARD_T | FULL_T
add optional field (nullable, default null)  | no | ok | ok       | ok      | ok   | ok         | ok        | ok
add required field (no default)              | no | ok | no       | ok      | no   | no         | ok        | no
add field with a default                     | no | ok | ok       | ok      | ok   | ok         | ok        | ok
remove field that had a default              | no | ok | ok       | ok      | ok   | ok         | ok        | ok
remove required field (no default)           | no | ok | ok       | no      | no   | ok         | no        | no
rename field, no alias                       | no | ok | no       | no      | no   | no         | no        | no
rename field with an alias                   | no | ok | ok       | no      | no   | ok         | no        | no
change type with a promotion (int->long)     | no | ok | ok       | no      | no   | ok         | no        | no
change type without one (string->int)        | no | ok | no       | no      | no   | no         | no        | no
nullable -> required                         | no | ok | no       | ok      | no   | no         | ok        | no
"""

COLUMNS = {
    "AI": S.ALWAYS_INCOMPATIBLE,
    "AC": S.ALWAYS_COMPATIBLE,
    "BACKWARD": S.BACKWARD,
    "FORWARD": S.FORWARD,
    "FULL": S.FULL,
    "BACKWARD_T": S.BACKWARD_TRANSITIVE,
    "FORWARD_T": S.FORWARD_TRANSITIVE,
    "FULL_T": S.FULL_TRANSITIVE,
}


def _parse_table() -> list[tuple[str, CompatibilityStrategy, bool]]:
    lines = [line for line in TABLE.strip().splitlines()]
    header = [c.strip() for c in lines[0].split("|")][1:]
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("|")]
        for column, verdict in zip(header, cells[1:], strict=True):
            assert verdict in ("ok", "no"), line
            rows.append((cells[0], COLUMNS[column], verdict == "ok"))
    return rows


CASES = _parse_table()


def test_the_table_covers_every_evolution_and_strategy() -> None:
    assert {e for e, _, _ in CASES} == set(EVOLUTIONS)
    assert {s for _, s, _ in CASES} == set(S) - {S.UNDEFINED}
    assert len(CASES) == len(EVOLUTIONS) * 8


@pytest.mark.parametrize(("evolution", "strategy", "admitted"), CASES, ids=[f"{e}-{s.name}" for e, s, _ in CASES])
def test_check_compatible_agrees_with_the_table(
    evolution: str, strategy: CompatibilityStrategy, admitted: bool
) -> None:
    old, new = EVOLUTIONS[evolution]
    if admitted:
        check_compatible(avro(new), [avro(old)], strategy)
        return
    with pytest.raises(IncompatibleSchema) as refused:
        check_compatible(avro(new), [avro(old)], strategy)
    message = str(refused.value)
    assert strategy.name in message and "version index 0" in message, message
    if strategy is not S.ALWAYS_INCOMPATIBLE:
        assert "field '" in message, message  # the reason names the field that breaks


@pytest.mark.parametrize("evolution", list(EVOLUTIONS))
def test_can_read_agrees_with_fastavro_in_both_directions(evolution: str) -> None:
    old, new = EVOLUTIONS[evolution]
    verdicts = {s: ok for e, s, ok in CASES if e == evolution}
    for reader, writer, table_says in ((new, old, verdicts[S.BACKWARD]), (old, new, verdicts[S.FORWARD])):
        ours = can_read(avro(reader), avro(writer))
        theirs = fastavro_reads(reader, writer)
        assert (ours is None) == theirs, f"{evolution}: can_read says {ours!r}, fastavro reads={theirs}"
        assert theirs == table_says, f"{evolution}: the table disagrees with fastavro"
    # FULL is exactly both directions.
    assert verdicts[S.FULL] == (verdicts[S.BACKWARD] and verdicts[S.FORWARD])


def test_refusal_reasons_name_the_field_and_what_is_wrong() -> None:
    old, new = EVOLUTIONS["add required field (no default)"]
    with pytest.raises(IncompatibleSchema, match=r"BACKWARD.*index 0.*field 'note' added without a default"):
        check_compatible(avro(new), [avro(old)], S.BACKWARD)
    old, new = EVOLUTIONS["remove required field (no default)"]
    with pytest.raises(IncompatibleSchema, match=r"FORWARD.*index 0.*field 'note' removed"):
        check_compatible(avro(new), [avro(old)], S.FORWARD)
    old, new = EVOLUTIONS["change type without one (string->int)"]
    with pytest.raises(IncompatibleSchema, match=r"field 'id'.*string to int"):
        check_compatible(avro(new), [avro(old)], S.FULL)
    old, new = EVOLUTIONS["nullable -> required"]
    assert can_read(avro(new), avro(old)) == ("field 'note': the writer's union branch null cannot be read as string")


# --------------------------------------------------------------------------------------------
# Transitive strategies: v1 -> v2 -> v3 where every step passes its plain strategy, but v3 breaks
# against v1, which only the transitive form checks.

CHAINS: dict[CompatibilityStrategy, tuple[S, list[dict[str, Any]], str]] = {
    # v2 drops qty (writers' extra fields are skipped), v3 re-adds it as a string with a default:
    # v3 reads v2's data (default) but not v1's (int is not promoted to string).
    S.BACKWARD_TRANSITIVE: (
        S.BACKWARD,
        [BASE, record(ID), record(ID, {"name": "qty", "type": "string", "default": ""})],
        r"field 'qty'.*int to string",
    ),
    # v2 gives qty a default, v3 drops it: v2's readers fill it, v1's readers cannot.
    S.FORWARD_TRANSITIVE: (
        S.FORWARD,
        [BASE, record(ID, {"name": "qty", "type": "int", "default": 0}), record(ID)],
        r"field 'qty' removed",
    ),
    # Same chain under FULL: each step is both ways readable, v1 <- v3 is not.
    S.FULL_TRANSITIVE: (
        S.FULL,
        [BASE, record(ID, {"name": "qty", "type": "int", "default": 0}), record(ID)],
        r"field 'qty' removed",
    ),
}


@pytest.mark.parametrize("transitive", list(CHAINS), ids=[s.name for s in CHAINS])
def test_transitive_strategies_check_every_live_version(transitive: CompatibilityStrategy) -> None:
    plain, (v1, v2, v3), reason = CHAINS[transitive]
    # Each step is admitted one at a time, under both forms.
    check_compatible(avro(v2), [avro(v1)], transitive)
    check_compatible(avro(v2), [avro(v1)], plain)
    check_compatible(avro(v3), [avro(v1), avro(v2)], plain)
    with pytest.raises(IncompatibleSchema, match=reason) as refused:
        check_compatible(avro(v3), [avro(v1), avro(v2)], transitive)
    assert f"under {transitive.name} with live version index 0" in str(refused.value)
    # And fastavro agrees with can_read on every ordered pair of the chain.
    for reader, writer in itertools.permutations((v1, v2, v3), 2):
        assert (can_read(avro(reader), avro(writer)) is None) == fastavro_reads(reader, writer), (reader, writer)
