"""One Spark task of the ``magnetar`` sink: its rows published through the Magnetar client.

A task owns one producer per partition of each target topic, all under the task's producer name
(jobs/topic_writer.py says how the name and the sequence ids make a replay store nothing twice).
It routes rows itself rather than through a partitioned producer, so that it knows which
producer, hence which broker-side sequence, each row belongs to: a keyed row goes where Pulsar's
client sends that key (``partition_for_key``, Java string hash), an unkeyed one to the partition
``task partition % partitions`` (deterministic, so a replay routes every row as the first try did).

Each producer starts by asking the broker the last sequence id stored under its name, and the
rows at or below it are skipped: they were stored by an earlier attempt of the same micro-batch.
The rest are sent in batches; the task ends once every send is acknowledged (``flush``), and
fails on the first send that was not, so that Spark retries the task (or the batch, on restart).
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

import magnetar.client as pulsar
from magnetar.client.producer.routing import partition_for_key
from magnetar.jobs.sink_options import SinkOptions, ensure_deduplication
from magnetar.protocol.errors import ProducerBusy
from magnetar.schema.info import SchemaType
from magnetar.schema.schema import Schema
from magnetar.schema.schema_avro import AvroSchema

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


class JsonDefinitionSchema(Schema):
    """A JSON schema given by its Avro definition, for dict values (``JsonSchema`` wants a class)."""

    def __init__(self, definition: Any) -> None:
        super().__init__(None, SchemaType.JSON, definition, "JSON")

    def encode(self, obj: Any) -> bytes:
        return json.dumps(obj, indent=True, default=_json_default).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    return str(value)


def _plain(value: Any) -> Any:
    """A Spark value as the Avro/JSON encoders take it: Rows as dicts, bytearrays as bytes."""
    if hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def epoch_millis(value: Any) -> int | None:
    """An ``event_time`` cell in epoch ms: a long as it is, a timestamp (Spark hands Python a
    naive local time) converted exactly; None or 0 publish no event time."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        aware = value.astimezone(datetime.UTC) if value.tzinfo is None else value
        return (aware - _EPOCH) // _MS or None
    return int(value) or None


