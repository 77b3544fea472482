"""Encoding and decoding with each schema class, and decoding across schema versions."""

from __future__ import annotations

import base64
import enum
import io
import json

import fastavro
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

from magnetar.protocol.errors import IncompatibleSchema
from magnetar.schema import (
    Array,
    AvroSchema,
    Bytes,
    BytesSchema,
    Double,
    Integer,
    JsonSchema,
    Long,
    Map,
    ProtobufNativeSchema,
    Record,
    Schema,
    String,
    StringSchema,
)
from magnetar.schema.info import SchemaInfo, SchemaType


class Status(enum.Enum):
    NEW = "new"
    PAID = "paid"


class Line(Record):
    sku = String(required=True)
    qty = Integer()


class Order(Record):
    id = String(required=True)
    qty = Integer()
    tags = Array(String())
    status = Status
    lines = Array(Line())
    by_sku = Map(Line())
    first = Line()
    blob = Bytes()
    total = Double()


def full_order() -> Order:
    return Order(
        id="o-1",
        qty=2,
        tags=["new", "vip"],
        status=Status.PAID,
        lines=[Line(sku="a", qty=1), Line(sku="b")],
        by_sku={"a": Line(sku="a", qty=1)},
        first=Line(sku="z", qty=9),
        blob=b"\x00\xff",
        total=12.5,
    )


# -------------------------------------------------------------------------------------- Avro


def test_avro_round_trip_keeps_types() -> None:
    schema = AvroSchema(Order)
    back = schema.decode(schema.encode(full_order()))
    assert isinstance(back, Order) and back == full_order()
    assert back.status is Status.PAID
    assert isinstance(back.lines[0], Line) and isinstance(back.by_sku["a"], Line) and isinstance(back.first, Line)
    empty = schema.decode(schema.encode(Order(id="x", first=None)))
    assert (empty.qty, empty.tags, empty.status, empty.first, empty.blob) == (None, None, None, None, None)


def test_avro_bytes_are_what_fastavro_writes_for_the_definition() -> None:
    """The payload is plain schemaless Avro of the registered definition: what pulsar-client
    writes for the same record, and what any Avro reader reads with the stored definition."""
    schema = AvroSchema(Order)
    datum = {
        "id": "o-1",
        "qty": 2,
        "tags": ["new", "vip"],
        "status": "PAID",
        "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": None}],
        "by_sku": {"a": {"sku": "a", "qty": 1}},
        "first": {"sku": "z", "qty": 9},
        "blob": b"\x00\xff",
        "total": 12.5,
    }
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(json.loads(schema.schema_info().schema)), datum)
    assert schema.encode(full_order()) == buffer.getvalue()


def test_avro_encode_checks_the_record_type() -> None:
    with pytest.raises(TypeError, match="expected type"):
        AvroSchema(Order).encode(Line(sku="a"))
    with pytest.raises(TypeError):
        AvroSchema(Order).encode({"id": "x"})


def test_avro_from_a_definition_dict() -> None:
    definition = {"type": "record", "name": "Raw", "fields": [{"name": "n", "type": "long"}]}
    schema = AvroSchema(None, definition)
    assert schema.schema_info().schema == json.dumps(definition, indent=True)
    assert schema.decode(schema.encode({"n": 5})) == {"n": 5}
    with pytest.raises(ValueError):
        schema.encode(5)
    with pytest.raises(AssertionError):
        AvroSchema(None)


class OrderV1(Record):
    id = String(required=True)
    qty = Integer()


class OrderV2(Record):
    id = String(required=True)
    qty = Integer()
    note = String(default="none", required_default=True)
    lines = Array(Line(), required_default=True)  # default null: without it, V1 data is unreadable


def test_old_writer_decodes_into_new_record_with_defaults() -> None:
    old, new = AvroSchema(OrderV1), AvroSchema(OrderV2)
    data = old.encode(OrderV1(id="o-1", qty=3))
    back = new.decode_with(data, old.schema_info())
    assert isinstance(back, OrderV2)
    assert (back.id, back.qty, back.note, back.lines) == ("o-1", 3, "none", None)
    with pytest.raises(Exception):  # noqa: B017  without the writer, the bytes are misread
        assert new.decode(data) == back


def test_added_field_without_default_is_unreadable_for_old_data() -> None:
    """As in Pulsar, an optional field is a ``["null", T]`` union but has no Avro default unless
    ``required_default=True``: data written before it was added cannot be read."""

    class OrderV3(Record):
        id = String(required=True)
        qty = Integer()
        extra = Integer()

    data = AvroSchema(OrderV1).encode(OrderV1(id="o"))
    with pytest.raises(IncompatibleSchema, match="extra"):
        AvroSchema(OrderV3).decode_with(data, AvroSchema(OrderV1).schema_info())


def test_new_writer_decodes_into_old_record() -> None:
    old, new = AvroSchema(OrderV1), AvroSchema(OrderV2)
    data = new.encode(OrderV2(id="o-2", qty=4, note="hi", lines=[Line(sku="a")]))
    back = old.decode_with(data, new.schema_info())
    assert isinstance(back, OrderV1) and (back.id, back.qty) == ("o-2", 4)
    assert "note" not in back.__dict__


def test_writer_of_another_record_name_still_decodes() -> None:
    class Renamed(Record):
        id = String(required=True)

    class Original(Record):
        id = String(required=True)
        qty = Integer(required_default=True)

    data = AvroSchema(Renamed).encode(Renamed(id="r"))
    writer = AvroSchema(Renamed).schema_info()
    assert AvroSchema(Original).decode_with(data, writer).id == "r"


