"""``schema_info()`` and ``get_schema_info()`` answer an object with pulsar-client's accessors.

pulsar-client's ``SchemaInfo`` has methods: ``schema_type()``, ``schema()``, ``name()`` and
``properties()``. Magnetar's also keeps its attributes (``type``, ``schema``, ``name``,
``properties``), which existing programs read; both spellings work on the same object, from a
schema object and from the registry of a real standalone, blocking and asyncio.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar import asyncio as aio
from magnetar.schema import AvroSchema, BytesSchema, Integer, JsonSchema, Record, String, StringSchema


class User(Record):
    name = String()
    age = Integer()


def _accessors(info: Any) -> tuple[str, str, str, dict[str, str]]:
    return str(info.schema_type()), info.schema(), info.name(), info.properties()


def test_a_schema_objects_info_has_the_accessors_and_the_attributes() -> None:
    info = AvroSchema(User).schema_info()
    stype, text, name, props = _accessors(info)
    assert (stype, name, props) == ("SchemaType.AVRO", "AVRO", {})
    assert json.loads(text) == User.schema() and text == info.schema
    assert (info.type.name, info.name) == ("AVRO", "AVRO")
    assert _accessors(JsonSchema(User).schema_info())[0::2] == ("SchemaType.JSON", "JSON")
    assert _accessors(StringSchema().schema_info()) == ("SchemaType.STRING", "", "STRING", {})
    assert _accessors(BytesSchema().schema_info())[0] == "SchemaType.BYTES"
    # properties() is a copy: the info stays as registered.
    info.properties()["k"] = "v"
    assert info.properties() == {} and dict(info.properties) == {}


def test_get_schema_info_answers_the_registered_version_with_the_accessors(
    standalone: StandaloneProcess, topic: str
) -> None:
    with pulsar.Client(standalone.service_url, operation_timeout_seconds=20) as client:
        client.create_producer(topic, schema=AvroSchema(User)).send(User(name="ada", age=36))
        for info in (client.get_schema_info(topic), client.get_schema_info(topic, 0)):
            stype, text, name, props = _accessors(info)
            assert stype == "SchemaType.AVRO" and json.loads(text) == User.schema()
            assert isinstance(name, str) and props == {}
            assert info.type.name == "AVRO" and info.same_schema(AvroSchema(User).schema_info())


async def test_the_asyncio_client_answers_the_same_object(standalone: StandaloneProcess, topic: str) -> None:
    async with aio.Client(standalone.service_url, operation_timeout_seconds=20) as client:
        producer = await client.create_producer(topic, schema=StringSchema())
        await producer.send("hello")
        info = await client.get_schema_info(topic)
        assert _accessors(info) == ("SchemaType.STRING", "", info.name(), {})
        assert info.name() == info.name
