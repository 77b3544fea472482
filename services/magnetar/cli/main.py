"""``magnetar``: run servers (standalone, bookie) and client tools (produce, consume, perf)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from magnetar import event_loop
from magnetar.cli import broker_flags
from magnetar.cli.flag_types import flag_bool, flag_optional_port

DEFAULT_DATA_DIR = os.environ.get("MAGNETAR_DATA_DIR", "data/standalone")


def _run_until_signal(
    role: str,
    flags: Mapping[str, str],
    start: Callable[[], Awaitable[None]],
    stop: Callable[[], Awaitable[None]],
    banner: Callable[[], str],
    host: str,
    ports: Mapping[str, int | None],
) -> int:
    """Start a service, print its banner, run until SIGINT/SIGTERM, then stop it cleanly.

    Ports already taken (``ports``: listener → port, all checked before anything starts) end it
    with one line naming every one and the flags (``flags``: listener → option) that choose
    others, and exit code 1; so does a data directory another process holds."""
    from magnetar.node import descriptor_table, gc_policy
    from magnetar.node.data_dir_lock import DataDirInUse
    from magnetar.node.ports import PortInUse, busy_ports

    busy = busy_ports(host, ports)
    if busy:
        print(f"magnetar {role}: {_busy_line(busy, flags)}", file=sys.stderr, flush=True)
        return 1

    try:
        gc_plan = gc_policy.from_env()
    except ValueError as exc:
        print(f"magnetar {role}: {exc}", file=sys.stderr, flush=True)
        return 2
    descriptor_table.reserve()  # before the server's threads exist (descriptor_table.py)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await start()
        if gc_plan is not None:
            gc_plan.start()  # the started service's heap is the long-lived one (gc_policy.py)
        print(banner(), flush=True)
        await stopping.wait()
        print("magnetar: shutting down", flush=True)
        if gc_plan is not None:
            gc_plan.uninstall()
        await stop()

    try:
        event_loop.run(main())
    except PortInUse as exc:
        hint = f"; pass {flags[exc.listener]} to choose another" if exc.listener in flags else ""
        print(f"magnetar {role}: {exc}{hint}", file=sys.stderr, flush=True)
        return 1
    except DataDirInUse as exc:
        print(f"magnetar {role}: {exc}; stop it first, or pass --data-dir", file=sys.stderr, flush=True)
        return 1
    return 0


def _busy_line(busy: list[tuple[str, int]], flags: Mapping[str, str]) -> str:
    """One line for every taken port: ``ports 6650 (service), 8080 (admin) are already in use; ...``."""
    options = [flags[listener] for listener, _ in busy if listener in flags]
    hint = f"; pass {', '.join(options)} to choose {'others' if len(options) > 1 else 'another'}" if options else ""
    if len(busy) == 1:
        ((listener, port),) = busy
        return f"port {port} is already in use ({listener} port){hint}"
    named = ", ".join(f"{port} ({listener} port)" for listener, port in busy)
    return f"ports {named} are already in use{hint}"


def _exit_on_session_loss(role: str) -> Callable[[], None]:
    """Pulsar's default policy on metadata-session expiry: leave at once and write nothing more,
    since another process may already hold this one's ownership or registration."""

    def exit_now() -> None:
        print(f"magnetar {role}: metadata session lost, exiting", file=sys.stderr, flush=True)
        os._exit(3)

    return exit_now


def _stop_as_sigterm() -> None:
    """``brokers shutdown`` has drained the broker: stop the process as SIGTERM does (exit code 0)."""
    os.kill(os.getpid(), signal.SIGTERM)


