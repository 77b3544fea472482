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
permits, ack timeouts and acknowledgements work as for messages received one by one. The policy
class is one of pulsar-client's option classes (``options``), which the config can name without
importing the consumer.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Protocol

from magnetar.client.message import Message
from magnetar.client.options import (
    DEFAULT_MAX_NUM_BYTES,
    DEFAULT_MAX_NUM_MESSAGE,
    DEFAULT_TIMEOUT_MS,
    ConsumerBatchReceivePolicy,
)
from magnetar.protocol.errors import Timeout

__all__ = ["DEFAULT_POLICY", "BatchSource", "ConsumerBatchReceivePolicy", "collect"]


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
