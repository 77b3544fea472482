"""kill -9 of the standalone process loses no acknowledged message and no acknowledgement.

The producer sends 100,000 batched messages asynchronously; once 80,000 are acknowledged the
process is killed with SIGKILL while sends are still in flight. After a restart on the same data
directory, a subscription created before the run must read every acknowledged message exactly
once and in order (unacknowledged ones may or may not be there, but never twice or out of
order), and a subscription that acknowledged the first 20,000 before the kill must not see them
again.
"""

from __future__ import annotations

import threading

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar

TOTAL = 100_000
KILL_AFTER = 80_000
EARLY_ACKED = 20_000


@pytest.mark.durability
def test_kill9_loses_no_acknowledged_message(fresh_standalone: StandaloneProcess, topic: str) -> None:
    sa = fresh_standalone
    client = magnetar.Client(sa.service_url)
    verify = client.subscribe(topic, "verify")  # cursor exists before the first message
    early = client.subscribe(topic, "early", receiver_queue_size=1000)
    verify.close()
    producer = client.create_producer(
        topic,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=5,
        max_pending_messages=20_000,
        block_if_queue_full=True,
        send_timeout_millis=0,
    )
    acked: set[int] = set()
    lock = threading.Lock()
    enough = threading.Event()

    def on_sent(i: int):  # type: ignore[no-untyped-def]
        def callback(result, msg_id) -> None:  # type: ignore[no-untyped-def]
            if result == magnetar.Result.Ok:
                with lock:
                    acked.add(i)
                    if len(acked) >= KILL_AFTER:
                        enough.set()

        return callback

    # The early subscription acknowledges the first 20,000 durably before the kill.
    for i in range(EARLY_ACKED):
        producer.send_async(str(i).encode(), on_sent(i))
    producer.flush()
    for _ in range(EARLY_ACKED):
        early.acknowledge(early.receive(timeout_millis=10_000))
    early.close()  # returns once the broker has confirmed the acks are durable

    for i in range(EARLY_ACKED, TOTAL):
        producer.send_async(str(i).encode(), on_sent(i))
        if enough.is_set():
            break
    assert enough.wait(120), f"only {len(acked)} acknowledged"
    sa.kill9()
    with lock:
        acknowledged = set(acked)
    client.close()

    sa.start()
    client = magnetar.Client(sa.service_url)
    try:
        verify = client.subscribe(topic, "verify", receiver_queue_size=5000)
        received: list[int] = []
        # Drain: everything acknowledged must come; stop after the stream goes quiet.
        while True:
            try:
                msg = verify.receive(timeout_millis=3000 if len(received) >= len(acknowledged) else 30_000)
            except magnetar.Timeout:
                break
            received.append(int(msg.data()))
            verify.acknowledge(msg)
        assert len(received) == len(set(received)), "a message was delivered twice"
        assert received == sorted(received), "messages out of order"
        lost = acknowledged - set(received)
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"

        early = client.subscribe(topic, "early")
        first = int(early.receive(timeout_millis=10_000).data())
        assert first == EARLY_ACKED, f"acknowledged message {first} was delivered again"
    finally:
        client.close()
