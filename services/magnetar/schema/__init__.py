"""Typed message values, with the names of pulsar-client 3.x's ``pulsar.schema``.

Declare a ``Record`` class, pick a schema (``AvroSchema``, ``JsonSchema``, ``StringSchema``,
``BytesSchema``, ``ProtobufNativeSchema``) and pass it as ``schema=`` to a producer, consumer or
reader: a program written with ``from pulsar.schema import ...`` runs with ``magnetar.schema``.
``info`` holds ``SchemaInfo``, the form the broker's registry stores; ``compatibility`` its rules.
"""

import importlib
from typing import TYPE_CHECKING, Any

from magnetar.schema.definition import Array, Map, Record
from magnetar.schema.fields import (
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Null,
    String,
)
from magnetar.schema.schema import BytesSchema, JsonSchema, Schema, StringSchema

if TYPE_CHECKING:
    from magnetar.schema.schema_avro import AvroSchema
    from magnetar.schema.schema_protobuf import ProtobufNativeSchema

# Loaded on first use: fastavro and protobuf cost tens of milliseconds to import, and every broker
# and client imports this package (``info``, ``compatibility``) without needing either codec.
_CODECS = {"AvroSchema": "magnetar.schema.schema_avro", "ProtobufNativeSchema": "magnetar.schema.schema_protobuf"}


def __getattr__(name: str) -> Any:
    module = _CODECS.get(name)
    if module is None:
        raise AttributeError(f"module 'magnetar.schema' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
