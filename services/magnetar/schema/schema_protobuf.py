"""``ProtobufNativeSchema``: generated protobuf message classes in protobuf's own binary encoding.

The definition is the JSON Pulsar's Java client stores for PROTOBUF_NATIVE (its
``ProtobufNativeSchemaData``): ``fileDescriptorSet`` (base64 of a ``FileDescriptorSet`` holding the
message's file and every file it imports, dependencies first), ``rootMessageTypeName`` (the
message's full name) and ``rootFileDescriptorName``. The registry compares versions by the root
message name; protobuf's own wire rules (unknown fields kept, missing ones default) make any
version of a message decode into any other, so ``decode_with`` needs no writer definition.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]
from google.protobuf.message import Message  # type: ignore[import-untyped]

from magnetar.schema.info import SchemaType
from magnetar.schema.schema import Schema


def _add_file(file: Any, seen: set[str], out: Any) -> None:
    """Append ``file`` after its imports (each file once), the order protobuf's pools load them in."""
    if file.name in seen:
        return
    seen.add(file.name)
    for dependency in file.dependencies:
        _add_file(dependency, seen, out)
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    out.file.append(proto)


def protobuf_native_definition(descriptor: Any) -> dict[str, str]:
    """The PROTOBUF_NATIVE definition of a message descriptor, as Pulsar stores it."""
    files = descriptor_pb2.FileDescriptorSet()
    _add_file(descriptor.file, set(), files)
    return {
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode("ascii"),
        "rootMessageTypeName": descriptor.full_name,
        "rootFileDescriptorName": descriptor.file.name,
    }


class ProtobufNativeSchema(Schema):
    """A generated protobuf message class (a ``google.protobuf.message.Message`` subclass)."""

    def __init__(self, record_cls: Any) -> None:
        if not (isinstance(record_cls, type) and issubclass(record_cls, Message)):
            raise TypeError(f"record_cls must be a protobuf Message subclass, got {record_cls!r}")
        message_cls: Any = record_cls
        definition = protobuf_native_definition(message_cls.DESCRIPTOR)
        super().__init__(record_cls, SchemaType.PROTOBUF_NATIVE, definition, "PROTOBUF_NATIVE")

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        data: bytes = obj.SerializeToString()
        return data

    def decode(self, data: bytes) -> Any:
        return self._record_cls.FromString(bytes(data))

    def __str__(self) -> str:
        return f"ProtobufNativeSchema({self._record_cls.__name__})"
