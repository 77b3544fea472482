"""The broker's own settings as ``magnetar broker`` / ``magnetar standalone`` flags: policy checks
and ledger roll-over, deduplication, TLS listeners and files, compaction. Each group is a pair: an
``add_*_flags`` that declares the flags under Pulsar's broker.conf names (as ``cli/config_file.py``
maps them) and a ``*_settings`` that turns the parsed flags into ``BrokerConfig`` keyword arguments,
so the two server commands declare and read them alike."""

from __future__ import annotations

import argparse
from typing import Any

from magnetar.cli.flag_types import flag_bool, flag_optional_port


def add_policy_check_flags(parser: argparse.ArgumentParser) -> None:
    """How often the broker applies message TTL, retention and backlog quotas, and how large and
    how old a ledger grows before roll-over (Pulsar's broker.conf names, in their units)."""
    parser.add_argument("--message-expiry-check-interval-minutes", type=float, default=5.0)
    parser.add_argument("--retention-check-interval-seconds", type=float, default=120.0)
    parser.add_argument("--backlog-quota-check-interval-seconds", type=float, default=60.0)
    parser.add_argument("--managed-ledger-max-entries-per-ledger", type=int, default=50_000)
    parser.add_argument("--managed-ledger-min-ledger-rollover-time-minutes", type=float, default=10.0)


def policy_check_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_policy_check_flags``."""
    from magnetar.managed_ledger import ManagedLedgerConfig

    return {
        "message_expiry_check_interval_minutes": args.message_expiry_check_interval_minutes,
        "retention_check_interval_seconds": args.retention_check_interval_seconds,
        "backlog_quota_check_interval_seconds": args.backlog_quota_check_interval_seconds,
        "managed_ledger": ManagedLedgerConfig(
            max_entries_per_ledger=args.managed_ledger_max_entries_per_ledger,
            min_ledger_seconds=args.managed_ledger_min_ledger_rollover_time_minutes * 60.0,
        ),
    }


def add_dedup_flags(parser: argparse.ArgumentParser) -> None:
    """Pulsar's brokerDeduplication* settings (broker/topics/dedup.py)."""
    parser.add_argument("--broker-deduplication-enabled", type=flag_bool, nargs="?", const=True, default=False)
    parser.add_argument("--broker-deduplication-entries-interval", type=int, default=1000)
    parser.add_argument("--broker-deduplication-snapshot-interval-seconds", type=int, default=120)
    parser.add_argument("--broker-deduplication-max-number-of-producers", type=int, default=10000)
    parser.add_argument("--broker-deduplication-producer-inactivity-timeout-minutes", type=int, default=360)


def dedup_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_dedup_flags``."""
    names = (
        "broker_deduplication_enabled",
        "broker_deduplication_entries_interval",
        "broker_deduplication_snapshot_interval_seconds",
        "broker_deduplication_max_number_of_producers",
        "broker_deduplication_producer_inactivity_timeout_minutes",
    )
    return {name: getattr(args, name) for name in names}


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    """TLS listeners and files, Pulsar's broker.conf names in flag form (node/tls.py)."""
    parser.add_argument(
        "--broker-service-port-tls", type=flag_optional_port, default=None, help="TLS binary port (0: any)"
    )
    parser.add_argument(
        "--web-service-port-tls", type=flag_optional_port, default=None, help="HTTPS admin port (0: any)"
    )
    parser.add_argument("--tls-certificate-file-path", default=None)
    parser.add_argument("--tls-key-file-path", default=None)
    parser.add_argument("--tls-trust-certs-file-path", default=None)
    parser.add_argument(
        "--tls-require-trusted-client-cert-on-connect", type=flag_bool, nargs="?", const=True, default=False
    )
    parser.add_argument("--tls-allow-insecure-connection", type=flag_bool, nargs="?", const=True, default=False)


def tls_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_tls_flags``."""
    return {
        "broker_service_port_tls": args.broker_service_port_tls,
        "web_service_port_tls": args.web_service_port_tls,
        "tls_certificate_file_path": args.tls_certificate_file_path,
        "tls_key_file_path": args.tls_key_file_path,
        "tls_trust_certs_file_path": args.tls_trust_certs_file_path,
        "tls_require_trusted_client_cert_on_connect": args.tls_require_trusted_client_cert_on_connect,
        "tls_allow_insecure_connection": args.tls_allow_insecure_connection,
    }


def check_tls_settings(config: Any) -> None:
    """Load the TLS files once before starting, so a missing key ends the process in one line."""
    from magnetar.node.tls import TlsConfigError, server_ssl_context, tls_enabled

    if not tls_enabled(config):
        return
    try:
        server_ssl_context(config)
    except TlsConfigError as exc:
        raise SystemExit(f"magnetar: TLS settings: {exc}") from None


def tls_banner(broker: Any) -> str:
    """The TLS listeners for a ready banner (appended, so existing banner parsers still match)."""
    parts = []
    if broker.broker_url_tls:
        parts.append(f" service-tls {broker.broker_url_tls}")
    if broker.web_url_tls:
        parts.append(f" admin-tls {broker.web_url_tls}")
    return "".join(parts)


def add_compaction_flags(parser: argparse.ArgumentParser) -> None:
    """Topic compaction settings (broker/compaction/), Pulsar's broker.conf names in their units."""
    parser.add_argument("--broker-service-compaction-monitor-interval-in-seconds", type=float, default=60.0)
    parser.add_argument("--broker-service-compaction-threshold-in-bytes", type=int, default=0)
    parser.add_argument("--topic-compaction-retain-null-key", type=flag_bool, nargs="?", const=True, default=False)


def compaction_settings(args: argparse.Namespace) -> dict[str, Any]:
    """``BrokerConfig`` keyword arguments from the flags of ``add_compaction_flags``."""
    return {
        "compaction_monitor_interval": args.broker_service_compaction_monitor_interval_in_seconds,
        "compaction_threshold": args.broker_service_compaction_threshold_in_bytes,
        "topic_compaction_retain_null_key": args.topic_compaction_retain_null_key,
    }
