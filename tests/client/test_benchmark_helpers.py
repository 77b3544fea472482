"""The side-by-side benchmark's own helpers: the ports its peers bind, the medians it prints.

Both came from a ``--peers --runs 3`` run whose second RabbitMQ start failed with ``eaddrinuse`` on
the AMQP port picked for it, after which every RabbitMQ figure of the table read ``n/a`` although
two of its three runs had completed.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> ModuleType:
    """Load ``scripts/<name>.py`` as the benchmark does (it puts ``scripts`` on sys.path itself)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def test_peer_ports_are_free_distinct_and_never_ephemeral() -> None:
    """An outgoing connection's local port comes from the ephemeral range: a port picked below it
    cannot be taken by one between the pick and the server's bind."""
    peers = _script("peers")
    low, high = peers._ephemeral_range()
    ports = [peers.free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= p <= high for p in ports), (low, high, ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # free when handed out: it binds


def test_a_failed_peer_run_does_not_hide_the_runs_that_completed() -> None:
    bw = _script("benchmark_workloads")
    failed = f"{bw.NA} (rabbitmq-server exited)"
    rows = [
        {"publish_msg_per_s": 500_000.0, "pub_ack_p50_ms": 0.4},
        {"publish_msg_per_s": failed, "pub_ack_p50_ms": failed},
        {"publish_msg_per_s": 510_000.0, "pub_ack_p50_ms": 0.5},
    ]
    assert bw.median_of_completed([r["publish_msg_per_s"] for r in rows]) == 505_000.0
    assert bw.median_of_completed([r["pub_ack_p50_ms"] for r in rows]) == 0.45
    assert bw.median_of_completed([failed, failed]) == failed  # none completed: the reason
    assert bw.incomplete_runs({"rabbitmq": rows, "redis": rows[:1]}) == [
        f"rabbitmq: medians of the 2 of 3 runs that completed (run 2: {failed})"
    ]
