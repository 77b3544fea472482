"""Record classes and the container fields, as ``pulsar.schema``'s: a class declares a typed record.

A ``Record`` subclass lists its fields as class attributes (``id = String(required=True)``) and
``Record.schema()`` turns it into an Avro schema dict. That dict must be exactly the one Pulsar's
Python client builds for the same class, because it becomes the registry's definition text: a
schema registered by a Pulsar program and one registered by a Magnetar program for the same class
must be the *same* version, not a compatibility check apart. So the quirks are Pulsar's on purpose:
a field is a ``["null", T]`` union unless ``required``, ``default`` appears in the schema only with
``required_default=True``, enums are written by name, a record or enum already defined in the same
schema is referred to by name, and only the fields declared on the class itself count (a subclass
of a record subclass does not inherit its parent's fields).

The scalar field types (``Integer``, ``String``, ``CustomEnum``...) are in ``fields``; the
containers ``Array`` and ``Map`` are here with ``Record``, because records nest in them and they in
records.

Beyond Pulsar, every field knows how to turn its Python value into what fastavro writes and back
(``_to_avro`` / ``_from_avro``) and into JSON (``_to_json`` / ``_from_json``); a record class
compiles these into one plan per class, so encoding a record costs one pass over its fields rather
than a walk of ``__dict__`` that asks every value what it is.
"""

from __future__ import annotations

import builtins
import copy
import enum
from collections.abc import Callable
from typing import Any, ClassVar

from magnetar.schema.fields import CustomEnum, Field, enum_to_name, name_of

Convert = Callable[[Any], Any]


def _as_field(x: Any) -> Any:
    """An item/value type for ``Array``/``Map``: a Field, a Record instance, or (Magnetar accepts
    these too) a Record class or an Enum class, which become ``X()`` / ``CustomEnum(X)``."""
    if isinstance(x, RecordMeta) and x is not Record:
        return x()
    if isinstance(x, enum.EnumMeta):
        return CustomEnum(x)
    if isinstance(x, (Field, Record)):
        return x
    raise Exception(f"Argument {name_of(x)} is not a Record or a Field")


