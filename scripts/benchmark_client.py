#!/usr/bin/env python3
"""Client benchmark: the pulsar-client-shaped consume paths and end-to-end encryption, as medians.

Written against the blocking client as a pulsar-client program would be (``import magnetar as
pulsar``), so that it measures what a program ported from Pulsar gets. Each figure is the median
over --runs runs, each against a fresh ``magnetar standalone``:
  1. consume throughput of a backlog of --messages messages (100 bytes, batched) by one Shared
     consumer that acknowledges each message, three ways: ``receive()`` in a loop (the baseline),
     a ``message_listener``, and ``batch_receive()`` (``ConsumerBatchReceivePolicy(1000, 10 MiB,
     100 ms)``); the listener and batch figures are also given as ratios to ``receive()``;
  2. produce throughput (``send_async`` then ``flush``) and consume throughput (``receive()``)
     with end-to-end encryption on (an RSA-2048 key, ``encryption_key`` + ``CryptoKeyReader``)
     against the same without it, and their ratios.
A path the client refuses (``OperationNotSupported``, or a name it lacks) is reported as ``n/a``
with the reason instead of failing the whole run, so the script also shows which paths exist.

Usage: scripts/benchmark_client.py [--runs 3] [--messages 50000] [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import NA, RatioRow, each_run, fresh_standalone, ratio_summary, ratio_table, report

import magnetar as pulsar

SIZE = 100
TIMEOUT_S = 300.0  # a measurement that has not finished by then has hung: fail, do not wait forever


def topic_name(kind: str) -> str:
    return f"persistent://public/default/bench-client-{kind}-{uuid.uuid4().hex[:8]}"


def produce(client: Any, topic: str, n: int, **producer_options: Any) -> float:
    """Messages per second to ``send_async`` ``n`` messages of SIZE bytes and ``flush``."""
    producer = client.create_producer(
        topic, block_if_queue_full=True, batching_enabled=True, max_pending_messages=10_000, **producer_options
    )
    failures: list[Any] = []

    def sent(result: Any, _msg_id: Any) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)

    body = b"x" * SIZE
    start = time.perf_counter()
    for _ in range(n):
        producer.send_async(body, sent)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, first: {failures[0]!r}")
    return n / elapsed


def backlog(client: Any, n: int, **producer_options: Any) -> str:
    """A fresh topic holding ``n`` messages for the subscription ``bench`` (created first, at
    Earliest, so that the broker keeps them)."""
    topic = topic_name("backlog")
    client.subscribe(
        topic, "bench", consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
    ).close()
    produce(client, topic, n, **producer_options)
    return topic


def drain_receive(client: Any, topic: str, n: int, **consumer_options: Any) -> float:
    start = time.perf_counter()  # from the subscribe, as for the listener, whose first call may precede it ending
    consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared, **consumer_options)
    for _ in range(n):
        msg = consumer.receive(timeout_millis=int(TIMEOUT_S * 1000))
        consumer.acknowledge(msg)
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def drain_listener(client: Any, topic: str, n: int) -> float:
    done = threading.Event()
    count = 0

    def listener(consumer: Any, msg: Any) -> None:
        nonlocal count
        consumer.acknowledge(msg)
        count += 1
        if count == n:
            done.set()

    start = time.perf_counter()
    consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared, message_listener=listener)
    if not done.wait(TIMEOUT_S):
        consumer.close()
        raise TimeoutError(f"the listener got {count} of {n} messages in {TIMEOUT_S} s")
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def drain_batch(client: Any, topic: str, n: int) -> float:
    policy = pulsar.ConsumerBatchReceivePolicy(1000, 10 * 1024 * 1024, 100)
    start = time.perf_counter()
    consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared, batch_receive_policy=policy)
    got = 0
    while got < n:
        if time.perf_counter() - start > TIMEOUT_S:
            consumer.close()
            raise TimeoutError(f"batch_receive got {got} of {n} messages in {TIMEOUT_S} s")
        for msg in consumer.batch_receive():
            consumer.acknowledge(msg)
            got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return n / elapsed


def rsa_key_files(directory: Path) -> tuple[str, str]:
    """An RSA-2048 key pair as PEM files (public, private), as Pulsar's CryptoKeyReader reads."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public, private = directory / "public.pem", directory / "private.pem"
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(public), str(private)


def attempt(measure: Callable[[], float]) -> float | str:
    """The figure, or ``n/a: reason`` when the client refuses the path or lacks a name for it."""
    try:
        return measure()
    except (AttributeError, pulsar.OperationNotSupported) as exc:
        return f"{NA}: {type(exc).__name__}: {exc}"


def one_run(url: str, n: int, keys: tuple[str, str]) -> dict[str, Any]:
    client = pulsar.Client(url)
    try:
        row: dict[str, Any] = {}
        row["consume_receive"] = drain_receive(client, backlog(client, n), n)
        row["consume_listener"] = attempt(lambda: drain_listener(client, backlog(client, n), n))
        row["consume_batch_receive"] = attempt(lambda: drain_batch(client, backlog(client, n), n))
        row["produce_plain"] = produce(client, topic_name("plain"), n)
        if hasattr(pulsar, "CryptoKeyReader"):
            reader = pulsar.CryptoKeyReader(*keys)
            secret = {"encryption_key": "bench", "crypto_key_reader": reader}
            row["produce_encrypted"] = attempt(lambda: produce(client, topic_name("encrypted"), n, **secret))
            row["consume_encrypted"] = attempt(
                lambda: drain_receive(client, backlog(client, n, **secret), n, crypto_key_reader=reader)
            )
        else:
            row["produce_encrypted"] = row["consume_encrypted"] = f"{NA}: the client has no CryptoKeyReader"
        return row
    finally:
        client.close()


ROWS: list[RatioRow] = [
    ("consume_receive", "consume, receive() (baseline)", None),
    ("consume_listener", "consume, message_listener", "consume_receive"),
    ("consume_batch_receive", "consume, batch_receive()", "consume_receive"),
    ("produce_plain", "produce, plain", None),
    ("produce_encrypted", "produce, encrypted", "produce_plain"),
    ("consume_encrypted", "consume, encrypted, receive()", "consume_receive"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="one run of 500 messages: a smoke test of every path")
    ap.add_argument("--json", help="also write the runs and the summary to this file")
    args = ap.parse_args()
    runs, n = (1, 500) if args.quick else (args.runs, args.messages)

    with tempfile.TemporaryDirectory() as d:
        keys = rsa_key_files(Path(d))

        def run(_: int) -> dict[str, Any]:
            with fresh_standalone() as svc:
                return one_run(svc.url, n, keys)

        rows = each_run(runs, run)
    summary = ratio_summary(rows, ROWS)
    summary.update(runs=runs, messages=n)
    print(ratio_table(summary, ROWS))
    report(rows, summary, args.json)


if __name__ == "__main__":
    main()
