"""What a schema is on the wire, in the registry and on the admin API: ``SchemaInfo`` and its enums.

One definition shared by the client (``magnetar.schema``'s schema classes build one), the broker's
registry (it stores and compares them) and Spark (it turns a version's definition into columns).
Names and values are Pulsar's: ``SchemaType`` as ``org.apache.pulsar.common.schema.SchemaType``,
``CompatibilityStrategy`` as ``SchemaCompatibilityStrategy``, so a REST body or an operator spec
written for Pulsar means the same here. WIRE.md R118-R124 is the specification of the wire form.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.protocol.errors import InvalidCommand


class SchemaType(enum.IntEnum):
    """Pulsar's schema types, with its numbers (``SchemaType.AVRO.value == 4``)."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    BYTES = -1
    AUTO = -2
    AUTO_CONSUME = -3
    AUTO_PUBLISH = -4

    # ``SchemaType.AVRO`` as pulsar-client's enum prints (an IntEnum would print ``4``).
    __str__ = enum.Enum.__str__

    @classmethod
    def parse(cls, value: object) -> SchemaType:
        """A type from its name (``"AVRO"``, any case) or number; ``InvalidCommand`` otherwise."""
        if isinstance(value, SchemaType):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        raise InvalidCommand(f"unknown schema type {value!r} (one of {', '.join(cls.__members__)})")


# Types whose definition is an Avro schema (JSON text): compared with Avro's resolution rules.
AVRO_DEFINED = frozenset({SchemaType.AVRO, SchemaType.JSON})


class CompatibilityStrategy(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy``; ``UNDEFINED`` means "the next level decides"."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, value: object) -> CompatibilityStrategy:
        if isinstance(value, CompatibilityStrategy):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        raise InvalidCommand(f"unknown schema compatibility strategy {value!r} (one of {', '.join(cls.__members__)})")

    @property
    def transitive(self) -> bool:
        """Checked against every live version, not only the newest."""
        return self.name.endswith("_TRANSITIVE")


# Pulsar's broker default (broker.conf ``schemaCompatibilityStrategy=FULL``).
DEFAULT_STRATEGY = CompatibilityStrategy.FULL


class InfoText(str):
    """A text field of ``SchemaInfo`` that is also pulsar-client's accessor of the same name.

    pulsar-client's ``SchemaInfo`` has methods (``info.schema()``, ``info.name()``), Magnetar's
    code and programs read attributes (``info.schema``); the value is the text and calling it
    returns the text, so both spellings work on one object.
    """

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)


class InfoProperties(dict[str, str]):
    """``SchemaInfo.properties``: the map, and called (``info.properties()``, pulsar-client's
    accessor) a copy of it."""

    __slots__ = ()

    def __call__(self) -> dict[str, str]:
        return dict(self)


@dataclass(frozen=True, slots=True, init=False)
class SchemaInfo:
    """A schema as Pulsar's ``SchemaInfo``: type, name, definition text and properties.

    ``schema`` is the definition as text: the Avro schema JSON for AVRO and JSON, the descriptor
    JSON for PROTOBUF_NATIVE, ``""`` for the primitive types. Two infos are the same schema (one
    registry version) when type, definition and properties are equal; ``name`` does not count,
    as in Pulsar (whose schema hash covers type, data and properties).

    pulsar-client's accessors work too: ``schema_type()``, ``schema()``, ``name()`` and
    ``properties()`` (the last three through ``InfoText`` / ``InfoProperties``).
    """

    type: SchemaType
    schema: InfoText
    name: InfoText
    properties: InfoProperties

    def __init__(
        self, type: SchemaType, schema: str = "", name: str = "", properties: Mapping[str, str] | None = None
    ) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "schema", InfoText(schema))
        object.__setattr__(self, "name", InfoText(name))
        object.__setattr__(self, "properties", InfoProperties(properties or {}))

    def schema_type(self) -> SchemaType:
        """pulsar-client's accessor of ``type``."""
        return self.type

    def to_wire(self) -> dict[str, Any]:
        """The ``schema`` map of ``producer``/``subscribe``/``get_schema_response`` (WIRE.md R118)."""
        return {
            "type": self.type.name,
            "name": str(self.name),
            "schema": str(self.schema),
            "properties": dict(self.properties),
        }

    @classmethod
    def from_wire(cls, value: object) -> SchemaInfo:
        """Parse a wire map (or a REST ``PostSchemaPayload``: ``type``, ``schema``, ``properties``);
        ``InvalidCommand`` names what is wrong."""
        if not isinstance(value, Mapping):
            raise InvalidCommand(f"a schema must be a map, got {type(value).__name__}")
        stype = SchemaType.parse(value.get("type"))
        text = value.get("schema", "")
        if text is None:
            text = ""
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise InvalidCommand("schema.schema must be a string")
        name = value.get("name") or ""
        props = value.get("properties") or {}
        if not isinstance(name, str):
            raise InvalidCommand("schema.name must be a string")
        if not isinstance(props, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in props.items()
        ):
            raise InvalidCommand("schema.properties must map strings to strings")
        info = cls(stype, text, name, dict(props))
        info.definition()  # a definition that is not JSON is refused here, with the reason
        return info

    def definition(self) -> Any:
        """The parsed definition (a dict or list for AVRO/JSON/PROTOBUF_NATIVE), None for the others."""
        if self.type not in AVRO_DEFINED and self.type is not SchemaType.PROTOBUF_NATIVE:
            return None
        try:
            return json.loads(self.schema)
        except ValueError as exc:
            raise InvalidCommand(f"{self.type.name} schema definition is not valid JSON: {exc}") from None

    def same_schema(self, other: SchemaInfo) -> bool:
        """Whether ``other`` is this schema (the registry answers the existing version for it)."""
        if self.type is not other.type or dict(self.properties) != dict(other.properties):
            return False
        if self.schema == other.schema:
            return True
        # Avro/JSON definitions equal as JSON, whatever the whitespace (pulsar-client indents them).
        try:
            return bool(self.definition() == other.definition()) and self.definition() is not None
        except InvalidCommand:
            return False