class TaskPublisher:
    """The producers of one task (module docstring); a context manager closing them and the client."""

    def __init__(self, options: SinkOptions, producer_name: str, partition: int) -> None:
        self.options = options
        self.producer_name = producer_name
        self.partition = partition
        self.rows = self.sent = self.skipped = 0
        self._client: Any = None
        self._topics: dict[str, list[str]] = {}  # target topic -> its partition topics (itself if none)
        self._producers: dict[str, Any] = {}  # partition topic -> producer
        self._last: dict[str, int] = {}  # partition topic -> last sequence id stored under the name
        self._lock = threading.Lock()
        self._error: str | None = None

    def __enter__(self) -> TaskPublisher:
        creds = self.options.credentials.resolved()
        auth = pulsar.Authentication(creds.plugin or "token", creds.params) if creds.params else None
        self._client = pulsar.Client(
            self.options.service_url,
            authentication=auth,
            tls_trust_certs_file_path=creds.tls_trust_certs_file_path,
            operation_timeout_seconds=self.options.send_timeout_ms / 1000,
        )
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            for producer in self._producers.values():
                try:
                    producer.close()
                except Exception:
                    if kind is None:
                        raise
        finally:
            self._client.close()

    # ------------------------------------------------------------------ targets
    def _partition_topic(self, topic: str, key: str | None) -> str:
        """The partition topic a row goes to (the topic itself when it is not partitioned)."""
        names = self._topics.get(topic)
        if names is None:
            if topic != self.options.topic:  # the topic option's target was checked on the driver
                ensure_deduplication(self.options, topic)
            try:
                names = self._client.get_topic_partitions(topic)
            except Exception as exc:
                raise RuntimeError(f"the magnetar sink cannot publish to {topic}: {_one_line(exc)}") from None
            self._topics[topic] = names
        if len(names) == 1:
            return str(names[0])
        index = partition_for_key(key, len(names)) if key is not None else self.partition % len(names)
        return str(names[index])

    def _producer(self, target: str) -> Any:
        producer = self._producers.get(target)
        if producer is not None:
            return producer
        deadline = time.monotonic() + self.options.producer_busy_timeout_ms / 1000
        delay = 0.1
        while True:
            try:
                producer = self._client.create_producer(
                    target,
                    producer_name=self.producer_name,
                    schema=self._schema(target),
                    send_timeout_millis=self.options.send_timeout_ms,
                    max_pending_messages=self.options.max_pending_messages,
                    block_if_queue_full=True,
                    batching_enabled=True,
                    batching_max_messages=self.options.batching_max_messages,
                )
                break
            except ProducerBusy:
                # A producer of this name from an attempt that died is still registered until
                # the broker sees its connection closed.
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"the magnetar sink's producer {self.producer_name} is still registered on {target} after "
                        f"{self.options.producer_busy_timeout_ms} ms (another query with the same writerId?)"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            except Exception as exc:
                raise RuntimeError(f"the magnetar sink cannot publish to {target}: {_one_line(exc)}") from None
        self._producers[target] = producer
        self._last[target] = producer.last_sequence_id()
        return producer

    def _schema(self, target: str) -> Any:
        """The producer's schema: None (bytes), or the ``valueSchema`` one (module docstring)."""
        definition = self.options.value_schema
        if definition is None:
            return None
        kind = self.options.value_schema_type
        if definition == "topic":
            info = self._client.get_schema_info(target)
            kind = info.type.name
            parsed = info.definition()
        else:
            parsed = json.loads(definition)
        if kind == "AVRO":
            return AvroSchema(None, parsed)
        if kind == "JSON":
            return JsonDefinitionSchema(parsed)
        raise RuntimeError(f"the magnetar sink publishes AVRO or JSON values, and {target}'s schema is {kind}")

    # ------------------------------------------------------------------ publishing
    def _done(self, result: Any, _msg_id: Any) -> None:
        if result != pulsar.Result.Ok:
            with self._lock:
                if self._error is None:
                    self._error = str(result)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"the magnetar sink's producer {self.producer_name} failed to publish: {self._error}")

    def publish(self, rows: Iterator[Any], first_sequence_id: int) -> None:
        """Send every row not yet stored; row ``i`` gets sequence id ``first_sequence_id + i``."""
        cols = self.options.columns
        default_topic = self.options.topic
        for i, row in enumerate(rows):
            self.rows += 1
            seq = first_sequence_id + i
            topic = default_topic if cols.topic is None else row[cols.topic]
            if topic is None:
                raise ValueError(f"the magnetar sink's row {i} of task {self.partition} has a null topic")
            key = None if cols.key is None else row[cols.key]
            target = self._partition_topic(topic, key)
            producer = self._producer(target)
            if seq <= self._last[target]:
                self.skipped += 1
                continue
            value = row[cols.value]
            if cols.value_kind == "string":
                value = value.encode("utf-8") if value is not None else b""
            elif cols.value_kind == "binary":
                value = bytes(value) if value is not None else b""
            else:
                value = _plain(value)
            props = None if cols.properties is None else row[cols.properties]
            event = None if cols.event_time is None else epoch_millis(row[cols.event_time])
            producer.send_async(
                value,
                self._done,
                properties=dict(props) if props else None,
                partition_key=key,
                sequence_id=seq,
                event_timestamp=event,
            )
            self.sent += 1
            if i % 1000 == 0:
                self._raise_if_failed()

    def flush(self) -> None:
        """Wait until every send has an outcome; fail the task if one was not stored."""
        for producer in self._producers.values():
            producer.flush()
        self._raise_if_failed()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
