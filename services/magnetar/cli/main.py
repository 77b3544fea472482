"""``magnetar``: run servers (standalone, bookie) and client tools (produce, consume, perf)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

DEFAULT_DATA_DIR = os.environ.get("MAGNETAR_DATA_DIR", "data/standalone")


def _run_until_signal(start: object, stop: object, banner: object) -> int:
    """Start a service, print its banner, run until SIGINT/SIGTERM, then stop it cleanly."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await start()  # type: ignore[operator]
        print(banner(), flush=True)  # type: ignore[operator]
        await stopping.wait()
        print("magnetar: shutting down", flush=True)
        await stop()  # type: ignore[operator]

    asyncio.run(main())
    return 0


def cmd_standalone(args: argparse.Namespace) -> int:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.standalone import Standalone, StandaloneConfig

    broker = BrokerConfig(
        host=args.host, port=args.port, web_port=args.web_port, advertised_address=args.advertised_address
    )
    sa = Standalone(StandaloneConfig(Path(args.data_dir), broker, bookie_port=args.bookie_port))

    def banner() -> str:
        assert sa.broker is not None and sa.bookie is not None
        return (
            f"magnetar standalone ready: service {sa.broker.broker_url} admin {sa.broker.web_url} "
            f"bookie {args.host}:{sa.bookie.port} data {Path(args.data_dir).resolve()}"
        )

    return _run_until_signal(sa.start, sa.stop, banner)


def cmd_bookie(args: argparse.Namespace) -> int:
    from magnetar.bookie.service import BookieService

    svc = BookieService(
        Path(args.data_dir),
        host=args.host,
        port=args.port,
        bookie_id=args.bookie_id,
        store=None,
        readonly_threshold=args.readonly_threshold,
        reprovision=args.reprovision,
    )

    def banner() -> str:
        return f"magnetar bookie {args.bookie_id} ready on {args.host}:{svc.port} data {args.data_dir}"

    return _run_until_signal(svc.start, svc.stop, banner)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magnetar", description="Magnetar pub/sub messaging")
    parser.add_argument("--log-level", default=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    sa = sub.add_parser("standalone", help="broker + bookie + embedded metadata in one process")
    sa.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    sa.add_argument("--host", default="127.0.0.1")
    sa.add_argument("--advertised-address", default=None)
    sa.add_argument("--port", type=int, default=6650, help="binary protocol port (0: any free port)")
    sa.add_argument("--web-port", type=int, default=8080, help="admin REST / metrics port (0: any)")
    sa.add_argument("--bookie-port", type=int, default=3181)
    sa.set_defaults(func=cmd_standalone)

    bk = sub.add_parser("bookie", help="run one bookie")
    bk.add_argument("--data-dir", required=True)
    bk.add_argument("--host", default="127.0.0.1")
    bk.add_argument("--port", type=int, default=3181)
    bk.add_argument("--bookie-id", default=None)
    bk.add_argument("--readonly-threshold", type=float, default=0.95)
    bk.add_argument(
        "--reprovision",
        action="store_true",
        help="accept a wiped data directory and register a new identity cookie",
    )
    bk.set_defaults(func=cmd_bookie)

    try:
        from magnetar.cli.client_commands import add_client_commands
        from magnetar.cli.perf import add_perf_commands
    except ImportError:  # pragma: no cover - only while the client tools are absent
        pass
    else:
        add_client_commands(sub)
        add_perf_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "bookie" and args.bookie_id is None:
        args.bookie_id = f"{args.host}:{args.port}"
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
