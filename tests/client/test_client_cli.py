"""``magnetar produce/consume`` and ``magnetar perf``, against the client-unit-test fake broker
running on its own thread (see conftest)."""

from __future__ import annotations

import argparse
import json

from magnetar.cli.client_commands import add_client_commands
from magnetar.cli.perf import LatencyHistogram, add_perf_commands


def _parse(argv):
    parser = argparse.ArgumentParser(prog="magnetar")
    sub = parser.add_subparsers(dest="command", required=True)
    add_client_commands(sub)
    add_perf_commands(sub)
    return parser.parse_args(argv)


def test_produce_then_consume_prints_and_acks(threaded_broker, capsys):
    url = threaded_broker.broker.url
    args = _parse(["produce", "cli", "-m", "hello {i}", "-n", "3", "-p", "a=b", "--url", url])
    assert args.func(args) == 0
    assert "3 messages produced" in capsys.readouterr().out
    args = _parse(["consume", "cli", "-s", "sub", "-n", "3", "--url", url])
    assert args.func(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "[7:0:-1:0] {'a': 'b'} hello 0",
        "[7:0:-1:1] {'a': 'b'} hello 1",
        "[7:0:-1:2] {'a': 'b'} hello 2",
    ]
    assert threaded_broker.broker.sent("ack")[0]["positions"] == [[7, 0]]


def test_perf_produce_and_consume_write_json_summaries(threaded_broker, tmp_path):
    url = threaded_broker.broker.url
    out = tmp_path / "produce.json"
    args = _parse(["perf", "produce", "perf", "-n", "5000", "--size", "64", "--url", url, "--json", str(out)])
    assert args.func(args) == 0
    summary = json.loads(out.read_text())
    assert summary["messages"] == 5000 and summary["errors"] == 0
    assert set(summary["latency_ms"]) == {"p50", "p95", "p99", "p999", "max"}
    assert 0 < summary["latency_ms"]["p50"] <= summary["latency_ms"]["max"]
    assert summary["mb_per_s"] > 0
    out = tmp_path / "consume.json"
    args = _parse(
        [
            "perf",
            "consume",
            "perf",
            "--initial-position",
            "Earliest",
            "-n",
            "5000",
            "--url",
            url,
            "--json",
            str(out),
        ]
    )
    assert args.func(args) == 0
    assert json.loads(out.read_text())["messages"] == 5000


def test_latency_histogram_percentiles():
    h = LatencyHistogram()
    for us in range(1, 1001):  # 1 µs .. 1 ms
        h.record(us)
    h.record(2_500_000)  # one 2.5 s outlier lands in a coarse bucket
    assert h.percentile_ms(50) == 0.501
    assert h.percentile_ms(99) == 0.991
    assert h.summary()["max"] == 2500.0
    assert h.percentile_ms(100) == 2500.0
    other = LatencyHistogram()
    other.record(20_050)  # 100 µs buckets between 10 ms and 1 s
    h.merge(other)
    assert h.count == 1002
    assert LatencyHistogram._bucket_value(10_000 + 100) == 20_000
