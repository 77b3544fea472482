"""``--config FILE`` for ``magnetar broker`` and ``magnetar bookie``: Pulsar-style settings files.

Keys use the names Pulsar operators know from broker.conf / bookkeeper.conf (``brokerServicePort``,
``managedLedgerDefaultAckQuorum``, ``bookiePort``...). Flags given on the command line win over the
file. ``{POD_NAME}`` in a value is replaced by the ``POD_NAME`` environment variable (or the host
name), so one file serves every pod of a StatefulSet. An unknown key is an error that names the
known ones, so a typo cannot silently fall back to a default.
"""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path
from typing import Any

import yaml

KEYS: dict[str, dict[str, str]] = {
    "broker": {
        "metadataUrl": "metadata_url",
        "metadataStoreUrl": "metadata_url",
        "bindAddress": "host",
        "advertisedAddress": "advertised_address",
        "advertisedAddressTemplate": "advertised_address",
        "brokerServicePort": "port",
        "webServicePort": "web_port",
        "managedLedgerDefaultEnsembleSize": "ensemble_size",
        "managedLedgerDefaultWriteQuorum": "write_quorum",
        "managedLedgerDefaultAckQuorum": "ack_quorum",
        "defaultNumberOfNamespaceBundles": "bundles",
        "clusterName": "cluster",
        "isolatedTenant": "isolated_tenant",
        "brokerDeduplicationEnabled": "broker_deduplication_enabled",
        "brokerDeduplicationEntriesInterval": "broker_deduplication_entries_interval",
        "brokerDeduplicationSnapshotIntervalSeconds": "broker_deduplication_snapshot_interval_seconds",
        "brokerDeduplicationMaxNumberOfProducers": "broker_deduplication_max_number_of_producers",
        "brokerDeduplicationProducerInactivityTimeoutMinutes": (
            "broker_deduplication_producer_inactivity_timeout_minutes"
        ),
        "messageExpiryCheckIntervalInMinutes": "message_expiry_check_interval_minutes",
        "retentionCheckIntervalInSeconds": "retention_check_interval_seconds",
        "backlogQuotaCheckIntervalInSeconds": "backlog_quota_check_interval_seconds",
        "managedLedgerMaxEntriesPerLedger": "managed_ledger_max_entries_per_ledger",
        "managedLedgerMinLedgerRolloverTimeMinutes": "managed_ledger_min_ledger_rollover_time_minutes",
        "brokerServiceCompactionMonitorIntervalInSeconds": "broker_service_compaction_monitor_interval_in_seconds",
        "brokerServiceCompactionThresholdInBytes": "broker_service_compaction_threshold_in_bytes",
        "topicCompactionRetainNullKey": "topic_compaction_retain_null_key",
        # Authentication (cli/auth_flags.py, broker/auth/)
        "authenticationEnabled": "authentication_enabled",
        "authenticationProviders": "authentication_providers",
        "tokenSecretKey": "token_secret_key",
        "tokenPublicKey": "token_public_key",
        "tokenAuthClaim": "token_auth_claim",
        "tokenPublicAlg": "token_public_alg",
        "superUserRoles": "super_user_roles",
        "brokerClientAuthenticationPlugin": "broker_client_authentication_plugin",
        "brokerClientAuthenticationParameters": "broker_client_authentication_parameters",
        "authenticationRefreshCheckSeconds": "authentication_refresh_check_seconds",
        "authenticateMetricsEndpoint": "authenticate_metrics_endpoint",
        "authorizationEnabled": "authorization_enabled",
        "authorizationAllowWildcardsMatching": "authorization_allow_wildcards_matching",
        "brokerServicePortTls": "broker_service_port_tls",
        "webServicePortTls": "web_service_port_tls",
        "tlsCertificateFilePath": "tls_certificate_file_path",
        "tlsKeyFilePath": "tls_key_file_path",
        "tlsTrustCertsFilePath": "tls_trust_certs_file_path",
        "tlsRequireTrustedClientCertOnConnect": "tls_require_trusted_client_cert_on_connect",
        "tlsAllowInsecureConnection": "tls_allow_insecure_connection",
        # The broker's credentials and TLS towards bookies (cli/bookie_security_flags.py)
        "bookkeeperClientAuthenticationPlugin": "bookkeeper_client_authentication_plugin",
        "bookkeeperClientAuthenticationParameters": "bookkeeper_client_authentication_parameters",
        "bookkeeperTLSTrustCertsFilePath": "bookkeeper_tls_trust_certs_file_path",
        "bookkeeperTLSCertificateFilePath": "bookkeeper_tls_certificate_file_path",
        "bookkeeperTLSKeyFilePath": "bookkeeper_tls_key_file_path",
        "bookkeeperTLSClientAuthentication": "bookkeeper_tls_client_authentication",
        # Limits against abuse (cli/limit_flags.py, broker/server/limits.py)
        "brokerMaxConnections": "broker_max_connections",
        "brokerMaxConnectionsPerIp": "broker_max_connections_per_ip",
        "maxProducersPerConnection": "max_producers_per_connection",
        "maxConsumersPerConnection": "max_consumers_per_connection",
        "maxUnackedMessagesPerConsumer": "max_unacked_messages_per_consumer",
        "maxUnackedMessagesPerSubscription": "max_unacked_messages_per_subscription",
        "maxConcurrentLookupRequest": "max_concurrent_lookup_request",
        "maxConcurrentTopicLoadRequest": "max_concurrent_topic_load_request",
        "maxConcurrentTopicLoadsPerTenant": "max_concurrent_topic_loads_per_tenant",
        "preAuthenticationMaxFrameSize": "pre_authentication_max_frame_size",
        "preAuthenticationTimeoutSeconds": "pre_authentication_timeout_seconds",
        # Advertised listeners (cli/listener_flags.py, broker/cluster/advertised_listeners.py)
        "advertisedListeners": "advertised_listeners",
        "internalListenerName": "internal_listener_name",
        # Schemas (cli/schema_flags.py, broker/schema/admission.py)
        "schemaCompatibilityStrategy": "schema_compatibility_strategy",
        "isSchemaValidationEnforced": "is_schema_validation_enforced",
        "isAllowAutoUpdateSchemaEnabled": "is_allow_auto_update_schema_enabled",
    },
    "bookie": {
        "metadataUrl": "metadata_url",
        "metadataServiceUri": "metadata_url",
        "bindAddress": "host",
        "advertisedAddress": "advertised_address",
        "advertisedAddressTemplate": "advertised_address",
        "bookiePort": "port",
        "httpPort": "http_port",
        "dataDir": "data_dir",
        "bookieId": "bookie_id",
        "diskUsageThreshold": "readonly_threshold",
        "journalEnabled": "journal",  # Magnetar's own: BookKeeper always journals
        # Who may use the bookie, TLS on its port; autorecovery's own credentials and TLS
        # (cli/bookie_security_flags.py, bookie/auth.py)
        "authenticationEnabled": "authentication_enabled",
        "authenticationProviders": "authentication_providers",
        "tokenSecretKey": "token_secret_key",
        "tokenPublicKey": "token_public_key",
        "tokenPublicAlg": "token_public_alg",
        "tokenAuthClaim": "token_auth_claim",
        "superUserRoles": "super_user_roles",
        "tlsEnabled": "tls_enabled",
        "tlsCertificateFilePath": "tls_certificate_file_path",
        "tlsKeyFilePath": "tls_key_file_path",
        "tlsTrustCertsFilePath": "tls_trust_certs_file_path",
        "tlsRequireTrustedClientCertOnConnect": "tls_require_trusted_client_cert_on_connect",
        "bookkeeperClientAuthenticationPlugin": "bookkeeper_client_authentication_plugin",
        "bookkeeperClientAuthenticationParameters": "bookkeeper_client_authentication_parameters",
        "bookkeeperTLSTrustCertsFilePath": "bookkeeper_tls_trust_certs_file_path",
        "bookkeeperTLSCertificateFilePath": "bookkeeper_tls_certificate_file_path",
        "bookkeeperTLSKeyFilePath": "bookkeeper_tls_key_file_path",
        "bookkeeperTLSClientAuthentication": "bookkeeper_tls_client_authentication",
    },
}