class RecordMeta(type):
    """Collects a record class's own field declarations, in declaration order, into ``_fields``."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> RecordMeta:
        if name != "Record":
            fields: dict[str, Any] = {}
            for attr, value in namespace.items():
                if isinstance(value, enum.EnumMeta):
                    value = CustomEnum(value)
                elif isinstance(value, RecordMeta):
                    value = value()  # a record class used as a field means "an instance of it"
                if isinstance(value, (Field, Record)):
                    fields[attr] = value
            namespace["_fields"] = fields
            namespace["_required"] = False
        cls = super().__new__(mcs, name, bases, namespace)
        return cls


class Record(metaclass=RecordMeta):
    """Base of user record classes; an instance of a subclass is also a field of a nested record."""

    # Avro namespace of the generated record schema (None = no "namespace" key).
    _avro_namespace: ClassVar[str | None] = None
    # Fields in alphabetical order in the generated schema instead of declaration order.
    _sorted_fields: ClassVar[bool] = False
    _fields: ClassVar[dict[str, Any]] = {}
    # Per instance (a record instance is also the declaration of a nested-record field).
    _required: bool
    _default: Any
    _required_default: bool

    def __init__(
        self, default: Any = None, required_default: bool = False, required: bool = False, *args: Any, **kwargs: Any
    ) -> None:
        if type(self) is Record:
            # pulsar-client's bare Record has no field table at all, so it refuses to be built.
            raise AttributeError(
                "Record is the base of record classes and has no fields: declare a subclass "
                "(class User(Record): name = String()) and create that"
            )
        object.__setattr__(self, "_required_default", required_default)
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required", required)
        for name, field in self._fields.items():
            if name in kwargs:
                value = kwargs[name]
                if isinstance(field, Record) and isinstance(value, dict):
                    value = type(field)(**value)
                elif isinstance(field, Array) and isinstance(value, list):
                    value = _records_from_dicts(field.array_type, value)
                elif isinstance(field, Map) and isinstance(value, dict):
                    value = _record_map_from_dicts(field.value_type, value)
                setattr(self, name, value)
            elif isinstance(field, Record):
                # Pulsar sets the declared sub-record itself; a copy keeps instances independent.
                object.__setattr__(self, name, copy.copy(field))
            else:
                object.__setattr__(self, name, field.default())

    # ---------------------------------------------------------------- schema generation (Pulsar's)

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro schema dict of this record class, as Pulsar's ``Record.schema()``."""
        result: dict[str, Any] = cls.schema_info(set())
        return result

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> Any:
        """This record's schema; its full name alone when already defined earlier in the schema."""
        full_name = cls.__name__ if cls._avro_namespace is None else f"{cls._avro_namespace}.{cls.__name__}"
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)
        schema: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if cls._avro_namespace is not None:
            schema["namespace"] = cls._avro_namespace
        fields: list[dict[str, Any]] = []
        schema["fields"] = fields
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        for name in names:
            field = cls._fields[name]
            inner = field.schema_info(defined_names)
            field_type = inner if field._required else ["null", inner]
            if field.required_default():
                default = field.default()
                if isinstance(default, enum.Enum):
                    default = default.name
                fields.append({"name": name, "default": default, "type": field_type})
            else:
                fields.append({"name": name, "type": field_type})
        return schema

    # ------------------------------------------------------------------- instance behaviour

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("_default", "_required", "_required_default"):
            object.__setattr__(self, key, value)
            return
        field = self._fields.get(key)
        if field is None:
            raise AttributeError(f"Cannot set undeclared field {key} on record")
        object.__setattr__(self, key, field.validate_type(key, value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name, None) for name in self._fields)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable and compared by value, as Pulsar's

    def __str__(self) -> str:
        return str(self.__dict__)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({values})"

    # ------------------------------------------------------- a record instance used as a field

    def type(self) -> str:
        return type(self).__name__

    def python_type(self) -> builtins.type:
        return type(self)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, type(self)):
            raise TypeError(
                f"Invalid type '{type(val)}' for sub-record field '{name}'. Expected: {name_of(type(self))}"
            )
        return val

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return bool(self._required_default)

    # ------------------------------------------------------------- codecs (Magnetar, not Pulsar)

    def _to_avro(self, value: Any) -> Any:
        return None if value is None else type(self)._encode_avro(value)

    def _from_avro(self, value: Any) -> Any:
        return None if value is None else type(self)._decode_avro(value)

    def _to_json(self, value: Any) -> Any:
        return None if value is None else type(self)._encode_json(value)

    def _from_json(self, value: Any) -> Any:
        if value is None or isinstance(value, Record):
            return value
        return type(self)._decode_json(value)

    @classmethod
    def _plan(cls) -> _Plan:
        plan = cls.__dict__.get("_codec_plan")
        if plan is None:
            plan = _Plan(cls)
            type.__setattr__(cls, "_codec_plan", plan)
        return plan

    @classmethod
    def _encode_avro(cls, obj: Record) -> dict[str, Any]:
        """The datum fastavro writes for ``obj``: enums by name, nested records as dicts."""
        get = obj.__dict__.get
        return {name: get(name) if convert is None else convert(get(name)) for name, convert in cls._plan().to_avro}

    @classmethod
    def _decode_avro(cls, datum: dict[str, Any]) -> Any:
        """A record built from what fastavro read, without re-validating what Avro already typed."""
        obj = cls.__new__(cls)
        state = obj.__dict__
        state["_required_default"] = False
        state["_default"] = None
        state["_required"] = False
        for name, convert, field in cls._plan().from_avro:
            if name in datum:
                value = datum[name]
                state[name] = value if convert is None else convert(value)
            else:
                state[name] = copy.copy(field) if isinstance(field, Record) else field.default()
        return obj

    @classmethod
    def _encode_json(cls, obj: Record) -> dict[str, Any]:
        get = obj.__dict__.get
        return {name: field._to_json(get(name)) for name, field in cls._fields.items()}

    @classmethod
    def _decode_json(cls, data: dict[str, Any]) -> Any:
        """A record from decoded JSON: unknown keys ignored, missing ones take their defaults,
        values validated as the constructor does."""
        if not isinstance(data, dict):
            raise TypeError(f"Invalid JSON value of type '{type(data)}' for record {cls.__name__}: expected an object")
        values = {name: field._from_json(data[name]) for name, field in cls._fields.items() if name in data}
        return cls(**values)


