"""Broker settings, named after Pulsar's broker.conf where one exists."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.loadbalance.settings import LoadBalancerSettings
from magnetar.managed_ledger import ManagedLedgerConfig
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE


@dataclass(slots=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int | None = 6650
    web_port: int | None = 8080
    advertised_address: str | None = None
    # advertisedListeners (name -> (url, tls url)) and internalListenerName: advertised_listeners.py
    advertised_listeners: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    internal_listener_name: str | None = None
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    # managedLedgerDefaultEnsembleSize / WriteQuorum / AckQuorum
    default_ensemble_size: int = 1
    default_write_quorum: int = 1
    default_ack_quorum: int = 1
    allow_auto_topic_creation: bool = True
    # Message deduplication (broker/topics/dedup.py), Pulsar's brokerDeduplication* settings: the default
    # when no namespace or topic policy says, a snapshot every so many stored entries and every so
    # many seconds, the producers a snapshot keeps at most, and when an idle producer is forgotten.
    broker_deduplication_enabled: bool = False
    broker_deduplication_entries_interval: int = 1000
    broker_deduplication_snapshot_interval_seconds: int = 120
    broker_deduplication_max_number_of_producers: int = 10000
    broker_deduplication_producer_inactivity_timeout_minutes: int = 360
    # How often message TTL, retention and backlog quotas are applied (broker/policies/expiry.py), Pulsar's
    # messageExpiryCheckIntervalInMinutes (fractions allowed here), retentionCheckIntervalInSeconds
    # and backlogQuotaCheckIntervalInSeconds; 0 turns a check off.
    message_expiry_check_interval_minutes: float = 5.0
    retention_check_interval_seconds: float = 120.0
    backlog_quota_check_interval_seconds: float = 60.0
    # Topic compaction (broker/compaction/): how often the compaction threshold is checked
    # (brokerServiceCompactionMonitorIntervalInSeconds), the threshold when no policy sets one
    # (brokerServiceCompactionThresholdInBytes, 0 = never), and whether messages without a key
    # survive compaction (topicCompactionRetainNullKey).
    compaction_monitor_interval: float = 60.0
    compaction_threshold: int = 0
    topic_compaction_retain_null_key: bool = False
    # Authentication (broker/auth/), Pulsar's names: off by default. ``authentication_providers``
    # holds "token" (or Pulsar's AuthenticationProviderToken class name); the token keys are
    # ``file:///path``, ``data:;base64,...`` or a path; the role is the ``token_auth_claim`` claim.
    # ``super_user_roles`` is for authorization (below). The broker's own credentials
    # (``token:<jwt>`` or ``file:///path``) go on the calls it makes to other brokers when no
    # caller's credentials are at hand; with authorization on, its role must be a superuser.
    authentication_enabled: bool = False
    authentication_providers: list[str] = field(default_factory=list)
    token_secret_key: str | None = None
    token_public_key: str | None = None
    token_auth_claim: str = "sub"
    token_public_alg: str = "RS256"
    super_user_roles: list[str] = field(default_factory=list)
    broker_client_authentication_plugin: str | None = None
    broker_client_authentication_parameters: str | None = None
    authentication_refresh_check_seconds: float = 60.0
    authenticate_metrics_endpoint: bool = False
    # Pulsar's anonymousUserRole: with authentication on, the role of a client that presents no
    # credentials (authorization then applies that role's grants); None refuses such a client.
    # basicAuthConf: the htpasswd file of the Basic provider (broker/auth/basic_provider.py).
    anonymous_user_role: str | None = None
    basic_auth_conf: str | None = None
    # Authorization (broker/authz/), Pulsar's names: off by default, and only with authentication
    # on. ``super_user_roles`` may do everything; grants are in the namespace policies. With
    # ``authorization_allow_wildcards_matching`` a granted role ``app.*`` / ``*.app`` matches
    # by prefix / suffix (Pulsar's authorizationAllowWildcardsMatching).
    authorization_enabled: bool = False
    authorization_allow_wildcards_matching: bool = False
    # TLS (node/tls.py), Pulsar's names: a TLS listener for the binary protocol on
    # ``broker_service_port_tls`` (brokerServicePortTls) and HTTPS for the admin API on
    # ``web_service_port_tls`` (webServicePortTls), with the certificate and key files; clients
    # must present a certificate signed by ``tls_trust_certs_file_path`` when
    # ``tls_require_trusted_client_cert_on_connect``. ``port`` / ``web_port`` None turns the
    # plaintext listener off (Pulsar: an empty brokerServicePort / webServicePort).
    broker_service_port_tls: int | None = None
    web_service_port_tls: int | None = None
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_require_trusted_client_cert_on_connect: bool = False
    tls_allow_insecure_connection: bool = False
    # The broker as a bookie client (bookie/client_security.py), Pulsar's names: its own token for
    # bookies with authentication on, and TLS to bookies (on when a trust file is given).
    bookkeeper_client_authentication_plugin: str | None = None
    bookkeeper_client_authentication_parameters: str | None = None
    bookkeeper_tls_trust_certs_file_path: str | None = None
    bookkeeper_tls_certificate_file_path: str | None = None
    bookkeeper_tls_key_file_path: str | None = None
    bookkeeper_tls_client_authentication: bool = False
    # Limits against abuse (broker/server/limits.py): Pulsar's brokerMaxConnections,
    # brokerMaxConnectionsPerIp and maxConcurrentLookupRequest; Magnetar's per-connection producer
    # and consumer caps and the pre-authentication frame cap and timeout (authentication on only).
    broker_max_connections: int = 0
    broker_max_connections_per_ip: int = 0
    max_producers_per_connection: int = 0
    max_consumers_per_connection: int = 0
    # Pulsar's maxUnackedMessagesPerConsumer / PerSubscription (Shared and Key_Shared; 0: no limit):
    # dispatch stops at the limit and resumes at half of it (broker/subscriptions/consumer.py, subscription.py).
    max_unacked_messages_per_consumer: int = 50000
    max_unacked_messages_per_subscription: int = 200000
    max_concurrent_lookup_request: int = 50000
    # Topic loads in progress at once (broker/topics/loads.py): Pulsar's broker-wide
    # maxConcurrentTopicLoadRequest, and a per-tenant share (Magnetar's) so that one tenant
    # loading thousands of topics does not fill the loop's turns; 0: no limit. The excess waits.
    max_concurrent_topic_load_request: int = 5000
    max_concurrent_topic_loads_per_tenant: int = 8
    pre_authentication_max_frame_size: int = 64 * 1024
    pre_authentication_timeout_seconds: float = 30.0
    # Schemas (broker/schema/admission.py, WIRE.md R124), Pulsar's names and defaults: the last level
    # of the compatibility strategy (a name of ``CompatibilityStrategy``), of schema validation
    # (a producer without schema on a topic with one) and of automatic schema registration.
    schema_compatibility_strategy: str = "FULL"
    is_schema_validation_enforced: bool = False
    is_allow_auto_update_schema_enabled: bool = True
    managed_ledger: ManagedLedgerConfig = field(default_factory=ManagedLedgerConfig)
    # The load manager's settings under their broker.conf names (broker/loadbalance/settings.py).
    load_balancer: LoadBalancerSettings = field(default_factory=LoadBalancerSettings)

    @property
    def advertised_host(self) -> str:
        return self.advertised_address or self.host
