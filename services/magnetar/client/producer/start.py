"""How a partition producer starts: how long its ``producer`` request may wait, and lazy starting.

Kept apart from ``producer`` (the send path) because both rules are about *when* a producer is
registered, not how it sends:

- a ``WaitForExclusive`` producer's registration is answered only once the broker gives it the topic
  (WIRE.md R102), which may take as long as the current holder stays: the request has no operation
  timeout then, as in Pulsar, whose client waits for that answer without one;
- with ``lazy_start_partitioned_producers`` a partitioned producer registers a partition's producer
  on the first batch routed to it (Pulsar's lazy start: fewer producers on topics with many
  partitions when each client writes to few of them); until then the partition producer queues
  that batch like a producer that is reconnecting, and sends it once attached.
"""

from __future__ import annotations

from magnetar.client.options import ProducerAccessMode

# "No timeout": a year, which ``asyncio.wait_for`` handles (unlike ``math.inf`` on every Python).
WAIT_FOREVER = 365 * 24 * 3600.0


def access_wait_limit(mode: ProducerAccessMode) -> float | None:
    """The limit for a ``producer`` request in ``mode``: None (the operation timeout) unless it may wait."""
    return WAIT_FOREVER if mode is ProducerAccessMode.WaitForExclusive else None


def starts_lazily(lazy: bool, mode: ProducerAccessMode, partition: int) -> bool:
    """Whether partition ``partition``'s producer waits for its first batch before registering.

    As pulsar-client's C++ core: lazy start applies in ``Shared`` mode only (an exclusive producer
    must hold every partition from its creation on; the option is then ignored, not refused), and
    partition 0 still starts at creation, so that a refusal (authorization, a missing topic)
    surfaces from ``create_producer``.
    """
    return lazy and mode is ProducerAccessMode.Shared and partition != 0
