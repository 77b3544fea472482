"""``--config FILE`` for ``magnetar standalone``, ``broker`` and ``bookie``: Pulsar's settings files.

Keys use the names Pulsar operators know from standalone.conf / broker.conf / bookkeeper.conf
(``brokerServicePort``, ``managedLedgerDefaultAckQuorum``, ``bookiePort``...). Flags given on the
command line win over the file. ``{POD_NAME}`` in a value is replaced by the ``POD_NAME``
environment variable (or the host name), so one file serves every pod of a StatefulSet.

Two formats, told apart by the file's name (``.conf``/``.properties`` or ``.yaml``/``.yml``/``.json``)
or else by its first setting (``key=value`` or ``key: value``):

- Pulsar's own properties files (cli/properties_file.py), so that an operator's ``standalone.conf``
  runs as it is. Such a file carries every setting Pulsar has, most of which Magnetar has no use
  for (ZooKeeper, the JVM's caches): they are listed once, in one warning line,
  and ignored. A blank value leaves its setting at the default, as in Pulsar (a blank
  ``brokerServicePort`` or ``webServicePort`` switches that listener off, as there).
- YAML (the Kubernetes chart writes these): a file written for Magnetar, so an unknown key is an
  error that names the known ones, and a typo cannot silently fall back to a default.

A file that cannot be read or parsed, or a value its setting cannot take, ends the command with
one line naming the file, the key and what the key takes in words.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

from magnetar.cli.flag_types import flag_optional_port, kind_of
from magnetar.cli.load_balancer_flags import KEYS as LOAD_BALANCER_KEYS
from magnetar.cli.properties_file import PropertiesError, parse_properties

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
        "anonymousUserRole": "anonymous_user_role",
        "basicAuthConf": "basic_auth_conf",
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
        # The load manager's (cli/load_balancer_flags.py, from broker/loadbalance/settings.py)
        **LOAD_BALANCER_KEYS,
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


_PROPERTIES_SUFFIXES = (".conf", ".properties")
_YAML_SUFFIXES = (".yaml", ".yml", ".json")


def known_keys(command: str, parser: argparse.ArgumentParser) -> dict[str, str]:
    """The keys ``command``'s file may hold, each with its flag's dest. The standalone takes the
    broker's keys that it has flags for (not the cluster's: metadata, quorums, bookie clients)."""
    table = KEYS["broker" if command == "standalone" else command]
    dests = {action.dest for action in parser._actions}
    return {key: dest for key, dest in table.items() if dest in dests}


def _expand(value: Any) -> Any:
    if isinstance(value, str) and "{POD_NAME}" in value:
        return value.replace("{POD_NAME}", os.environ.get("POD_NAME") or socket.gethostname())
    return value


def apply_config_file(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Fill ``args`` from ``args.config`` where the command line left the parser's default."""
    path = getattr(args, "config", None)
    if not path:
        return
    where = f"magnetar {args.command}: {path}"
    text = _read(path, where)
    properties = is_properties(path, text)
    doc = _parse_properties(text, where) if properties else _parse_yaml(text, where)
    known = known_keys(args.command, parser)
    unknown = sorted(set(doc) - set(known))
    if unknown and not properties:
        raise SystemExit(f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    if unknown:
        print(
            f"{where}: ignoring {len(unknown)} setting(s) that magnetar {args.command} does not use: "
            + ", ".join(unknown),
            file=sys.stderr,
            flush=True,
        )
    # A value from the file goes through its flag's own converter, as if given on the command line:
    # Kubernetes config maps (and so the chart) hold strings, e.g. diskUsageThreshold: '0.97'.
    converters = {action.dest: action.type for action in parser._actions}
    for key, value in doc.items():
        if key not in known:
            continue
        dest = known[key]
        if properties:
            value = value.strip()  # Pulsar trims; blank means the default, or no listener for a port
            if not value and converters.get(dest) is not flag_optional_port:
                continue
        if getattr(args, dest, None) == parser.get_default(dest):  # not given on the command line
            setattr(args, dest, _convert(where, key, _expand(value), converters.get(dest)))


def is_properties(path: str, text: str) -> bool:
    """Whether ``path`` is a Java properties file rather than YAML: by its suffix, else by whether
    its first setting line puts ``=`` before any ``:``."""
    suffix = Path(path).suffix.lower()
    if suffix in _PROPERTIES_SUFFIXES or suffix in _YAML_SUFFIXES:
        return suffix in _PROPERTIES_SUFFIXES
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in "#!" or stripped == "---":
            continue
        equals, colon = stripped.find("="), stripped.find(":")
        return equals >= 0 and (colon < 0 or equals < colon)
    return False


def _read(path: str, where: str) -> str:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SystemExit(f"{where}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return data.decode("latin-1")  # what java.util.Properties reads a file as


def _parse_properties(text: str, where: str) -> dict[str, Any]:
    try:
        return dict(parse_properties(text))
    except PropertiesError as exc:
        raise SystemExit(f"{where}: not a valid properties file: {exc}") from None


def _parse_yaml(text: str, where: str) -> dict[str, Any]:
    import yaml  # the server extra's: a client-only install never reads a settings file

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise SystemExit(f"{where}: not valid YAML: {problem}{at}") from None
    if not isinstance(doc, dict):
        raise SystemExit(f"{where}: a config file must be a mapping of settings (key: value lines)")
    return doc


def _convert(where: str, key: str, value: Any, converter: Any) -> Any:
    if value is None or not callable(converter):
        return value
    try:
        return converter(value)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"{where}: {key} must be {kind_of(converter, exc)}, got {value!r}") from None
