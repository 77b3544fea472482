"""``AvroSchema``: records in Avro's binary encoding (fastavro), readable across schema versions.

Avro's bytes carry no field names, so a payload can only be read with the definition it was
written with; ``decode_with`` resolves that writer definition into this schema's (Avro's rules:
fields matched by name, added fields take their defaults, removed fields are skipped), which is what
lets a consumer on version 2 read what a producer on version 1 wrote. Definitions are parsed by
fastavro once per schema object (and once per distinct writer definition), because parsing costs
far more than encoding one record and produce/consume rates are measured with this class.
"""

from __future__ import annotations

import copy
import io
from typing import Any

import fastavro
from fastavro.read import SchemaResolutionError

from magnetar.protocol.errors import IncompatibleSchema
from magnetar.schema.definition import Record
from magnetar.schema.info import SchemaInfo, SchemaType
from magnetar.schema.schema import Schema


class AvroSchema(Schema):
    """A ``Record`` class (or, with ``record_cls=None``, an Avro schema dict) in Avro binary."""

    needs_writer_schema = True

    def __init__(self, record_cls: Any, schema_definition: Any = None) -> None:
        if record_cls is None and schema_definition is None:
            raise AssertionError("The param record_cls and schema_definition shouldn't be both None.")
        self._schema: Any = record_cls.schema() if record_cls is not None else schema_definition
        super().__init__(record_cls, SchemaType.AVRO, self._schema, "AVRO")
        # Parsed once here (a copy: the definition dict stays as the caller built it).
        self._parsed: Any = fastavro.parse_schema(copy.deepcopy(self._schema))
        # Parsed writer definitions, by definition text: messages name a handful of versions.
        self._writers: dict[str, Any] = {self._schema_info.schema: None}

    def encode(self, obj: Any) -> bytes:
        if self._record_cls is not None:
            self._validate_object_type(obj)
            datum = self._record_cls._encode_avro(obj)
        elif isinstance(obj, dict):
            datum = obj
        else:
            raise ValueError("If using the custom schema, the record data should be dict type.")
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self._parsed, datum)
        return buffer.getvalue()

    def decode(self, data: bytes) -> Any:
        return self._build(fastavro.schemaless_reader(io.BytesIO(data), self._parsed, None))

    def decode_with(self, data: bytes, writer: SchemaInfo | None) -> Any:
        """Read ``data`` written with ``writer`` into this schema. A writer definition this schema
        cannot read (Avro's resolution fails) raises ``IncompatibleSchema`` with fastavro's reason."""
        if writer is None:
            return self.decode(data)
        if writer.type is not SchemaType.AVRO:
            raise IncompatibleSchema(f"an AvroSchema cannot decode data written with a {writer.type.name} schema")
        try:
            parsed = self._writers[writer.schema]
        except KeyError:
            parsed = self._parse_writer(writer)
        if parsed is None:  # the writer is this very definition
            return self.decode(data)
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(data), parsed, self._parsed)
        except SchemaResolutionError as exc:
            name = self._schema.get("name") if isinstance(self._schema, dict) else "this schema"
            raise IncompatibleSchema(f"cannot read data written with another Avro schema as {name}: {exc}") from None
        return self._build(datum)

    def _parse_writer(self, writer: SchemaInfo) -> Any:
        definition = writer.definition()
        if isinstance(definition, dict) and isinstance(self._schema, dict) and definition.get("type") == "record":
            # A record's name does not change what its bytes mean; pulsar-client also renames the
            # writer's record to the reader's, so a renamed class still reads its old messages.
            definition["name"] = self._schema.get("name")
            definition.pop("namespace", None)
            if "namespace" in self._schema:
                definition["namespace"] = self._schema["namespace"]
        if definition == self._schema:
            parsed = None
        else:
            try:
                parsed = fastavro.parse_schema(definition)
            except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as exc:
                raise IncompatibleSchema(f"the writer's Avro definition does not parse: {exc}") from None
        self._writers[writer.schema] = parsed
        return parsed

    def _build(self, datum: Any) -> Any:
        record_cls: type[Record] | None = self._record_cls
        return datum if record_cls is None else record_cls._decode_avro(datum)
