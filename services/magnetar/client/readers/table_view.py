"""``TableView``: the latest value of every key of a topic, kept current, as ``pulsar.TableView``.

Why a client-side table: a topic of keyed updates (a compacted topic, typically) is a changelog,
and many programs want the table it describes rather than the stream. Pulsar's clients build it
with a reader; so does this one, with the existing reader (``readers.reader``), so the table gets the
reader's guarantees (reconnection, compacted reads, partitioned topics) for free.

How it works, as pulsar-client's (C++ ``TableViewImpl``):

- ``Client.create_table_view`` starts a reader at the earliest message with
  ``is_read_compacted=True`` and reads up to the topic's last message before it returns, so the
  table is complete as of creation;
- a message with a key sets that key to its value; one with an empty or null value
  (``producer.send(None)``, ``Message.has_null_value()``) deletes the key; messages without a key
  are skipped;
- then the reader keeps the table current from the client's event loop; listeners given to
  ``for_each_and_listen`` are called for each later update (with ``b""`` for a deletion, as
  pulsar-client's bytes schema hands them) on one of the client's ``message_listener_threads``,
  in order, as Pulsar calls them on its listener thread.
- with a ``schema`` (``magnetar.schema``) the table holds decoded values (``Message.value()``, so
  each message is read with the schema version it was written with); a deletion is then told to
  listeners as None (pulsar-client decodes ``b""`` with the schema, which most schemas refuse).

Reads (``get``, ``len``, ``for_each``) work on the table as it is, from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from magnetar.client.message import Message
from magnetar.client.readers.reader import Reader
from magnetar.client.schema_codec import is_bytes_schema
from magnetar.protocol.message_id import MessageId

T = TypeVar("T")
Run = Callable[[Coroutine[Any, Any, T]], T]
Listener = Callable[[str, Any], None]

__all__ = ["ListenerThreads", "ReaderSource", "TableView"]


class ReaderSource(Protocol):
    """What a table view needs of the asyncio client (``aio.Client`` is one): its reader."""

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId,
        schema: Any = None,
        *,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
    ) -> Reader: ...


class Feed(Protocol):
    """A running hand-over of messages to listener threads (``blocking.listener_pool.Pump``)."""

    def stop(self) -> None: ...


class ListenerThreads(Protocol):
    """The client's listener threads, given by the blocking facade (``blocking.listener_pool.ListenerPool``):
    ``give`` runs there with each message ``take`` returns on the loop."""

    def start(self, take: Callable[[], Awaitable[Message]], give: Callable[[Message], Any]) -> Feed: ...


class TableView:
    """The latest value per key of a topic (``pulsar.TableView``); made by ``Client.create_table_view``."""

    def __init__(
        self, reader: Reader, topic: str, subscription: str | None, run: Run[Any], decoded: bool = False
    ) -> None:
        self._reader = reader
        self._decoded = decoded  # a schema'd table: values are ``Message.value()``
        self._topic = topic
        self._subscription = subscription
        self._run = run
        self._lock = threading.Lock()
        self._data: dict[str, Any] = {}
        self._listeners: list[tuple[int, Listener]] = []
        self._seq = 0  # updates applied so far; a listener registered at seq S hears updates after S
        self._update: tuple[int, str, Any] | None = None  # the last update ``_take`` applied
        self._pump: Feed | None = None
        self._closed = False

    # ---------------------------------------------------------------- creation (the client's loop)

    @classmethod
    def create(
        cls,
        client: ReaderSource,
        pool: ListenerThreads,
        run: Run[Any],
        topic: str,
        subscription_name: str | None,
        schema: Any,
    ) -> TableView:
        """Start the reader, read up to the last message, then follow the topic (see the module docstring).

        The arguments were checked by the caller (``config.reader.TABLE_VIEW_OPTIONS``).
        """
        reader: Reader = run(
            client.create_reader(
                topic,
                MessageId.earliest,
                schema,
                # The reader's subscription: <name>-<10 hex> (reader-<10 hex> without a name).
                subscription_role_prefix=subscription_name or None,
                is_read_compacted=True,
            )
        )
        view = cls(reader, topic, subscription_name, run, decoded=not is_bytes_schema(schema))
        try:
            run(view._load())
            view._pump = pool.start(view._take, view._give)
        except BaseException:
            run(reader.close())
            raise
        return view

    async def _load(self) -> None:
        reader = self._reader
        while await reader.has_message_available():
            self._apply(await reader.read_next())

    async def _take(self) -> Message:
        """The next keyed message, already applied to the table (awaited by the pump, on the loop)."""
        while True:
            msg = await self._reader.read_next()
            update = self._apply(msg)
            if update is not None:
                self._update = update
                return msg

    def _apply(self, msg: Message) -> tuple[int, str, Any] | None:
        if not msg.has_partition_key():
            return None
        key = msg.partition_key()
        data = msg.data()  # b"" for a null value
        value: Any = data
        if self._decoded:
            value = msg.value() if data else None
        with self._lock:
            if data:
                self._data[key] = value
            else:
                self._data.pop(key, None)
            self._seq += 1
            return self._seq, key, value

    def _give(self, msg: Message) -> None:
        """Tell the listeners registered before this update (on a listener thread, in order)."""
        update = self._update
        if update is None:
            return
        seq, key, value = update
        with self._lock:
            listeners = [cb for since, cb in self._listeners if since < seq]
        for cb in listeners:
            cb(key, value)

    # ---------------------------------------------------------------- pulsar.TableView

    def get(self, key: str) -> Any:
        """The value of ``key``, or None when the table has no such key."""
        with self._lock:
            return self._data.get(key)

    def keys(self) -> list[str]:
        """The table's keys as they are now (Java's ``TableView.keySet``; pulsar-client's Python
        ``TableView`` has no such method, the issue asks for it)."""
        with self._lock:
            return list(self._data)

    def for_each(self, callback: Listener) -> None:
        """Call ``callback(key, value)`` for every entry of the table as it is now (on this thread)."""
        with self._lock:
            items = list(self._data.items())
        for key, value in items:
            callback(key, value)

    def for_each_and_listen(self, callback: Listener) -> None:
        """``for_each(callback)``, then call ``callback`` for every later update (on a listener thread)."""
        with self._lock:
            items = list(self._data.items())
            self._listeners.append((self._seq, callback))
        for key, value in items:
            callback(key, value)

    def close(self) -> None:
        """Stop following the topic and close the reader (the table keeps its last content)."""
        if self._closed:
            return
        self._closed = True
        if self._pump is not None:
            self._pump.stop()
        self._run(self._reader.close())

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __str__(self) -> str:
        if self._subscription is None:
            return f"TableView(topic={self._topic})"
        return f"TableView(topic={self._topic}, subscription={self._subscription})"

    __repr__ = __str__
