#!/usr/bin/env python3
"""Schema benchmark: produce and consume rates with ``AvroSchema`` and ``JsonSchema`` against bytes.

Written as a pulsar-client program would be (``import magnetar as pulsar``, ``pulsar.schema``), so
that it measures what a ported program gets. Each figure is the median over --runs runs, each against
a fresh ``magnetar standalone``, for three ways of sending the same order record:
  - bytes: the record already encoded as JSON text by the program (no schema on the producer or the
    consumer: what a program without schemas pays, the baseline);
  - ``AvroSchema(Order)``: the producer encodes each ``Order`` with fastavro, the consumer decodes each
    message into an ``Order`` with ``value()``;
  - ``JsonSchema(Order)``: the same with JSON.
Produce: ``send_async`` of --messages records, then ``flush`` (batching on). Consume: a backlog of as
many records drained by one Shared consumer with ``receive()``, ``value()`` and ``acknowledge``.
The schema figures are also given as ratios to the bytes ones.

Usage: scripts/benchmark_schema.py [--runs 3] [--messages 50000] [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import RatioRow, each_run, fresh_standalone, ratio_summary, ratio_table, report

import magnetar as pulsar
from magnetar.schema import Array, AvroSchema, Integer, JsonSchema, Record, String

TIMEOUT_MS = 300_000  # a receive that has waited this long has hung: fail, do not wait forever


class Order(Record):
    id = String(required=True)
    qty = Integer()
    tags = Array(String())


def order(i: int) -> Order:
    return Order(id=f"o-{i}", qty=i % 100, tags=["new", "bench"])


def as_bytes(o: Order) -> bytes:
    """The baseline's payload: the program encodes the record itself."""
    return json.dumps({"id": o.id, "qty": o.qty, "tags": o.tags}).encode()


SCHEMAS: dict[str, Any] = {"bytes": None, "avro": lambda: AvroSchema(Order), "json": lambda: JsonSchema(Order)}


def topic_name(kind: str) -> str:
    return f"persistent://public/default/bench-schema-{kind}-{uuid.uuid4().hex[:8]}"


def produce(client: Any, topic: str, kind: str, records: list[Order]) -> float:
    """Records per second to ``send_async`` every record and ``flush``."""
    make = SCHEMAS[kind]
    options: dict[str, Any] = {} if make is None else {"schema": make()}
    producer = client.create_producer(
        topic, block_if_queue_full=True, batching_enabled=True, max_pending_messages=10_000, **options
    )
    failures: list[Any] = []

    def sent(result: Any, _msg_id: Any) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)

    start = time.perf_counter()
    if make is None:
        for r in records:
            producer.send_async(as_bytes(r), sent)
    else:
        for r in records:
            producer.send_async(r, sent)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, first: {failures[0]!r}")
    return len(records) / elapsed


def consume(client: Any, topic: str, kind: str, n: int) -> float:
    """Records per second to receive, decode (``value()``) and acknowledge a backlog of ``n``."""
    make = SCHEMAS[kind]
    options: dict[str, Any] = {} if make is None else {"schema": make()}
    start = time.perf_counter()
    consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Shared, **options)
    for _ in range(n):
        msg = consumer.receive(timeout_millis=TIMEOUT_MS)
        value = msg.value()
        if make is None:
            value = json.loads(value)  # the baseline program decodes its own payload
        consumer.acknowledge(msg)
    elapsed = time.perf_counter() - start
    consumer.close()
    if make is not None and not isinstance(value, Order):
        raise RuntimeError(f"{kind} consumer decoded {type(value).__name__}, not Order")
    return n / elapsed


def one_run(url: str, n: int) -> dict[str, Any]:
    records = [order(i) for i in range(n)]
    client = pulsar.Client(url)
    try:
        row: dict[str, Any] = {}
        for kind in SCHEMAS:
            row[f"produce_{kind}"] = produce(client, topic_name(kind), kind, records)
            topic = topic_name(f"{kind}-backlog")
            options: dict[str, Any] = {} if SCHEMAS[kind] is None else {"schema": SCHEMAS[kind]()}
            client.subscribe(
                topic,
                "bench",
                consumer_type=pulsar.ConsumerType.Shared,
                initial_position=pulsar.InitialPosition.Earliest,
                **options,
            ).close()
            produce(client, topic, kind, records)
            row[f"consume_{kind}"] = consume(client, topic, kind, n)
        return row
    finally:
        client.close()


ROWS: list[RatioRow] = [
    ("produce_bytes", "produce, bytes (baseline)", None),
    ("produce_avro", "produce, AvroSchema", "produce_bytes"),
    ("produce_json", "produce, JsonSchema", "produce_bytes"),
    ("consume_bytes", "consume, bytes (baseline)", None),
    ("consume_avro", "consume, AvroSchema", "consume_bytes"),
    ("consume_json", "consume, JsonSchema", "consume_bytes"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="one run of 500 messages: a smoke test of every path")
    ap.add_argument("--json", help="also write the runs and the summary to this file")
    args = ap.parse_args()
    runs, n = (1, 500) if args.quick else (args.runs, args.messages)

    def run(_: int) -> dict[str, Any]:
        with fresh_standalone() as svc:
            return one_run(svc.url, n)

    rows = each_run(runs, run)
    summary = ratio_summary(rows, ROWS)
    summary.update(runs=runs, messages=n)
    print(ratio_table(summary, ROWS))
    report(rows, summary, args.json)


if __name__ == "__main__":
    main()
