"""Flow permits of a partition consumer: how many more messages the broker may push to it.

As Pulsar's receiver queue: ``receiver_queue_size`` permits are granted on subscribing, and more
only once half of the queue has been consumed (``acks.FlowPermits`` does the arithmetic), so the
broker refills the queue in large steps, with few ``flow`` frames. A message counts as consumed
when it is handed to the application (``message_consumed``; ``consumer.Consumer``'s receive paths
inline the same), and also when the application will never see it: a chunk that is not its
message's last, an entry dropped for a bad checksum or before the start position, what a seek or
a redelivery drops from the queue (``return_permits``).
"""

from __future__ import annotations

from magnetar.client.consumer.partition_state import PartitionConsumerState
from magnetar.client.message import EntryInfo
from magnetar.protocol import commands as cmds


class Permits(PartitionConsumerState):
    """Counts consumed messages and grants their permits back to the broker."""

    def return_permits(self, n: int) -> None:
        """Count ``n`` messages as consumed; send a ``flow`` when half the queue has been."""
        grant = self.permits.consumed(n)
        if grant:
            self._send(cmds.flow(self.consumer_id, grant))

    def message_consumed(self, info: EntryInfo) -> None:
        """One message of ``info``'s entry was handed to the application (from another thread's queue pop)."""
        if info.epoch == self.epoch:
            self.return_permits(1)
            timeouts = self.ack_timeouts
            if timeouts is not None:
                timeouts.add(info.position, info.redelivery_count, self._loop.time())
