"""Schemas in the client: objects encoded at ``send``, decoded by ``Message.value()`` (WIRE.md R118-R122).

Why it is shaped this way:

- A producer with a schema (anything but ``None``/``BytesSchema``) registers it in its ``producer``
  command and is answered the registry version it was found under (``ProducerSchema``). Every
  entry it writes then carries that version in ``meta["sv"]``, so a reader knows which schema
  each message was written with, whatever was registered later. The version is shared by every
  partition producer of one producer: partitions share one registry record, and a lazily started
  partition seals its first batch before it has registered.
- A consumer decodes each message with the writer's version into its own (reader) schema. For
  ``AvroSchema`` (``needs_writer_schema``) that needs the writer's definition: it is fetched with
  ``get_schema`` (R121) and cached in the client per (base topic, version) for good, since
  versions never change (``WriterSchemas``). The fetch happens before the message reaches the
  application (``WriterSchemaGate`` holds one partition consumer's messages, in order, while it
  is outstanding), so ``Message.value()`` never waits on the network and is safe on an event loop.
- Bytes producers and consumers get ``None`` from ``producer_schema``/``message_decoder`` and run
  exactly the code they ran before schemas existed.

If a writer version cannot be fetched, the message is decoded with the reader's own schema, as
pulsar-client's ``AvroSchema`` does (it logs the failure and falls back the same way).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from magnetar.protocol.entry import META_SCHEMA_VERSION, EntryMeta
from magnetar.protocol.topic_name import TopicName
from magnetar.schema.info import SchemaInfo

# A received ``client.message.Message`` (not imported: ``message`` imports this module).
Message = Any

log = logging.getLogger(__name__)

# No schema version on a message (pulsar-client's ``int_schema_version()`` for one without).
NO_SCHEMA_VERSION = -1


def is_bytes_schema(schema: object) -> bool:
    """Whether ``schema`` means plain bytes: None (Magnetar's default) or a ``BytesSchema``."""
    return schema is None or type(schema).__name__ == "BytesSchema"


def check_schema(schema: object) -> None:
    """``ValueError`` unless ``schema`` is None or a ``magnetar.schema.Schema``.

    pulsar-client's check, worded as ``config.arguments.check_type`` words it; written out here
    because the config sits above this module (the consumer's config checks its schema with it).
    """
    if schema is None:
        return
    from magnetar.schema import Schema  # loaded only by programs that use schemas

    if not isinstance(schema, Schema):
        raise ValueError(f"Argument schema is expected to be of type 'Schema' and not '{type(schema).__name__}'")


def schema_key(topic: str) -> str:
    """The registry's key for ``topic``: ``tenant/ns/local`` of its partitioned base, without domain (R119)."""
    return TopicName.parse(topic).partitioned_base.path


def version_bytes(version: int | None) -> str:
    """pulsar-client's ``Message.schema_version()``: the version as 8 big-endian bytes in a str, "" without."""
    if version is None:
        return ""
    return struct.pack(">q", version).decode("latin-1")


class ProducerSchema:
    """A producer's schema: what it registers, the version it was answered, and the encoder."""

    __slots__ = ("schema", "version", "wire")

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        info: SchemaInfo = schema.schema_info()
        self.wire = info.to_wire()
        # The registry version (``producer_success.schema_version``); None until first registered.
        self.version: int | None = None

    def encode(self, obj: Any) -> bytes | None:
        """The payload of ``obj`` (``TypeError`` from the schema for a wrong type); None stays a null value."""
        if obj is None:
            return None
        data: bytes = self.schema.encode(obj)
        return data

    def stamp(self, meta: EntryMeta) -> None:
        """Name the writer's version in an entry's meta (before encryption seals it, R122)."""
        version = self.version
        if version is not None:
            meta["sv"] = version


def producer_schema(schema: Any) -> ProducerSchema | None:
    """The producer's schema state, or None for bytes (nothing on the wire, nothing per message)."""
    check_schema(schema)
    return None if is_bytes_schema(schema) else ProducerSchema(schema)


# Fetches one version of a topic's schema: (topic, version) -> (version, info).
SchemaFetch = Callable[[str, int | None], Awaitable[tuple[int, SchemaInfo]]]


class WriterSchemas:
    """The client's writer schemas by (registry key, version), fetched once each (``get_schema``)."""

    def __init__(self, fetch: SchemaFetch) -> None:
        self._fetch = fetch
        self._known: dict[tuple[str, int], SchemaInfo] = {}
        self._pending: dict[tuple[str, int], asyncio.Future[SchemaInfo]] = {}

    def get(self, key: str, version: int) -> SchemaInfo | None:
        return self._known.get((key, version))

    async def load(self, topic: str, key: str, version: int) -> SchemaInfo:
        """The writer schema, fetched if not known yet (concurrent askers share one fetch)."""
        known = self._known.get((key, version))
        if known is not None:
            return known
        pending = self._pending.get((key, version))
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._pending[(key, version)] = pending
            try:
                _, info = await self._fetch(topic, version)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: the waiters (if any) get it raised
                raise
            finally:
                self._pending.pop((key, version), None)
            self._known[(key, version)] = info
            pending.set_result(info)
            return info
        return await asyncio.shield(pending)


class MessageDecoder:
    """One partition consumer's decoding: its reader schema, and the writer versions it has seen."""

    __slots__ = ("_failed", "_writers", "key", "needs_writer", "own", "schema", "store", "topic", "wire")

    def __init__(self, schema: Any, topic: str, store: WriterSchemas | None) -> None:
        self.schema = schema
        self.topic = topic
        self.key = schema_key(topic)
        self.own: SchemaInfo = schema.schema_info()
        self.wire = self.own.to_wire()
        self.store = store
        self.needs_writer = bool(getattr(schema, "needs_writer_schema", False)) and store is not None
        # Writer per version as decode_with takes it: None when it is the reader's own schema.
        self._writers: dict[int, SchemaInfo | None] = {}
        self._failed: set[int] = set()

    def decode(self, payload: bytes, meta: EntryMeta | None) -> Any:
        """``payload`` decoded into the reader schema's Python form, read with the writer's version."""
        writer: SchemaInfo | None = None
        if self.needs_writer and meta is not None:
            version = meta.get(META_SCHEMA_VERSION)
            if version is not None:
                writer = self._writer(version)
        return self.schema.decode_with(payload, writer)

    def _writer(self, version: int) -> SchemaInfo | None:
        writers = self._writers
        if version in writers:
            return writers[version]
        assert self.store is not None  # needs_writer
        info = self.store.get(self.key, version)
        if info is None:  # could not be fetched: the reader's schema stands in (as pulsar-client)
            return None
        writer = None if info.same_schema(self.own) else info
        writers[version] = writer
        return writer

    def missing(self, messages: Sequence[Message]) -> int | None:
        """The writer version these messages (one entry's) need and the client does not have yet."""
        meta = messages[0]._info.meta if messages else None
        if meta is None or not self.needs_writer:
            return None
        version = meta.get(META_SCHEMA_VERSION)
        if version is None or version in self._writers or version in self._failed:
            return None
        assert self.store is not None
        if self.store.get(self.key, version) is not None:
            return None
        return int(version)

    def failed(self, version: int) -> None:
        """The version could not be fetched: decode its messages with the reader schema, do not ask again."""
        self._failed.add(version)


def message_decoder(schema: Any, topic: str, store: WriterSchemas | None) -> MessageDecoder | None:
    """The consumer's decoder, or None for bytes (``value()`` is then ``data()``, nothing is sent)."""
    check_schema(schema)
    return None if is_bytes_schema(schema) else MessageDecoder(schema, topic, store)


class WriterSchemaGate:
    """Holds one partition consumer's deliveries, in order, while a writer schema is being fetched."""

    def __init__(
        self,
        decoder: MessageDecoder,
        deliver: Callable[[list[Message]], None],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._decoder = decoder
        self._deliver = deliver
        self._loop = loop
        self._held: deque[list[Message]] = deque()
        self._task: asyncio.Task[None] | None = None

    def deliver(self, messages: list[Message]) -> None:
        """The partition consumer's ``deliver``: straight through unless a writer schema is missing."""
        if self._held or self._task is not None:
            self._held.append(messages)
            return
        version = self._decoder.missing(messages)
        if version is None:
            self._deliver(messages)
            return
        self._held.append(messages)
        self._start(version)

    def _start(self, version: int) -> None:
        self._task = self._loop.create_task(self._fetch(version), name=f"magnetar-schema {self._decoder.topic}")

    async def _fetch(self, version: int) -> None:
        decoder = self._decoder
        assert decoder.store is not None
        try:
            await decoder.store.load(decoder.topic, decoder.key, version)
        except asyncio.CancelledError:
            self._task = None
            raise
        except Exception as exc:  # any failure: decode with the reader schema rather than stall the consumer
            log.error(
                "cannot get schema version %s of %s (%s); decoding with the reader schema", version, decoder.topic, exc
            )
            decoder.failed(version)
        self._task = None
        self._drain()

    def _drain(self) -> None:
        held = self._held
        while held:
            version = self._decoder.missing(held[0])
            if version is not None:
                self._start(version)
                return
            self._deliver(held.popleft())

    def take(self) -> list[Message]:
        """Drop what is held (the consumer re-subscribes or seeks: it comes again) and return it, oldest first."""
        out = [m for messages in self._held for m in messages]
        self._held.clear()
        return out

    def close(self) -> None:
        task, self._task = self._task, None
        self._held.clear()
        if task is not None:
            task.cancel()
