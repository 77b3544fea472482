"""Typed message values, with the names of pulsar-client 3.x's ``pulsar.schema``.

Declare a ``Record`` class, pick a schema (``AvroSchema``, ``JsonSchema``, ``StringSchema``,
``BytesSchema``, ``ProtobufNativeSchema``) and pass it as ``schema=`` to a producer, consumer or
reader: a program written with ``from pulsar.schema import ...`` runs with ``magnetar.schema``.
``info`` holds ``SchemaInfo``, the form the broker's registry stores; ``compatibility`` its rules.
"""

from magnetar.schema.definition import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)
from magnetar.schema.schema import BytesSchema, JsonSchema, Schema, StringSchema
from magnetar.schema.schema_avro import AvroSchema
from magnetar.schema.schema_protobuf import ProtobufNativeSchema

__all__ = [
    "Array",
    "AvroSchema",
    "Boolean",
    "Bytes",
    "BytesSchema",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "JsonSchema",
    "Long",
    "Map",
    "Null",
    "ProtobufNativeSchema",
    "Record",
    "Schema",
    "String",
    "StringSchema",
]
