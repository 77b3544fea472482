"""``Consumer.batch_receive``: several messages in one call, bounded by count, bytes and time.

pulsar-client's ``batch_receive()`` returns a list of messages shaped by the consumer's
``batch_receive_policy`` (``ConsumerBatchReceivePolicy(max_num_message, max_num_bytes,
timeout_ms)``; without one, the C++ client's default: no count limit, 10 MiB, 100 ms). The call
returns as soon as the batch is full (``max_num_message`` messages, or ``max_num_bytes`` bytes of
payload), or when ``timeout_ms`` has passed since it started, with what it has then: possibly
nothing. A limit that is zero or negative is no limit; with no timeout the call waits until the
batch is full. A message that would take the batch past ``max_num_bytes`` stays queued for the
next call, unless the batch is empty (a batch always holds at least the message it can get).

The messages are taken from the consumer's receive queue exactly as ``receive`` takes them, so
permits, ack timeouts and acknowledgements work as for messages received one by one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from magnetar.client.message import Message
from magnetar.protocol.errors import Timeout

# The C++ client's BatchReceivePolicy defaults (pulsar-client has no Python-side defaults).
DEFAULT_MAX_NUM_MESSAGE = -1
DEFAULT_MAX_NUM_BYTES = 10 * 1024 * 1024
DEFAULT_TIMEOUT_MS = 100


def _int_arg(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


class ConsumerBatchReceivePolicy:
    """How ``batch_receive`` bounds a batch, as ``pulsar.ConsumerBatchReceivePolicy``.

    ``max_num_message`` and ``max_num_bytes`` below 1 mean no limit; if both are, they are reset
    to the defaults (no count limit, 10 MiB), as the C++ client does. ``timeout_ms`` below 1 means
    wait until the batch is full. All three below 1 is refused (``ValueError``).
    """

    __slots__ = ("_max_num_bytes", "_max_num_message", "_timeout_ms")

    def __init__(self, max_num_message: int, max_num_bytes: int, timeout_ms: int) -> None:
        count = _int_arg(max_num_message, "max_num_message")
        size = _int_arg(max_num_bytes, "max_num_bytes")
        timeout = _int_arg(timeout_ms, "timeout_ms")
        if count <= 0 and size <= 0 and timeout <= 0:
            raise ValueError("At least one of max_num_message, max_num_bytes and timeout_ms must be greater than 0")
        if count <= 0 and size <= 0:
            count, size = DEFAULT_MAX_NUM_MESSAGE, DEFAULT_MAX_NUM_BYTES
        self._max_num_message = count
        self._max_num_bytes = size
        self._timeout_ms = timeout

    @property
    def max_num_message(self) -> int:
        return self._max_num_message

    @property
    def max_num_bytes(self) -> int:
        return self._max_num_bytes

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    def policy(self) -> ConsumerBatchReceivePolicy:
        """The policy itself (pulsar-client returns its C++ object here)."""
        return self

    def full(self, count: int, size: int) -> bool:
        """Whether a batch of ``count`` messages and ``size`` bytes is complete."""
        return (0 < self._max_num_message <= count) or (0 < self._max_num_bytes <= size)

    def fits(self, count: int, size: int, more: int) -> bool:
        """Whether one more message of ``more`` bytes may join a batch of ``count`` and ``size``."""
        if count == 0:
            return True
        if 0 < self._max_num_message <= count:
            return False
        return not (self._max_num_bytes > 0 and size + more > self._max_num_bytes)

    def __repr__(self) -> str:
        return (
            f"ConsumerBatchReceivePolicy(max_num_message={self._max_num_message}, "
            f"max_num_bytes={self._max_num_bytes}, timeout_ms={self._timeout_ms})"
        )


class BatchSource(Protocol):
    """What a batch is taken from: ``consumer.Consumer``'s receive queue (a protocol, so that
    ``consumer`` may import this module)."""

    _queue: deque[Message]

    async def _wait(self, limit_seconds: float | None) -> None: ...

    async def receive(self, timeout_millis: int | None = None) -> Message: ...


DEFAULT_POLICY = ConsumerBatchReceivePolicy(DEFAULT_MAX_NUM_MESSAGE, DEFAULT_MAX_NUM_BYTES, DEFAULT_TIMEOUT_MS)


async def collect(consumer: BatchSource, policy: ConsumerBatchReceivePolicy | None) -> list[Message]:
    """One batch from ``consumer``'s receive queue under ``policy`` (see the module docstring)."""
    policy = policy or DEFAULT_POLICY
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.timeout_ms / 1000.0 if policy.timeout_ms > 0 else None
    queue = consumer._queue
    batch: list[Message] = []
    size = 0
    while not policy.full(len(batch), size):
        if not queue:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                break
            try:
                await consumer._wait(remaining)
            except Timeout:
                break
            continue
        if not policy.fits(len(batch), size, len(queue[0].data())):
            break
        msg = await consumer.receive()  # the queue is not empty: taken at once, with its bookkeeping
        batch.append(msg)
        size += len(msg.data())
    return batch