def _expand(value: Any) -> Any:
    if isinstance(value, str) and "{POD_NAME}" in value:
        return value.replace("{POD_NAME}", os.environ.get("POD_NAME") or socket.gethostname())
    return value


def apply_config_file(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fill ``args`` from ``args.config`` where the command line left the parser's default."""
    path = getattr(args, "config", None)
    if not path:
        return
    doc = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(doc, dict):
        raise SystemExit(f"{path}: a config file must be a mapping of settings")
    known = KEYS[args.command]
    unknown = sorted(set(doc) - set(known))
    if unknown:
        raise SystemExit(f"{path}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    # A value from the file goes through its flag's own converter, as if given on the command line:
    # Kubernetes config maps (and so the chart) hold strings, e.g. diskUsageThreshold: '0.97'.
    converters = {action.dest: action.type for action in parser._actions}
    for key, value in doc.items():
        dest = known[key]
        if getattr(args, dest, None) == parser.get_default(dest):  # not given on the command line
            setattr(args, dest, _convert(path, key, _expand(value), converters.get(dest)))


def _convert(path: str, key: str, value: Any, converter: Any) -> Any:
    if value is None or not callable(converter):
        return value
    try:
        return converter(value)
    except (TypeError, ValueError):
        kind = getattr(converter, "__name__", "value")
        raise SystemExit(f"{path}: {key} must be a {kind}, got {value!r}") from None
