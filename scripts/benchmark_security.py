#!/usr/bin/env python3
"""Security benchmark: throughput with TLS and token authentication on, against off (medians).

Four set-ups, each run --runs times on a fresh ``magnetar standalone``:
  off        plaintext, no authentication;
  token      plaintext, token authentication (HS256) on the binary protocol;
  tls        TLS on the binary protocol (``magnetar+ssl://``), no authentication;
  tls+token  both.
Each run publishes --messages messages of 100 bytes with ``magnetar perf produce`` (batching on,
as pulsar-perf) and then drains them with ``magnetar perf consume`` from the earliest message;
the figures are msg/s of each and the publish latency p99. The summary holds the medians and each
set-up's ratio to ``off``. The certificates are throwaway ones made for the run
(tests/security/certs.py), the key and token likewise.

Usage: scripts/benchmark_security.py [--runs 3] [--messages 200000] [--json F]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.security.certs
from benchmark import Service, perf, report
from tests.security.certs import Pki, make_pki

from magnetar.broker.auth import keys
from magnetar.broker.auth.tokens import create_token

MODES = ("off", "token", "tls", "tls+token")


class Material:
    """The key, token and certificates every run of one invocation shares."""

    def __init__(self, base: Path) -> None:
        self.pki: Pki = make_pki(base / "pki")
        secret = keys.new_secret_key()
        self.secret_file = base / "secret.key"
        self.secret_file.write_bytes(secret)
        self.token = create_token("HS256", secret, "bench")


def server_args(mode: str, m: Material) -> list[str]:
    args: list[str] = []
    if "tls" in mode:
        args += [
            "--advertised-address",
            "localhost",
            "--broker-service-port-tls",
            "0",
            "--tls-certificate-file-path",
            str(m.pki.server_cert),
            "--tls-key-file-path",
            str(m.pki.server_key),
        ]
    if "token" in mode:
        args += ["--authentication-enabled", "--token-secret-key", f"file://{m.secret_file}"]
    return args


def client_args(mode: str, m: Material) -> list[str]:
    args: list[str] = []
    if "tls" in mode:
        args += ["--trust-cert-file", str(m.pki.ca_cert)]
    if "token" in mode:
        args += ["--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken"]
        args += ["--auth-params", f"token:{m.token}"]
    return args


def one_run(mode: str, m: Material, messages: int, run: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        argv = ["standalone", "--data-dir", d, "--port", "0", "--web-port", "0", "--bookie-port", "0"]
        with Service(argv + server_args(mode, m), "standalone ready") as svc:
            url = svc.tls_url if "tls" in mode else svc.url
            topic = f"sec-{mode.replace('+', '-')}-{run}"
            common = ["--url", url, *client_args(mode, m)]
            produced = perf("produce", topic, "-n", str(messages), "--size", "100", *common)
            consumed = perf(
                "consume", topic, "-n", str(messages), "--initial-position", "Earliest", "--subscription", "b", *common
            )
    row = {
        "publish_msg_per_s": float(produced["msg_per_s"]),
        "consume_msg_per_s": float(consumed["msg_per_s"]),
        "publish_p99_ms": float(produced["latency_ms"]["p99"]),
    }
    print(f"{mode} run {run + 1}: {row}", flush=True)
    return row


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ", ".join(MODES))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    modes = [x.strip() for x in args.modes.split(",") if x.strip()]
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"runs": args.runs, "messages": args.messages}
    with tempfile.TemporaryDirectory() as d:
        material = Material(Path(d))
        for mode in modes:
            runs = [one_run(mode, material, args.messages, r) for r in range(args.runs)]
            rows += [{"mode": mode, **r} for r in runs]
            summary[mode] = {key: median([r[key] for r in runs]) for key in runs[0]}
    if "off" in summary:
        for mode in modes:
            if mode != "off":
                summary[mode]["publish_ratio_to_off"] = (
                    summary[mode]["publish_msg_per_s"] / summary["off"]["publish_msg_per_s"]
                )
                summary[mode]["consume_ratio_to_off"] = (
                    summary[mode]["consume_msg_per_s"] / summary["off"]["consume_msg_per_s"]
                )
    for mode in modes:
        s = summary[mode]
        ratios = ""
        if "publish_ratio_to_off" in s:
            ratios = f"  ({s['publish_ratio_to_off']:.2f}x / {s['consume_ratio_to_off']:.2f}x off)"
        print(
            f"{mode.upper():10} MEDIAN publish {s['publish_msg_per_s']:,.0f} msg/s, "
            f"consume {s['consume_msg_per_s']:,.0f} msg/s, publish p99 {s['publish_p99_ms']} ms{ratios}"
        )
    report(rows, summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