def cmd_standalone(args: argparse.Namespace) -> int:
    from magnetar.broker.config import BrokerConfig
    from magnetar.cli.auth_flags import auth_settings, check_auth_settings
    from magnetar.cli.limit_flags import limit_settings
    from magnetar.cli.listener_flags import listener_settings
    from magnetar.cli.load_balancer_flags import load_balancer_settings
    from magnetar.cli.schema_flags import schema_settings
    from magnetar.node.standalone import Standalone, StandaloneConfig

    broker = BrokerConfig(
        host=args.host,
        port=args.port,
        web_port=args.web_port,
        advertised_address=args.advertised_address,
        **listener_settings(args),
        **broker_flags.policy_check_settings(args),
        **broker_flags.dedup_settings(args),
        **broker_flags.compaction_settings(args),
        **broker_flags.tls_settings(args),
        **auth_settings(args),
        **limit_settings(args),
        **schema_settings(args),
        **load_balancer_settings(args),
    )
    check_auth_settings(broker)
    broker_flags.check_tls_settings(broker)
    sa = Standalone(
        StandaloneConfig(
            Path(args.data_dir), broker, bookie_port=args.bookie_port, journal=args.journal, cluster=args.cluster
        )
    )

    def banner() -> str:
        assert sa.broker is not None and sa.bookie is not None
        return (
            f"magnetar standalone ready: service {sa.broker.broker_url} admin {sa.broker.web_url} "
            f"bookie {args.host}:{sa.bookie.port} data {Path(args.data_dir).resolve()}"
            f"{broker_flags.tls_banner(sa.broker)}"
        )

    flags = {
        "service": "--port",
        "admin": "--web-port",
        "bookie": "--bookie-port",
        "service-tls": "--broker-service-port-tls",
        "admin-tls": "--web-service-port-tls",
    }
    ports = {
        "service": args.port,
        "admin": args.web_port,
        "bookie": args.bookie_port,
        "service-tls": args.broker_service_port_tls,
        "admin-tls": args.web_service_port_tls,
    }

    async def start() -> None:
        await sa.start()
        if sa.broker is not None:
            sa.broker.on_shutdown = _stop_as_sigterm

    return _run_until_signal("standalone", flags, start, sa.stop, banner, args.host, ports)


def cmd_bookie(args: argparse.Namespace) -> int:
    from magnetar.cli.bookie_security_flags import bookie_security, checked, client_security
    from magnetar.node.bookie import BookieNode

    node = BookieNode(
        Path(args.data_dir),
        host=args.host,
        port=args.port,
        bookie_id=args.bookie_id,
        metadata_url=args.metadata_url,
        readonly_threshold=args.readonly_threshold,
        reprovision=args.reprovision,
        advertised_host=args.advertised_address,
        advertised_port=args.advertised_port,
        sync_data=args.journal_sync_data,
        journal=args.journal,
        http_port=args.http_port,
        security=checked(bookie_security, args),
        client_security=checked(client_security, args),
        scrub_interval=args.scrub_interval,
    )

    async def start() -> None:
        await node.start()
        on_session_lost = getattr(node.store, "on_session_lost", None)  # stores with leases (etcd)
        if on_session_lost is not None:
            # Its registration is gone and another bookie may be replacing it: stop serving.
            on_session_lost(_exit_on_session_loss("bookie"))

    from magnetar.bookie.cookie import CookieMismatch
    from magnetar.bookie.storage import StorageCorrupt

    try:
        flags = {"bookie": "--port", "http": "--http-port"}
        ports = {"bookie": args.port, "http": args.http_port}
        return _run_until_signal("bookie", flags, start, node.stop, node.banner, args.host, ports)
    except (CookieMismatch, StorageCorrupt) as exc:
        print(f"magnetar bookie: refusing to start: {exc}", file=sys.stderr, flush=True)
        return 2


def cmd_broker(args: argparse.Namespace) -> int:
    from magnetar.broker.config import BrokerConfig
    from magnetar.cli.auth_flags import auth_settings, check_auth_settings
    from magnetar.cli.bookie_security_flags import bookkeeper_client_settings, checked, client_security
    from magnetar.cli.limit_flags import limit_settings
    from magnetar.cli.listener_flags import listener_settings
    from magnetar.cli.load_balancer_flags import load_balancer_settings
    from magnetar.cli.schema_flags import schema_settings
    from magnetar.node.broker import BrokerNode

    config = BrokerConfig(
        host=args.host,
        port=args.port,
        web_port=args.web_port,
        advertised_address=args.advertised_address,
        **listener_settings(args),
        default_ensemble_size=args.ensemble_size,
        default_write_quorum=args.write_quorum,
        default_ack_quorum=args.ack_quorum,
        **broker_flags.policy_check_settings(args),
        **broker_flags.dedup_settings(args),
        **broker_flags.compaction_settings(args),
        **broker_flags.tls_settings(args),
        **auth_settings(args),
        **limit_settings(args),
        **schema_settings(args),
        **load_balancer_settings(args),
        **bookkeeper_client_settings(args),
    )
    check_auth_settings(config)
    checked(client_security, config)
    # isolatedTenant (set by the operator) only labels the pod: what this broker may own is decided
    # by the cluster's namespace isolation policies (broker/cluster/isolation.py), which the operator writes.
    if not args.metadata_url:
        raise SystemExit("magnetar broker needs --metadata-url (or metadataUrl in --config)")
    broker_flags.check_tls_settings(config)
    node = BrokerNode(args.metadata_url, config, bundles=args.bundles, cluster=args.cluster)

    async def start() -> None:
        await node.start()
        assert node.broker is not None
        node.broker.on_fatal = _exit_on_session_loss("broker")
        node.broker.on_shutdown = _stop_as_sigterm

    def banner() -> str:
        assert node.broker is not None
        return (
            f"magnetar broker ready: service {node.broker.broker_url} admin {node.broker.web_url} "
            f"id {node.broker.broker_id}{broker_flags.tls_banner(node.broker)}"
        )

    flags = {
        "service": "--port",
        "admin": "--web-port",
        "service-tls": "--broker-service-port-tls",
        "admin-tls": "--web-service-port-tls",
    }
    ports = {
        "service": args.port,
        "admin": args.web_port,
        "service-tls": args.broker_service_port_tls,
        "admin-tls": args.web_service_port_tls,
    }
    return _run_until_signal("broker", flags, start, node.stop, banner, args.host, ports)


