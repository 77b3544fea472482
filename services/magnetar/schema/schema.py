"""Schema classes as ``pulsar.schema``'s: how a producer encodes values and a consumer decodes them.

A schema object is handed to ``create_producer``/``subscribe``/``create_reader``; the client sends
its ``schema_info()`` to the broker (the registry checks and versions it) and calls ``encode`` on
every value sent and ``decode_with`` on every payload received. ``decode_with`` and
``needs_writer_schema`` are Magnetar's: a message carries the registry version it was written with,
and a schema whose bytes depend on the writer's definition (Avro) must be told that definition to
read an older or newer version into its own shape. Pulsar's ``decode_message`` plays that part in
pulsar-client; it is kept, decoding with this schema only.
"""

from __future__ import annotations

import json
from typing import Any

from magnetar.schema.definition import Record
from magnetar.schema.info import SchemaInfo, SchemaType


class Schema:
    """Base class: a record class, a ``SchemaInfo`` built once, and the encode/decode pair."""

    # Whether ``decode_with`` needs the writer's definition (the client then fetches it per version).
    needs_writer_schema: bool = False

    def __init__(self, record_cls: Any, schema_type: Any, schema_definition: Any, schema_name: str) -> None:
        self._record_cls = record_cls
        # Pulsar's text for a definition: ``json.dumps(definition, indent=True)``, so the registry
        # sees the same bytes from a Pulsar and a Magnetar producer. No definition: empty text.
        text = "" if schema_definition is None else json.dumps(schema_definition, indent=True)
        self._schema_info = SchemaInfo(SchemaType.parse(schema_type), text, schema_name, {})
        self._client: Any = None

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def decode_with(self, data: bytes, writer: SchemaInfo | None) -> Any:
        """Decode ``data`` written with ``writer`` (None: with this very schema) into this
        schema's Python form. Only Avro's bytes depend on the writer; the others ignore it."""
        return self.decode(data)

    def decode_message(self, msg: Any) -> Any:
        return self.decode(msg.data())

    def schema_info(self) -> SchemaInfo:
        """What the broker registers: Magnetar's ``SchemaInfo`` (pulsar-client returns its C++ one)."""
        return self._schema_info

    def attach_client(self, client: Any) -> None:
        self._client = client

    def _validate_object_type(self, obj: Any) -> None:
        if not isinstance(obj, self._record_cls):
            raise TypeError(f"Invalid record obj of type {type(obj)} - expected type is {self._record_cls}")


class BytesSchema(Schema):
    """Payloads as they are: the default, and what a client without ``schema=`` uses."""

    def __init__(self) -> None:
        super().__init__(bytes, SchemaType.BYTES, None, "BYTES")

    def encode(self, data: Any) -> bytes:
        self._validate_object_type(data)
        return bytes(data)

    def decode(self, data: bytes) -> Any:
        return data

    def __str__(self) -> str:
        return "BytesSchema"


class StringSchema(Schema):
    """UTF-8 text."""

    def __init__(self) -> None:
        super().__init__(str, SchemaType.STRING, None, "STRING")

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        return str(obj).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return bytes(data).decode("utf-8")

    def __str__(self) -> str:
        return "StringSchema"


class JsonSchema(Schema):
    """A ``Record`` class as JSON text; the definition is the record's Avro schema, as Pulsar's."""

    def __init__(self, record_cls: Any) -> None:
        super().__init__(record_cls, SchemaType.JSON, record_cls.schema(), "JSON")

    def encode(self, obj: Any) -> bytes:
        """JSON as pulsar-client writes it (``indent=True``, fields in declaration order, enums by
        value); bytes fields as base64 text, which pulsar-client cannot write at all."""
        self._validate_object_type(obj)
        return json.dumps(type(obj)._encode_json(obj), indent=True).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        """A record from JSON: unknown keys ignored, missing keys take the field defaults, so any
        version of the record decodes into this one (JSON carries field names)."""
        record_cls: type[Record] = self._record_cls
        return record_cls._decode_json(json.loads(data))