def test_unreadable_writer_is_incompatible_schema() -> None:
    class Numeric(Record):
        id = Long(required=True)

    data = AvroSchema(OrderV1).encode(OrderV1(id="x"))
    with pytest.raises(IncompatibleSchema, match="Numeric"):
        AvroSchema(Numeric).decode_with(data, AvroSchema(OrderV1).schema_info())
    with pytest.raises(IncompatibleSchema, match="JSON"):
        AvroSchema(OrderV1).decode_with(data, JsonSchema(OrderV1).schema_info())


def test_decode_with_own_or_no_writer_is_decode() -> None:
    schema = AvroSchema(Order)
    data = schema.encode(full_order())
    assert schema.decode_with(data, None) == full_order()
    # The same definition with other whitespace (as the registry may hand it back) is this schema.
    same = SchemaInfo(SchemaType.AVRO, json.dumps(Order.schema()), "AVRO", {})
    assert schema.decode_with(data, same) == full_order()
    assert len(schema._writers) == 2  # parsed once, then found by text
    schema.decode_with(data, same)
    assert len(schema._writers) == 2


def test_needs_writer_schema_only_for_avro() -> None:
    assert AvroSchema(Order).needs_writer_schema is True
    others: list[Schema] = [
        JsonSchema(Order),
        StringSchema(),
        BytesSchema(),
        ProtobufNativeSchema(timestamp_pb2.Timestamp),
    ]
    assert [s.needs_writer_schema for s in others] == [False] * 4


# -------------------------------------------------------------------------------------- JSON


def test_json_round_trip_and_pulsars_text() -> None:
    schema = JsonSchema(Order)
    data = schema.encode(full_order())
    expected = {
        "id": "o-1",
        "qty": 2,
        "tags": ["new", "vip"],
        "status": "paid",  # enums by value, as pulsar-client's JsonSchema
        "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": None}],
        "by_sku": {"a": {"sku": "a", "qty": 1}},
        "first": {"sku": "z", "qty": 9},
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "total": 12.5,
    }
    assert data == json.dumps(expected, indent=True).encode()
    back = schema.decode(data)
    assert back == full_order() and back.status is Status.PAID and isinstance(back.lines[1], Line)


def test_json_decode_across_versions() -> None:
    old, new = JsonSchema(OrderV1), JsonSchema(OrderV2)
    back = new.decode_with(old.encode(OrderV1(id="a", qty=1)), old.schema_info())
    assert (back.id, back.qty, back.note, back.lines) == ("a", 1, "none", None)
    back1 = old.decode_with(new.encode(OrderV2(id="b", note="x")), new.schema_info())
    assert (back1.id, back1.qty) == ("b", None)
    assert JsonSchema(Line).decode(b'{"sku": "s", "PAID": true}').sku == "s"  # unknown keys ignored


def test_json_checks_types() -> None:
    with pytest.raises(TypeError):
        JsonSchema(Order).encode(Line(sku="a"))
    with pytest.raises(TypeError):
        JsonSchema(Line).decode(b'{"sku": 5}')


# ---------------------------------------------------------------------------- string and bytes


def test_string_and_bytes_schemas() -> None:
    s = StringSchema()
    assert s.encode("héllo") == "héllo".encode() and s.decode("héllo".encode()) == "héllo"
    assert s.decode_with(b"x", None) == "x"
    with pytest.raises(TypeError):
        s.encode(b"x")
    b = BytesSchema()
    assert b.encode(b"\x01") == b"\x01" and b.decode(b"\x01") == b"\x01"
    with pytest.raises(TypeError):
        b.encode("x")
    assert (s.schema_info().type, s.schema_info().name, s.schema_info().schema) == (SchemaType.STRING, "STRING", "")
    assert (b.schema_info().type, b.schema_info().name) == (SchemaType.BYTES, "BYTES")
    assert (str(s), str(b)) == ("StringSchema", "BytesSchema")


# -------------------------------------------------------------------------------- protobuf


def _message_class_importing_timestamp() -> type:
    """A message class built at run time whose file imports timestamp.proto (a dependency)."""
    pool = descriptor_pool.DescriptorPool()
    ts_file = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts_file)
    pool.Add(ts_file)
    proto = descriptor_pb2.FileDescriptorProto(
        name="shop/event.proto", package="shop", syntax="proto3", dependency=["google/protobuf/timestamp.proto"]
    )
    msg = proto.message_type.add(name="Event")
    msg.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    msg.field.add(
        name="at",
        number=2,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
        label=1,
    )
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Event"))


def test_protobuf_native_definition_and_round_trip() -> None:
    event_cls = _message_class_importing_timestamp()
    schema = ProtobufNativeSchema(event_cls)
    info = schema.schema_info()
    assert (info.type, info.name) == (SchemaType.PROTOBUF_NATIVE, "PROTOBUF_NATIVE")
    definition = info.definition()
    assert list(definition) == ["fileDescriptorSet", "rootMessageTypeName", "rootFileDescriptorName"]
    assert definition["rootMessageTypeName"] == "shop.Event"
    assert definition["rootFileDescriptorName"] == "shop/event.proto"
    files = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(definition["fileDescriptorSet"]))
    assert [f.name for f in files.file] == ["google/protobuf/timestamp.proto", "shop/event.proto"]  # imports first

    event = event_cls(id="e-1")
    event.at.seconds = 1700000000
    back = schema.decode(schema.encode(event))
    assert isinstance(back, event_cls) and back == event and back.at.seconds == 1700000000
    assert schema.decode_with(schema.encode(event), info) == event
    with pytest.raises(TypeError):
        schema.encode(timestamp_pb2.Timestamp())
    with pytest.raises(TypeError):
        ProtobufNativeSchema(Order)