def cmd_local_cluster(args: argparse.Namespace) -> int:
    from magnetar.cli.local_cluster import run_local_cluster

    return run_local_cluster(args)


def _add_journal_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--journal",
        type=flag_bool,
        default=None,
        help="acknowledge adds once the bookie's journal has synced them, and bring its LMDB store up "
        "to date behind (one fsync per group instead of LMDB's two, in a thread without the GIL; "
        "bookie/journal.py). Default: on, unless MAGNETAR_BOOKIE_JOURNAL=0",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magnetar", description="Magnetar pub/sub messaging")
    parser.add_argument("--log-level", default=os.environ.get("MAGNETAR_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)
    try:
        _add_server_commands(sub)
    except ModuleNotFoundError as exc:  # a client-only install: the server commands say what to install
        if (exc.name or "").partition(".")[0] == "magnetar":
            raise
        for name in (*SERVER_COMMANDS, "tokens"):
            # Every word after the command is taken as it is (no options), so any flags reach the one line.
            stub = sub.add_parser(name, help="needs pip install 'magnetar[server]'", add_help=False, prefix_chars="\0")
            stub.add_argument("ignored", nargs="*")
            stub.set_defaults(missing_module=exc.name)

    try:
        from magnetar.cli.client_commands import add_client_commands
        from magnetar.cli.perf import add_perf_commands
    except ImportError:  # pragma: no cover - only while the client tools are absent
        pass
    else:
        add_client_commands(sub)
        add_perf_commands(sub)
    return parser


def _add_server_commands(sub: Any) -> None:
    """standalone, bookie, broker, local-cluster and tokens; every import first, so that a missing
    server extra adds none of them."""
    from magnetar.cli.auth_flags import add_auth_flags
    from magnetar.cli.bookie_security_flags import add_bookie_server_flags, add_bookkeeper_client_flags
    from magnetar.cli.limit_flags import add_limit_flags
    from magnetar.cli.listener_flags import add_listener_flags
    from magnetar.cli.load_balancer_flags import add_load_balancer_flags
    from magnetar.cli.schema_flags import add_schema_flags
    from magnetar.cli.scrub_flags import add_scrub_flags
    from magnetar.cli.tokens import add_tokens_command

    sa = sub.add_parser("standalone", help="broker + bookie + embedded metadata in one process")
    sa.add_argument("--config", default=None, help="Pulsar's standalone.conf, or YAML (flags win)")
    sa.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    sa.add_argument("--cluster", default="standalone", help="the cluster's name (clusterName)")
    sa.add_argument("--host", default="127.0.0.1")
    sa.add_argument("--advertised-address", default=None)
    sa.add_argument(
        "--port", type=flag_optional_port, default=6650, help="binary protocol port (0: any free port, none: off)"
    )
    sa.add_argument("--web-port", type=flag_optional_port, default=8080, help="admin REST / metrics port (0: any)")
    sa.add_argument("--bookie-port", type=int, default=3181)
    broker_flags.add_policy_check_flags(sa)
    broker_flags.add_dedup_flags(sa)
    broker_flags.add_compaction_flags(sa)
    add_auth_flags(sa)
    broker_flags.add_tls_flags(sa)
    add_limit_flags(sa)
    add_schema_flags(sa)
    add_listener_flags(sa)
    add_load_balancer_flags(sa)
    _add_journal_flag(sa)
    sa.set_defaults(func=cmd_standalone, _parser=sa)

    bk = sub.add_parser("bookie", help="run one bookie")
    bk.add_argument("--config", default=None, help="Pulsar-style YAML settings (flags win)")
    bk.add_argument("--data-dir", default=None)
    bk.add_argument("--advertised-address", default=None)
    bk.add_argument(
        "--advertised-port",
        type=int,
        default=None,
        help="port to register instead of --port (a proxy or NAT in front of the bookie)",
    )
    bk.add_argument(
        "--journal-sync-data",
        type=flag_bool,
        default=True,
        help="fsync before acknowledging an add (BookKeeper's journalSyncData); false loses "
        "acknowledged entries on power loss and exists only to show that loss in tests",
    )
    _add_journal_flag(bk)
    bk.add_argument("--http-port", type=int, default=None, help="serve /health, /ready, /metrics here")
    bk.add_argument("--host", default="127.0.0.1")
    bk.add_argument("--port", type=int, default=3181)
    bk.add_argument("--bookie-id", default=None)
    bk.add_argument("--readonly-threshold", type=float, default=0.95)
    bk.add_argument("--metadata-url", default=None, help="etcd://host:port — register in a cluster")
    bk.add_argument(
        "--reprovision",
        action="store_true",
        help="accept a wiped data directory and register a new identity cookie",
    )
    add_bookie_server_flags(bk)
    add_scrub_flags(bk)
    bk.set_defaults(func=cmd_bookie, _parser=bk)

    br = sub.add_parser("broker", help="run one cluster broker (needs etcd and bookies)")
    br.add_argument("--config", default=None, help="Pulsar's broker.conf, or YAML (flags win)")
    br.add_argument("--metadata-url", default=None, help="etcd://host:port[,host:port]")
    br.add_argument("--isolated-tenant", default=None, help=argparse.SUPPRESS)
    br.add_argument("--host", default="127.0.0.1")
    br.add_argument("--advertised-address", default=None)
    br.add_argument("--port", type=flag_optional_port, default=6650)
    br.add_argument("--web-port", type=flag_optional_port, default=8080)
    br.add_argument("--ensemble-size", type=int, default=3)
    br.add_argument("--write-quorum", type=int, default=3)
    br.add_argument("--ack-quorum", type=int, default=2)
    br.add_argument("--bundles", type=int, default=4, help="bundles per namespace")
    br.add_argument("--cluster", default="local")
    broker_flags.add_policy_check_flags(br)
    broker_flags.add_dedup_flags(br)
    broker_flags.add_compaction_flags(br)
    add_auth_flags(br)
    broker_flags.add_tls_flags(br)
    add_limit_flags(br)
    add_schema_flags(br)
    add_bookkeeper_client_flags(br)
    add_listener_flags(br)
    add_load_balancer_flags(br)
    br.set_defaults(func=cmd_broker, _parser=br)

    lc = sub.add_parser("local-cluster", help="etcd + N bookies + M brokers as child processes on loopback")
    lc.add_argument("--bookies", type=int, default=3)
    lc.add_argument("--brokers", type=int, default=2)
    lc.add_argument("--data-dir", required=True)
    lc.add_argument("--etcd-port", type=int, default=2379)
    lc.add_argument("--bookie-port", type=int, default=3181, help="first bookie port (then +1 each)")
    lc.add_argument("--broker-port", type=int, default=6650, help="first broker port (then +1 each)")
    lc.add_argument("--web-port", type=int, default=8080, help="first broker admin port (then +1 each)")
    lc.add_argument("--ensemble-size", type=int, default=3)
    lc.add_argument("--write-quorum", type=int, default=3)
    lc.add_argument("--ack-quorum", type=int, default=2)
    lc.set_defaults(func=cmd_local_cluster)
    add_tokens_command(sub)  # magnetar tokens ...: cli/tokens.py


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    missing = getattr(args, "missing_module", None)
    if missing is not None:
        return _needs_server_extra(args.command, missing)
    if args.command not in SERVER_COMMANDS:
        from magnetar.cli.user_errors import run_reporting

        # Ordinary failures (server down, bad names, credentials, TLS) as one line: cli/user_errors.py
        return run_reporting(f"magnetar {args.command}", lambda: int(args.func(args)))
    try:
        return _run_server_command(args)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == "magnetar":
            raise
        return _needs_server_extra(args.command, exc.name or "?")


def _needs_server_extra(command: str, module: str) -> int:
    print(
        f"magnetar {command} needs the server extra, which is not installed (no module {module!r}): "
        "pip install 'magnetar[server]'",
        file=sys.stderr,
        flush=True,
    )
    return 1


# The commands that run servers: they need the ``server`` extra (LMDB, aiohttp, PyYAML, PyJWT...),
# which a client-only install (``pip install magnetar``) lacks.
SERVER_COMMANDS = ("standalone", "bookie", "broker", "local-cluster")


def _run_server_command(args: argparse.Namespace) -> int:
    if args.command in ("standalone", "bookie", "broker"):
        from magnetar.cli.config_file import apply_config_file

        apply_config_file(args, args._parser)
    if args.command == "bookie" and args.data_dir is None:
        raise SystemExit("magnetar bookie needs --data-dir (or dataDir in --config)")
    if args.command == "bookie" and args.bookie_id is None:
        args.bookie_id = f"{args.advertised_address or args.host}:{args.port}"
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
