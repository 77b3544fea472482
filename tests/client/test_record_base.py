"""The bare ``Record`` base class refuses fields, as pulsar-client's does.

pulsar-client's ``Record`` has no field table of its own, so building one (``Record(a=1, c=8)``,
or ``Record()`` and then setting a field) raises ``AttributeError``; Magnetar's used to accept the
keywords and drop them. A subclass still takes its declared fields, and ignores unknown keywords
as pulsar-client's does, and the subclass is what producers send, here to a real standalone.
"""

from __future__ import annotations

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar.schema import AvroSchema, Integer, Record


class Point(Record):
    x = Integer()
    y = Integer()


def test_the_bare_record_refuses_fields() -> None:
    with pytest.raises(AttributeError, match="Record is the base of record classes"):
        Record(a=1, c=8)
    with pytest.raises(AttributeError):
        Record().anything = 1


def test_a_subclass_takes_its_declared_fields_only() -> None:
    p = Point(x=1, y=2, z=3)  # unknown keywords are ignored, as pulsar-client does
    assert p == Point(x=1, y=2) and not hasattr(p, "z")
    with pytest.raises(AttributeError, match="undeclared field z"):
        p.z = 3


def test_a_subclass_is_what_a_producer_sends(standalone: StandaloneProcess, topic: str) -> None:
    with pulsar.Client(standalone.service_url, operation_timeout_seconds=20) as client:
        consumer = client.subscribe(topic, "points", schema=AvroSchema(Point))
        client.create_producer(topic, schema=AvroSchema(Point)).send(Point(x=3, y=4))
        assert consumer.receive(10_000).value() == Point(x=3, y=4)