class _Plan:
    """A record class's codec steps, computed once: ``None`` where a value passes unchanged."""

    def __init__(self, cls: type[Record]) -> None:
        self.to_avro: list[tuple[str, Convert | None]] = []
        self.from_avro: list[tuple[str, Convert | None, Any]] = []
        for name, field in cls._fields.items():
            self.to_avro.append((name, _avro_writer(field)))
            self.from_avro.append((name, _avro_reader(field), field))


def _avro_writer(field: Any) -> Convert | None:
    if isinstance(field, Record):
        return field._to_avro
    if isinstance(field, CustomEnum):
        return enum_to_name
    if isinstance(field, Array):
        item = _avro_writer(field.array_type)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if isinstance(field, Map):
        value = _avro_writer(field.value_type)
        if value is None:
            return None
        return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
    return None


def _avro_reader(field: Any) -> Convert | None:
    if isinstance(field, Record):
        return field._from_avro
    if isinstance(field, CustomEnum):
        return field._from_avro
    if isinstance(field, Array):
        item = _avro_reader(field.array_type)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if isinstance(field, Map):
        value = _avro_reader(field.value_type)
        if value is None:
            return None
        return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
    return None


def _records_from_dicts(item_type: Any, items: list[Any]) -> list[Any]:
    if isinstance(item_type, Record):
        return [type(item_type)(**x) if isinstance(x, dict) else x for x in items]
    return items


def _record_map_from_dicts(value_type: Any, values: dict[Any, Any]) -> dict[Any, Any]:
    if isinstance(value_type, Record):
        return {k: type(value_type)(**v) if isinstance(v, dict) else v for k, v in values.items()}
    return values


class Array(Field):
    def __init__(
        self, array_type: Any, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        self.array_type: Any = _as_field(array_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def type(self) -> str:
        return "array"

    def python_type(self) -> builtins.type:
        return list

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        expected = self.array_type.python_type()
        for item in val:
            if not isinstance(item, expected):
                raise TypeError(f"Array field {name} items should all be of type {name_of(self.array_type.type())}")
        return val

    def schema(self) -> Any:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "array", "items": _item_schema(self.array_type, defined_names)}

    def _to_avro(self, value: Any) -> Any:
        return None if value is None else [self.array_type._to_avro(x) for x in value]

    def _from_avro(self, value: Any) -> Any:
        return None if value is None else [self.array_type._from_avro(x) for x in value]

    def _to_json(self, value: Any) -> Any:
        return None if value is None else [self.array_type._to_json(x) for x in value]

    def _from_json(self, value: Any) -> Any:
        return [self.array_type._from_json(x) for x in value] if isinstance(value, list) else value


class Map(Field):
    def __init__(
        self, value_type: Any, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        self.value_type: Any = _as_field(value_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def type(self) -> str:
        return "map"

    def python_type(self) -> builtins.type:
        return dict

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        expected = self.value_type.python_type()
        for key, item in val.items():
            if not isinstance(key, str):
                raise TypeError(f"Map keys for field {name}  should all be strings")
            if not isinstance(item, expected):
                raise TypeError(f"Map values for field {name} should all be of type {name_of(expected)}")
        return val

    def schema(self) -> Any:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "map", "values": _item_schema(self.value_type, defined_names)}

    def _to_avro(self, value: Any) -> Any:
        return None if value is None else {k: self.value_type._to_avro(x) for k, x in value.items()}

    def _from_avro(self, value: Any) -> Any:
        return None if value is None else {k: self.value_type._from_avro(x) for k, x in value.items()}

    def _to_json(self, value: Any) -> Any:
        return None if value is None else {k: self.value_type._to_json(x) for k, x in value.items()}

    def _from_json(self, value: Any) -> Any:
        return {k: self.value_type._from_json(x) for k, x in value.items()} if isinstance(value, dict) else value


def _item_schema(item: Any, defined_names: set[str]) -> Any:
    """Array items / map values: a complex type's full schema, a primitive's type name.

    Pulsar names the primitive by ``type()`` and expands only arrays, maps and records, which for an
    enum gives the bare word ``"enum"`` (not a valid Avro schema: fastavro refuses to write with
    it). Magnetar expands enums as well, the one place its definitions differ from Pulsar's.
    """
    if isinstance(item, (Array, Map, Record, CustomEnum)):
        return item.schema_info(defined_names)
    return item.type()
