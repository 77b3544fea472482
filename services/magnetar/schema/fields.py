"""The scalar field types of a record class (``Integer``, ``String``, ``CustomEnum``...), as ``pulsar.schema``'s.

A field declares a value's Avro type (``type()``), the Python type it holds (``python_type()``),
how a value assigned to it is checked (``validate_type``) and its default. The containers
(``Array``, ``Map``) and ``Record`` itself are in ``definition``, since records nest in them.
Messages and checks are Pulsar's, so that a program moving from ``pulsar.schema`` sees the same
errors. Beyond Pulsar, each field converts its value for fastavro and for JSON (``_to_avro`` /
``_from_avro``, ``_to_json`` / ``_from_json``); for most types the value passes unchanged.
"""

from __future__ import annotations

import base64
import builtins
import enum
from typing import Any


def name_of(x: Any) -> str:
    return str(getattr(x, "__name__", x))


def enum_to_name(value: Any) -> Any:
    return value.name if isinstance(value, enum.Enum) else value


class Field:
    """A typed field of a record: its Avro type, the Python type it holds, and its default."""

    def __init__(self, default: Any = None, required: bool = False, required_default: bool = False) -> None:
        self._required = required
        if default is not None:
            default = self.validate_type("default", default)
        self._default = default
        self._required_default = required_default

    def type(self) -> Any:
        raise NotImplementedError

    def python_type(self) -> Any:
        raise NotImplementedError

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, self.python_type()):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: {name_of(self.python_type())}")
        return val

    def schema(self) -> Any:
        return self.type()

    def schema_info(self, defined_names: set[str]) -> Any:
        return self.type()

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    # Codecs: primitive values are the same in Python, fastavro and JSON.
    def _to_avro(self, value: Any) -> Any:
        return value

    def _from_avro(self, value: Any) -> Any:
        return value

    def _to_json(self, value: Any) -> Any:
        return value

    def _from_json(self, value: Any) -> Any:
        return value


class Null(Field):
    def type(self) -> str:
        return "null"

    def python_type(self) -> builtins.type:
        return type(None)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"Field {name} is set to be None")
        return val


class Boolean(Field):
    def type(self) -> str:
        return "boolean"

    def python_type(self) -> builtins.type:
        return bool

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    def type(self) -> str:
        return "int"

    def python_type(self) -> builtins.type:
        return int


class Long(Field):
    def type(self) -> str:
        return "long"

    def python_type(self) -> builtins.type:
        return int


class Float(Field):
    def type(self) -> str:
        return "float"

    def python_type(self) -> tuple[builtins.type, ...]:
        return (float, int)


class Double(Field):
    def type(self) -> str:
        return "double"

    def python_type(self) -> tuple[builtins.type, ...]:
        return (float, int)


class Bytes(Field):
    def type(self) -> str:
        return "bytes"

    def python_type(self) -> tuple[builtins.type, ...]:
        return (bytes, str)

    def validate_type(self, name: str, val: Any) -> Any:
        if isinstance(val, str):
            return val.encode()
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, (bytes, bytearray)):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: bytes")
        return bytes(val)

    # JSON has no bytes: base64 text, as the Java client's Jackson writes a byte[].
    def _to_json(self, value: Any) -> Any:
        return None if value is None else base64.b64encode(value).decode("ascii")

    def _from_json(self, value: Any) -> Any:
        return base64.b64decode(value) if isinstance(value, str) else value


class String(Field):
    def type(self) -> str:
        return "string"

    def python_type(self) -> tuple[builtins.type, ...]:
        return (str, bytes)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if isinstance(val, bytes):
            return val.decode()
        if not isinstance(val, str):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected a string")
        return val


class CustomEnum(Field):
    """A Python ``Enum`` as an Avro enum: written by member name (JSON: by member value)."""

    def __init__(
        self, enum_type: Any, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise Exception(f"{name_of(enum_type)} is not a valid Enum type")
        self.enum_type: type[enum.Enum] = enum_type
        self.values: dict[Any, enum.Enum] = {member.value: member for member in enum_type.__members__.values()}
        super().__init__(default, required, required_default)

    def type(self) -> str:
        return "enum"

    def python_type(self) -> builtins.type:
        return self.enum_type

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        if isinstance(val, self.enum_type):
            return val
        members = self.enum_type.__members__
        if isinstance(val, str) and val in members:
            return members[val]
        if not isinstance(val, bool) and val in self.values:
            return self.values[val]
        if isinstance(val, (str, int)):
            raise TypeError(f"Invalid enum value '{val}' for field '{name}'. Expected: {list(members)}")
        raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: {name_of(self.enum_type)}")

    def schema(self) -> Any:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [member.name for member in self.enum_type]}

    def _to_avro(self, value: Any) -> Any:
        return enum_to_name(value)

    def _from_avro(self, value: Any) -> Any:
        return None if value is None else self.enum_type.__members__[value]

    def _to_json(self, value: Any) -> Any:
        return value.value if isinstance(value, enum.Enum) else value

    def _from_json(self, value: Any) -> Any:
        return self.validate_type(self.enum_type.__name__, value)
