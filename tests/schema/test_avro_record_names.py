"""Renamed record classes evolve as under Pulsar: record names count only where a union picks a branch.

Pulsar's broker checks Avro compatibility with Java Avro's resolver, which resolves two records by
their fields whatever their names (names still pick a reader union's branch, and enums and fixed
still compare theirs). So renaming a ``Record`` class is admitted under FULL and FORWARD, and the
renamed class reads what the old one wrote. The rules first, then a real standalone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.admin import create_namespace
from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar.schema import AvroSchema, Integer, Record, String
from magnetar.schema.compatibility import can_read, check_compatible
from magnetar.schema.info import CompatibilityStrategy, SchemaInfo, SchemaType

S = CompatibilityStrategy


def avro(definition: Any) -> SchemaInfo:
    return SchemaInfo(SchemaType.AVRO, json.dumps(definition))


def rec(name: str, *fields: tuple[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields], **extra}


def test_records_resolve_by_their_fields_whatever_their_names() -> None:
    order = rec("Order", ("id", "string"))
    purchase = rec("Purchase", ("id", "string"), namespace="shop")
    assert can_read(avro(purchase), avro(order)) is None
    assert can_read(avro(order), avro(purchase)) is None
    for strategy in (S.FULL, S.FORWARD, S.BACKWARD, S.FULL_TRANSITIVE):
        check_compatible(avro(purchase), [avro(order)], strategy)
    # Nested records too, and the fields still decide.
    outer_v1 = rec("Outer", ("line", rec("Line", ("sku", "string"))))
    outer_v2 = rec("Envelope", ("line", rec("Item", ("sku", "string"))))
    assert can_read(avro(outer_v2), avro(outer_v1)) is None
    reason = can_read(avro(rec("Order", ("id", "int"))), avro(purchase))
    assert reason == "field 'id': type changed from string to int, which is not an Avro promotion"


def test_a_reader_union_picks_a_record_branch_by_name_then_by_fields() -> None:
    writer = rec("R", ("x", ["null", rec("Order", ("id", "string"))]))
    # No branch of that name: the record branch it resolves against is taken.
    assert can_read(avro(rec("R", ("x", ["null", rec("Purchase", ("id", "string"))]))), avro(writer)) is None
    two = ["null", rec("Refund", ("amount", "long")), rec("Purchase", ("id", "string"))]
    assert can_read(avro(rec("R", ("x", two))), avro(writer)) is None
    # The branch of the same full name is taken even when another one would fit: its verdict counts.
    named = ["null", rec("Purchase", ("id", "string")), rec("Order", ("id", "int"))]
    reason = can_read(avro(rec("R", ("x", named))), avro(writer))
    assert reason == "field 'x.id': type changed from string to int, which is not an Avro promotion"
    # No record branch fits: nothing decodes it.
    reason = can_read(avro(rec("R", ("x", ["null", rec("Refund", ("amount", "long"))]))), avro(writer))
    assert reason is not None and "matches no branch" in reason


def test_enums_and_fixed_still_compare_their_names() -> None:
    color = {"type": "enum", "name": "Color", "symbols": ["RED"]}
    colour = {"type": "enum", "name": "Colour", "symbols": ["RED"]}
    assert "names differ" in (can_read(avro(rec("R", ("c", colour))), avro(rec("R", ("c", color)))) or "")
    md5 = {"type": "fixed", "name": "Hash", "size": 16}
    digest = {"type": "fixed", "name": "Digest", "size": 16}
    assert "names differ" in (can_read(avro(rec("R", ("h", digest))), avro(rec("R", ("h", md5)))) or "")


# --------------------------------------------------------------------------------------------
# On a real standalone


class Order(Record):
    id = String(required=True)
    qty = Integer()


class Purchase(Record):
    """``Order`` renamed, with one more field that has a default: FULL-compatible both ways."""

    id = String(required=True)
    qty = Integer()
    note = String(default="none", required=True, required_default=True)


class Shipment(Record):
    """``Order`` renamed, with one more field without a default: FORWARD-compatible only."""

    id = String(required=True)
    qty = Integer()
    carrier = String(required=True)


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[pulsar.Client]:
    with pulsar.Client(standalone.service_url, operation_timeout_seconds=20) as c:
        yield c


def test_a_renamed_record_class_evolves_under_full(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "reads-both", schema=AvroSchema(Purchase))
    client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id="o-1", qty=1))
    renamed = client.create_producer(topic, schema=AvroSchema(Purchase))  # refused before: names differ
    renamed.send(Purchase(id="o-2", qty=2, note="gift"))
    first, second = consumer.receive(10_000).value(), consumer.receive(10_000).value()
    assert (type(first), first.id, first.qty, first.note) == (Purchase, "o-1", 1, "none")
    assert (second.id, second.qty, second.note) == ("o-2", 2, "gift")
    old_reader = client.subscribe(topic, "old-class", schema=AvroSchema(Order))  # FULL checks the newest
    old_reader.close()


def test_a_renamed_record_class_evolves_under_forward(standalone: StandaloneProcess, client: pulsar.Client) -> None:
    ns = create_namespace(standalone, "renamed-", schemaCompatibilityStrategy="FORWARD")
    topic = f"persistent://{ns}/orders"
    old_reader = client.subscribe(topic, "old-class", schema=AvroSchema(Order))
    client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id="o-1", qty=1))
    client.create_producer(topic, schema=AvroSchema(Shipment)).send(Shipment(id="o-2", qty=2, carrier="rail"))
    values = [old_reader.receive(10_000).value() for _ in range(2)]
    assert [(type(v), v.id, v.qty) for v in values] == [(Order, "o-1", 1), (Order, "o-2", 2)]
    # The fields still decide: back to the old class, Shipment's readers could not fill ``carrier``.
    other = f"persistent://{ns}/other"
    client.create_producer(other, schema=AvroSchema(Shipment)).close()
    with pytest.raises(pulsar.IncompatibleSchema, match="carrier"):
        client.create_producer(other, schema=AvroSchema(Order))
