"""Conformance of ``magnetar``'s public API with pulsar-client 3.x, name for name.

A program written for pulsar-client 3.x must run with only ``import magnetar as pulsar``. This
test keeps its own list of pulsar-client's public names, methods, parameters (name, order,
default) and exception classes, written from pulsar-client's documentation and public API
(``pulsar/__init__.py``, ``pulsar/asyncio.py``, ``pulsar/exceptions.py``, ``pulsar/tableview.py``,
``pulsar/schema``; 3.11 for the class list, 3.10 for the asyncio additions), and checks ``magnetar`` against it with
``inspect.signature``, one case per name or method, so that a missing or renamed one fails by name.

The rules for a signature: pulsar-client's parameters must come first, in its order, with its
names and defaults (an enum default is compared by ``Class.Member`` name; a schema instance only
has to be some default). Magnetar may take more parameters after them only if they have defaults,
since a pulsar program never passes them. A parameter that pulsar-client requires may have a
default in Magnetar (no pulsar call can notice).

Deliberate differences are xfailed here BY NAME, strictly, and each is listed with its reason in
docs/coming-from-pulsar.md. Anything else that fails is a defect.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

import magnetar

# ----------------------------------------------------------------------------- the reference list


class _Required:
    """Marks a parameter that pulsar-client declares without a default."""

    def __repr__(self) -> str:
        return "<required>"


class _AnyDefault:
    """Marks a default whose value is an object (``schema.BytesSchema()``): any default will do."""

    def __repr__(self) -> str:
        return "<any default>"


REQ = _Required()
ANY = _AnyDefault()


@dataclass(frozen=True)
class E:
    """An enum default, compared by class and member name (``E("CompressionType", "NONE")``)."""

    cls: str
    member: str

    def __repr__(self) -> str:
        return f"{self.cls}.{self.member}"


Params = list[tuple[str, Any]]


def p(*names: str, **defaults: Any) -> Params:
    """Positional ``names`` (required) followed by ``defaults`` in order (dicts keep order)."""
    return [(n, REQ) for n in names] + list(defaults.items())


# ``pulsar.Client.__init__``
CLIENT_INIT = p(
    "service_url",
    authentication=None,
    operation_timeout_seconds=30,
    io_threads=1,
    message_listener_threads=1,
    concurrent_lookup_requests=50000,
    log_conf_file_path=None,
    stats_interval_in_seconds=600,
    use_tls=False,
    tls_trust_certs_file_path=None,
    tls_allow_insecure_connection=False,
    tls_validate_hostname=False,
    logger=None,
    connection_timeout_ms=10000,
    listener_name=None,
    tls_private_key_file_path=None,
    tls_certificate_file_path=None,
)

_PRODUCER_OPTIONS: dict[str, Any] = {
    "producer_name": None,
    "schema": ANY,
    "initial_sequence_id": None,
    "send_timeout_millis": 30000,
    "compression_type": E("CompressionType", "NONE"),
    "max_pending_messages": 1000,
    "max_pending_messages_across_partitions": 50000,
    "block_if_queue_full": False,
    "batching_enabled": False,
    "batching_max_messages": 1000,
    "batching_max_allowed_size_in_bytes": 128 * 1024,
    "batching_max_publish_delay_ms": 10,
    "chunking_enabled": False,
    "message_routing_mode": E("PartitionsRoutingMode", "RoundRobinDistribution"),
    "lazy_start_partitioned_producers": False,
    "properties": None,
    "batching_type": E("BatchingType", "Default"),
    "encryption_key": None,
    "crypto_key_reader": None,
    "access_mode": E("ProducerAccessMode", "Shared"),
    "message_router": None,
}
CREATE_PRODUCER = p("topic", **_PRODUCER_OPTIONS)
# pulsar.asyncio: ``schema=None`` and batching on by default.
ASYNC_CREATE_PRODUCER = p("topic", **{**_PRODUCER_OPTIONS, "schema": None, "batching_enabled": True})

_SUBSCRIBE_HEAD: dict[str, Any] = {
    "consumer_type": E("ConsumerType", "Exclusive"),
    "schema": ANY,
    "message_listener": None,
}
_SUBSCRIBE_TAIL: dict[str, Any] = {
    "receiver_queue_size": 1000,
    "max_total_receiver_queue_size_across_partitions": 50000,
    "consumer_name": None,
    "unacked_messages_timeout_ms": None,
    "broker_consumer_stats_cache_time_ms": 30000,
    "negative_ack_redelivery_delay_ms": 60000,
    "is_read_compacted": False,
    "properties": None,
    "pattern_auto_discovery_period": 60,
    "initial_position": E("InitialPosition", "Latest"),
    "crypto_key_reader": None,
    "replicate_subscription_state_enabled": False,
    "max_pending_chunked_message": 10,
    "auto_ack_oldest_chunked_message_on_queue_full": False,
    "start_message_id_inclusive": False,
    "batch_receive_policy": None,
    "key_shared_policy": None,
    "batch_index_ack_enabled": False,
    "regex_subscription_mode": E("RegexSubscriptionMode", "PersistentOnly"),
    "dead_letter_policy": None,
    "crypto_failure_action": E("ConsumerCryptoFailureAction", "FAIL"),
}
SUBSCRIBE = p("topic", "subscription_name", **_SUBSCRIBE_HEAD, **_SUBSCRIBE_TAIL)
# pulsar.asyncio: no message_listener, no pattern_auto_discovery_period, ``schema=None``, and
# ``is_pattern_topic`` at the end.
ASYNC_SUBSCRIBE = p(
    "topic",
    "subscription_name",
    consumer_type=E("ConsumerType", "Exclusive"),
    schema=None,
    **{k: v for k, v in _SUBSCRIBE_TAIL.items() if k != "pattern_auto_discovery_period"},
    is_pattern_topic=False,
)
CREATE_READER = p(
    "topic",
    "start_message_id",
    schema=ANY,
    reader_listener=None,
    receiver_queue_size=1000,
    reader_name=None,
    subscription_role_prefix=None,
    is_read_compacted=False,
    crypto_key_reader=None,
    start_message_id_inclusive=False,
    crypto_failure_action=E("ConsumerCryptoFailureAction", "FAIL"),
)
_MESSAGE_OPTIONS: dict[str, Any] = {
    "properties": None,
    "partition_key": None,
    "ordering_key": None,
    "sequence_id": None,
    "replication_clusters": None,
    "disable_replication": False,
    "event_timestamp": None,
    "deliver_at": None,
    "deliver_after": None,
}
SEND = p("content", **_MESSAGE_OPTIONS)
SEND_ASYNC = p("content", "callback", **_MESSAGE_OPTIONS)
ASYNC_SEND = p("content", **{**_MESSAGE_OPTIONS, "disable_replication": None})
NONE: Params = []

# (dotted path under ``magnetar``, parameters). A class's path means its ``__init__``.
SIGNATURES: dict[str, Params] = {
    "Client": CLIENT_INIT,
    "Client.create_producer": CREATE_PRODUCER,
    "Client.subscribe": SUBSCRIBE,
    "Client.create_reader": CREATE_READER,
    "Client.create_table_view": p("topic", subscription_name=None, schema=ANY),
    "Client.get_topic_partitions": p("topic"),
    "Client.shutdown": NONE,
    "Client.close": NONE,
    "Producer.topic": NONE,
    "Producer.producer_name": NONE,
    "Producer.last_sequence_id": NONE,
    "Producer.send": SEND,
    "Producer.send_async": SEND_ASYNC,
    "Producer.flush": NONE,
    "Producer.close": NONE,
    "Producer.is_connected": NONE,
    "Consumer.topic": NONE,
    "Consumer.subscription_name": NONE,
    "Consumer.consumer_name": NONE,
    "Consumer.unsubscribe": NONE,
    "Consumer.receive": p(timeout_millis=None),
    "Consumer.batch_receive": NONE,
    "Consumer.acknowledge": p("message"),
    "Consumer.acknowledge_cumulative": p("message"),
    "Consumer.negative_acknowledge": p("message"),
    "Consumer.pause_message_listener": NONE,
    "Consumer.resume_message_listener": NONE,
    "Consumer.redeliver_unacknowledged_messages": NONE,
    "Consumer.seek": p("messageid"),
    "Consumer.close": NONE,
    "Consumer.is_connected": NONE,
    "Consumer.get_last_message_id": NONE,
    "Reader.topic": NONE,
    "Reader.read_next": p(timeout_millis=None),
    "Reader.has_message_available": NONE,
    "Reader.seek": p("messageid"),
    "Reader.close": NONE,
    "Reader.is_connected": NONE,
    "Message.data": NONE,
    "Message.value": NONE,
    "Message.properties": NONE,
    "Message.partition_key": NONE,
    "Message.ordering_key": NONE,
    "Message.publish_timestamp": NONE,
    "Message.event_timestamp": NONE,
    "Message.message_id": NONE,
    "Message.topic_name": NONE,
    "Message.redelivery_count": NONE,
    "Message.schema_version": NONE,
    "Message.producer_name": NONE,
    "Message.encryption_context": NONE,
    "MessageId": p(partition=-1, ledger_id=-1, entry_id=-1, batch_index=-1),
    "MessageId.ledger_id": NONE,
    "MessageId.entry_id": NONE,
    "MessageId.batch_index": NONE,
    "MessageId.partition": NONE,
    "MessageId.serialize": NONE,
    "MessageId.deserialize": p("message_id_bytes", topic=None),
    "MessageBatch": NONE,
    "MessageBatch.with_message_id": p("msg_id"),
    "MessageBatch.parse_from": p("data", "size"),
    "TableView.get": p("key"),
    "TableView.for_each": p("callback"),
    "TableView.for_each_and_listen": p("callback"),
    "TableView.close": NONE,
    "TableView.__len__": NONE,
    "Authentication": p("dynamicLibPath", "authParamsString"),
    "AuthenticationTLS": p("certificate_path", "private_key_path"),
    "AuthenticationToken": p("token"),
    "AuthenticationAthenz": p("auth_params_string"),
    "AuthenticationOauth2": p("auth_params_string"),
    "AuthenticationBasic": p(username=None, password=None, method="basic", auth_params_string=None),
    "ConsumerDeadLetterPolicy": p("max_redeliver_count", dead_letter_topic=None, initial_subscription_name=None),
    "ConsumerDeadLetterPolicy.policy": NONE,
    "ConsumerBatchReceivePolicy": p("max_num_message", "max_num_bytes", "timeout_ms"),
    "ConsumerBatchReceivePolicy.policy": NONE,
    "ConsumerKeySharedPolicy": p(
        key_shared_mode=E("KeySharedMode", "AutoSplit"), allow_out_of_order_delivery=False, sticky_ranges=None
    ),
    "ConsumerKeySharedPolicy.policy": NONE,
    "CryptoKeyReader": p("public_key_path", "private_key_path"),
    "ConsoleLogger": p(log_level=E("LoggerLevel", "Info")),
    "FileLogger": p("log_level", "log_file"),
    "EncryptionContext.algorithm": NONE,
    "EncryptionContext.batch_size": NONE,
    "EncryptionContext.compression_type": NONE,
    "EncryptionContext.is_decryption_failed": NONE,
    "EncryptionContext.keys": NONE,
    "EncryptionContext.param": NONE,
    "EncryptionContext.uncompressed_message_size": NONE,
    "ServiceInfo": p("service_url", authentication=None, tls_trust_certs_file_path=None),
    "ServiceInfoProvider.initial_service_info": NONE,
    "ServiceInfoProvider.initialize": p("on_service_info_update"),
    "ServiceInfoProvider.close": NONE,
    "AutoClusterFailover": p(
        "primary", "secondary", check_interval_ms=5000, failover_threshold=1, switch_back_threshold=1
    ),
    # pulsar.asyncio
    "asyncio.Client.create_producer": ASYNC_CREATE_PRODUCER,
    "asyncio.Client.subscribe": ASYNC_SUBSCRIBE,
    "asyncio.Client.close": NONE,
    "asyncio.Client.get_topic_partitions": p("topic"),  # 3.10
    "asyncio.Client.shutdown": NONE,  # 3.10, not a coroutine
    "asyncio.Producer.send": ASYNC_SEND,
    "asyncio.Producer.flush": NONE,
    "asyncio.Producer.close": NONE,
    "asyncio.Producer.topic": NONE,
    "asyncio.Producer.producer_name": NONE,
    "asyncio.Producer.last_sequence_id": NONE,
    "asyncio.Consumer.receive": NONE,
    "asyncio.Consumer.acknowledge": p("message"),
    "asyncio.Consumer.acknowledge_cumulative": p("message"),
    "asyncio.Consumer.unsubscribe": NONE,
    "asyncio.Consumer.seek": p("messageid"),
    "asyncio.Consumer.close": NONE,
    "asyncio.Consumer.topic": NONE,
    "asyncio.Consumer.subscription_name": NONE,
    "asyncio.Consumer.consumer_name": NONE,
    "asyncio.Consumer.negative_acknowledge": p("message"),  # 3.10
    "asyncio.Consumer.get_last_message_id": NONE,  # 3.10
    "asyncio.Consumer.redeliver_unacknowledged_messages": NONE,  # 3.10, not a coroutine
    "asyncio.PulsarException.error": NONE,
}

# pulsar.asyncio methods that are coroutines (``await producer.send(...)``).
ASYNC_COROUTINES = [
    "asyncio.Client.create_producer",
    "asyncio.Client.subscribe",
    "asyncio.Client.close",
    "asyncio.Client.get_topic_partitions",
    "asyncio.Producer.send",
    "asyncio.Producer.flush",
    "asyncio.Producer.close",
    "asyncio.Consumer.receive",
    "asyncio.Consumer.acknowledge",
    "asyncio.Consumer.acknowledge_cumulative",
    "asyncio.Consumer.unsubscribe",
    "asyncio.Consumer.seek",
    "asyncio.Consumer.close",
    "asyncio.Consumer.negative_acknowledge",
    "asyncio.Consumer.get_last_message_id",
]

# pulsar.asyncio methods that are plain calls (``producer.topic()``, no ``await``): a coroutine
# here would silently do nothing in a pulsar program.
ASYNC_PLAIN = [
    "asyncio.Client.shutdown",
    "asyncio.Producer.topic",
    "asyncio.Producer.producer_name",
    "asyncio.Producer.last_sequence_id",
    "asyncio.Consumer.topic",
    "asyncio.Consumer.subscription_name",
    "asyncio.Consumer.consumer_name",
    "asyncio.Consumer.redeliver_unacknowledged_messages",
]

# Read-only properties (``policy.max_redeliver_count``, not a call).
PROPERTIES = [
    "ConsumerDeadLetterPolicy.dead_letter_topic",
    "ConsumerDeadLetterPolicy.max_redeliver_count",
    "ConsumerDeadLetterPolicy.initial_subscription_name",
    "ConsumerKeySharedPolicy.key_shared_mode",
    "ConsumerKeySharedPolicy.allow_out_of_order_delivery",
    "ConsumerKeySharedPolicy.sticky_ranges",
]

ENUMS: dict[str, list[str]] = {
    "CompressionType": ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"],
    "ConsumerType": ["Exclusive", "Shared", "Failover", "KeyShared"],
    "InitialPosition": ["Latest", "Earliest"],
    "PartitionsRoutingMode": ["UseSinglePartition", "RoundRobinDistribution", "CustomPartition"],
    "BatchingType": ["Default", "KeyBased"],
    "ProducerAccessMode": ["Shared", "Exclusive", "WaitForExclusive", "ExclusiveWithFencing"],
    "RegexSubscriptionMode": ["PersistentOnly", "NonPersistentOnly", "AllTopics"],
    "ConsumerCryptoFailureAction": ["FAIL", "DISCARD", "CONSUME"],
    "LoggerLevel": ["Debug", "Info", "Warn", "Error"],
    "KeySharedMode": ["AutoSplit", "Sticky"],
}

# ``pulsar.Result``, member: value (the C++ client's numbering, which pulsar-client exposes).
RESULT_VALUES: dict[str, int] = {
    "Ok": 0,
    "UnknownError": 1,
    "InvalidConfiguration": 2,
    "Timeout": 3,
    "LookupError": 4,
    "ConnectError": 5,
    "ReadError": 6,
    "AuthenticationError": 7,
    "AuthorizationError": 8,
    "ErrorGettingAuthenticationData": 9,
    "BrokerMetadataError": 10,
    "BrokerPersistenceError": 11,
    "ChecksumError": 12,
    "ConsumerBusy": 13,
    "NotConnected": 14,
    "AlreadyClosed": 15,
    "InvalidMessage": 16,
    "ConsumerNotInitialized": 17,
    "ProducerNotInitialized": 18,
    "ProducerBusy": 19,
    "TooManyLookupRequestException": 20,
    "InvalidTopicName": 21,
    "InvalidUrl": 22,
    "ServiceUnitNotReady": 23,
    "OperationNotSupported": 24,
    "ProducerBlockedQuotaExceededError": 25,
    "ProducerBlockedQuotaExceededException": 26,
    "ProducerQueueIsFull": 27,
    "MessageTooBig": 28,
    "TopicNotFound": 29,
    "SubscriptionNotFound": 30,
    "ConsumerNotFound": 31,
    "UnsupportedVersionError": 32,
    "TopicTerminated": 33,
    "CryptoError": 34,
    "IncompatibleSchema": 35,
    "ConsumerAssignError": 36,
    "CumulativeAcknowledgementNotAllowedError": 37,
    "TransactionCoordinatorNotFoundError": 38,
    "InvalidTxnStatusError": 39,
    "NotAllowedError": 40,
    "TransactionConflict": 41,
    "TransactionNotFound": 42,
    "ProducerFenced": 43,
    "MemoryBufferIsFull": 44,
    "Interrupted": 45,
}

# ``pulsar.exceptions``: every class derives from PulsarException and is named after its Result.
EXCEPTIONS = [name for name in RESULT_VALUES if name != "Ok"]

# Every public top-level name of ``import pulsar`` (3.11), besides the exceptions.
TOP_LEVEL = [
    "Client",
    "Producer",
    "Consumer",
    "Reader",
    "Message",
    "MessageId",
    "MessageBatch",
    "TableView",
    "Authentication",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AuthenticationAthenz",
    "AuthenticationOauth2",
    "AuthenticationBasic",
    "ConsumerDeadLetterPolicy",
    "ConsumerBatchReceivePolicy",
    "ConsumerKeySharedPolicy",
    "CryptoKeyReader",
    "ConsoleLogger",
    "FileLogger",
    "EncryptionContext",
    "EncryptionKey",
    "ServiceInfo",
    "ServiceInfoProvider",
    "AutoClusterFailover",
    "Result",
    "CompressionType",
    "ConsumerType",
    "InitialPosition",
    "PartitionsRoutingMode",
    "BatchingType",
    "LoggerLevel",
    "KeySharedMode",
    "ProducerAccessMode",
    "RegexSubscriptionMode",
    "ConsumerCryptoFailureAction",
    "BatchReceivePolicy",
    "KeySharedPolicy",
    "DeadLetterPolicyBuilder",
    "Function",
    "Context",
    "SerDe",
    "IdentitySerDe",
    "PickleSerDe",
    "PulsarException",
    "__version__",
]

# Submodules a pulsar program imports: ``from pulsar.asyncio import Client`` and so on.
SUBMODULES = ["asyncio", "exceptions", "schema"]
ASYNCIO_NAMES = [
    "Client",
    "Producer",
    "Consumer",
    "PulsarException",
    # imported into pulsar.asyncio from the C extension, so ``from pulsar.asyncio import ...`` works
    "InitialPosition",
    "CompressionType",
    "PartitionsRoutingMode",
    "BatchingType",
    "ProducerAccessMode",
    "RegexSubscriptionMode",
    "ConsumerCryptoFailureAction",
]

# ``pulsar.schema`` (3.12 added ``ProtobufNativeSchema``).
SCHEMA_NAMES = [
    "Schema",
    "BytesSchema",
    "StringSchema",
    "JsonSchema",
    "AvroSchema",
    "ProtobufNativeSchema",
    "Record",
    "Field",
    "Null",
    "Boolean",
    "Integer",
    "Long",
    "Float",
    "Double",
    "Bytes",
    "String",
    "Array",
    "Map",
    "CustomEnum",
]

# ------------------------------------------------------ deliberate differences (docs/coming-from-pulsar.md)


def difference(anchor: str) -> str:
    """The xfail reason: where docs/coming-from-pulsar.md gives this difference its reason."""
    return f"see docs/coming-from-pulsar.md#{anchor}"


# Names Magnetar deliberately lacks: each is listed, with its reason, in docs/coming-from-pulsar.md.
DELIBERATE: dict[str, str] = {
    # Pulsar Functions' runtime classes: Magnetar runs no Pulsar Functions.
    "top:Function": difference("no-pulsar-functions"),
    "top:Context": difference("no-pulsar-functions"),
    "top:SerDe": difference("no-pulsar-functions"),
    "top:IdentitySerDe": difference("no-pulsar-functions"),
    "top:PickleSerDe": difference("no-pulsar-functions"),
    # The C++ extension's raw configuration objects, re-exported by pulsar-client as-is; Magnetar
    # has the Python wrappers (ConsumerBatchReceivePolicy, ConsumerKeySharedPolicy,
    # ConsumerDeadLetterPolicy) and no C++ layer under them.
    "top:BatchReceivePolicy": difference("no-cpp-config-objects"),
    "top:KeySharedPolicy": difference("no-cpp-config-objects"),
    "top:DeadLetterPolicyBuilder": difference("no-cpp-config-objects"),
    # Parses the C++ client's batch payload format, which is not Magnetar's wire format.
    "top:MessageBatch": difference("no-message-batch"),
    "sig:MessageBatch": difference("no-message-batch"),
    "sig:MessageBatch.with_message_id": difference("no-message-batch"),
    "sig:MessageBatch.parse_from": difference("no-message-batch"),
}

# Defaults Magnetar deliberately keeps different, (path, parameter): where the docs give the reason. The
# signature cases check every other part of these signatures; ``test_deliberate_default`` xfails each by name.
DELIBERATE_DEFAULTS: dict[tuple[str, str], str] = {
    # Magnetar's throughput figures rest on batching; pulsar.asyncio batches by default as well.
    ("Client.create_producer", "batching_enabled"): difference("batching-by-default"),
    # The asyncio producer waits for room instead of failing a send (its ``send`` is awaited anyway).
    ("asyncio.Client.create_producer", "block_if_queue_full"): difference("asyncio-block-if-queue-full"),
}


def _marks(case_id: str) -> list[pytest.MarkDecorator]:
    if case_id in DELIBERATE:
        return [pytest.mark.xfail(reason=DELIBERATE[case_id], strict=True)]
    return []


def cases(prefix: str, names: list[str]) -> list[Any]:
    return [pytest.param(n, id=f"{prefix}:{n}", marks=_marks(f"{prefix}:{n}")) for n in names]


# ------------------------------------------------------------------------------------ resolution


def resolve(path: str) -> Any:
    """``magnetar.<path>``; ``asyncio.X`` means ``magnetar.asyncio.X`` (the real submodule)."""
    obj: Any = magnetar
    parts = path.split(".")
    skip = 0
    if parts[0] == "asyncio":
        obj = importlib.import_module("magnetar.asyncio")
        skip = 1
    for i, part in enumerate(parts[skip:], start=skip):
        try:
            obj = inspect.getattr_static(obj, part) if i > skip else getattr(obj, part)
        except AttributeError:
            pytest.fail(f"magnetar.{'.'.join(parts[: i + 1])} is missing (pulsar-client has pulsar.{path})")
    return obj


def callable_params(path: str) -> list[inspect.Parameter]:
    """The parameters a caller passes: no ``self`` / ``cls``."""
    obj = resolve(path)
    if isinstance(obj, staticmethod):
        return list(inspect.signature(obj.__func__).parameters.values())
    if isinstance(obj, property):
        pytest.fail(f"magnetar.{path} is a property; pulsar-client's is a method")
    func = obj.__init__ if inspect.isclass(obj) else getattr(obj, "__func__", obj)
    params = list(inspect.signature(func).parameters.values())
    return params[1:] if params and params[0].name in ("self", "cls") else params


def default_matches(expected: Any, actual: Any) -> bool:
    if expected is ANY:
        return actual is not inspect.Parameter.empty
    if isinstance(expected, E):
        return isinstance(actual, enum.Enum) and (type(actual).__name__, actual.name) == (expected.cls, expected.member)
    return type(actual) is type(expected) and bool(actual == expected)


def check_params(path: str, expected: Params, ordered: bool = True) -> None:
    params = callable_params(path)
    positional = [
        q for q in params if q.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    by_name = {q.name: q for q in params}
    problems: list[str] = []
    if ordered:
        got = [q.name for q in positional[: len(expected)]]
        want = [name for name, _ in expected]
        if got != want:
            problems.append(f"positional parameters {got} != pulsar-client's {want}")
    for name, default in expected:
        q = by_name.get(name)
        if q is None:
            problems.append(f"no parameter {name!r}")
            continue
        if q.kind is inspect.Parameter.KEYWORD_ONLY and ordered:
            problems.append(f"{name!r} is keyword-only (pulsar-client takes it by position)")
        deliberate = (path, name) in DELIBERATE_DEFAULTS
        if default is not REQ and not deliberate and not default_matches(default, q.default):
            problems.append(f"{name!r} defaults to {q.default!r}, pulsar-client's to {default!r}")
    wanted = {name for name, _ in expected}
    for q in params:
        extra_required = q.default is inspect.Parameter.empty and q.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        )
        if q.name not in wanted and extra_required:
            problems.append(f"extra required parameter {q.name!r} (a pulsar-client call never passes it)")
    assert not problems, f"magnetar.{path}: " + "; ".join(problems)


# ------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("name", cases("top", TOP_LEVEL))
def test_top_level_name(name: str) -> None:
    assert hasattr(magnetar, name), f"magnetar.{name} is missing (import pulsar has pulsar.{name})"


@pytest.mark.parametrize("name", cases("sub", SUBMODULES))
def test_submodule_imports(name: str) -> None:
    """``from pulsar.<name> import X`` works, and so does ``pulsar.<name>.X`` right after ``import
    pulsar`` (pulsar's ``__init__`` loads all three), checked in a fresh interpreter."""
    module = importlib.import_module(f"magnetar.{name}")
    assert isinstance(module, ModuleType)
    code = f"import types, magnetar; assert isinstance(magnetar.{name}, types.ModuleType)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"magnetar.{name} right after 'import magnetar': {done.stderr[-500:]}"


@pytest.mark.parametrize("name", cases("asyncio", ASYNCIO_NAMES))
def test_asyncio_name(name: str) -> None:
    module = importlib.import_module("magnetar.asyncio")
    assert hasattr(module, name), f"magnetar.asyncio.{name} is missing (pulsar.asyncio.{name})"


@pytest.mark.parametrize("name", cases("schema", SCHEMA_NAMES))
def test_schema_name(name: str) -> None:
    module = importlib.import_module("magnetar.schema")
    assert hasattr(module, name), f"magnetar.schema.{name} is missing (pulsar.schema.{name})"


@pytest.mark.parametrize("path", cases("sig", list(SIGNATURES)))
def test_signature(path: str) -> None:
    check_params(path, SIGNATURES[path])


def _expected_default(path: str, name: str) -> Any:
    return dict(SIGNATURES[path])[name]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        pytest.param(path, name, id=f"default:{path}.{name}", marks=pytest.mark.xfail(reason=why, strict=True))
        for (path, name), why in DELIBERATE_DEFAULTS.items()
    ],
)
def test_deliberate_default(path: str, name: str) -> None:
    actual = {q.name: q.default for q in callable_params(path)}[name]
    assert default_matches(_expected_default(path, name), actual), f"magnetar.{path}({name}={actual!r})"


def test_asyncio_client_takes_every_client_keyword() -> None:
    """``pulsar.asyncio.Client(service_url, **kwargs)`` passes its keywords to ``pulsar.Client``."""
    check_params("asyncio.Client", CLIENT_INIT, ordered=False)
    first = callable_params("asyncio.Client")[0]
    assert first.name == "service_url"


@pytest.mark.parametrize("path", cases("coro", ASYNC_COROUTINES))
def test_asyncio_method_is_a_coroutine(path: str) -> None:
    assert inspect.iscoroutinefunction(resolve(path)), f"magnetar.{path} must be awaited, as pulsar.{path}"


@pytest.mark.parametrize("path", cases("plain", ASYNC_PLAIN))
def test_asyncio_method_is_not_a_coroutine(path: str) -> None:
    assert not inspect.iscoroutinefunction(resolve(path)), f"magnetar.{path} must not need await, as pulsar.{path}"


@pytest.mark.parametrize("path", cases("prop", PROPERTIES))
def test_property(path: str) -> None:
    assert isinstance(resolve(path), property), f"magnetar.{path} must be a property, as in pulsar-client"


def test_message_id_earliest_and_latest_are_class_attributes() -> None:
    mid = magnetar.MessageId
    assert isinstance(mid.earliest, mid) and isinstance(mid.latest, mid)
    assert mid.earliest != mid.latest
    assert mid.earliest < mid.latest


def test_message_id_deserialize_is_static() -> None:
    assert isinstance(inspect.getattr_static(magnetar.MessageId, "deserialize"), staticmethod | classmethod)


def test_authentication_providers_derive_from_authentication() -> None:
    base = magnetar.Authentication
    for name in ("AuthenticationTLS", "AuthenticationToken", "AuthenticationAthenz", "AuthenticationOauth2"):
        assert issubclass(getattr(magnetar, name), base), name
    assert issubclass(magnetar.AuthenticationBasic, base)


def test_auto_cluster_failover_is_a_service_info_provider() -> None:
    assert issubclass(magnetar.AutoClusterFailover, magnetar.ServiceInfoProvider)


# Calls pulsar-client refuses with ValueError before doing anything (its ``_check_type`` and the
# policies' own checks): a pulsar program may catch exactly that.
VALUE_ERRORS: dict[str, Callable[[], object]] = {
    "Client(service_url=123)": lambda: magnetar.Client(123),
    "ConsumerDeadLetterPolicy(0)": lambda: magnetar.ConsumerDeadLetterPolicy(0),
    "ConsumerKeySharedPolicy(Sticky, no ranges)": lambda: magnetar.ConsumerKeySharedPolicy(
        magnetar.KeySharedMode.Sticky
    ),
    "AuthenticationToken(123)": lambda: magnetar.AuthenticationToken(123),
    "AuthenticationTLS(1, 2)": lambda: magnetar.AuthenticationTLS(1, 2),
    "CryptoKeyReader(1, 2)": lambda: magnetar.CryptoKeyReader(1, 2),
    "ConsoleLogger('info')": lambda: magnetar.ConsoleLogger("info"),
    "FileLogger(Info, 1)": lambda: magnetar.FileLogger(magnetar.LoggerLevel.Info, 1),
}


@pytest.mark.parametrize("call", cases("valueerror", list(VALUE_ERRORS)))
def test_refused_with_value_error(call: str) -> None:
    with pytest.raises(ValueError):
        VALUE_ERRORS[call]()


@pytest.mark.parametrize("name", cases("enum", list(ENUMS)))
def test_enum_members(name: str) -> None:
    cls = resolve(name)
    missing = [m for m in ENUMS[name] if not hasattr(cls, m)]
    assert not missing, f"magnetar.{name} lacks {missing}"


@pytest.mark.parametrize("name", cases("result", list(RESULT_VALUES)))
def test_result_member_and_value(name: str) -> None:
    member = getattr(magnetar.Result, name, None)
    assert member is not None, f"magnetar.Result.{name} is missing"
    assert int(member.value) == RESULT_VALUES[name], f"Result.{name} = {member.value}, pulsar's {RESULT_VALUES[name]}"


def test_pulsar_exception_is_an_exception_with_error() -> None:
    base = magnetar.PulsarException
    assert issubclass(base, Exception)
    assert importlib.import_module("magnetar.exceptions").PulsarException is base
    assert callable(getattr(base, "error", None))


@pytest.mark.parametrize("name", cases("exc", EXCEPTIONS))
def test_exception_class(name: str) -> None:
    """Top level and in ``magnetar.exceptions``, a PulsarException, and ``error()`` is its Result."""
    exceptions = importlib.import_module("magnetar.exceptions")
    cls = getattr(magnetar, name, None)
    assert cls is not None, f"magnetar.{name} is missing"
    assert getattr(exceptions, name, None) is cls, f"magnetar.exceptions.{name} is not magnetar.{name}"
    assert isinstance(cls, type) and issubclass(cls, magnetar.PulsarException), f"{name} is no PulsarException"
    assert cls("conformance").error() == getattr(magnetar.Result, name)


def test_asyncio_pulsar_exception_catches_client_errors() -> None:
    """``except pulsar.asyncio.PulsarException`` must catch what the asyncio client raises."""
    module = importlib.import_module("magnetar.asyncio")
    assert issubclass(magnetar.Timeout, module.PulsarException)


# ---------------------------------------------------------------- a pulsar-client program, as written


def test_pulsar_program_runs_with_import_magnetar_as_pulsar(standalone: Any) -> None:
    """pulsar-client's documented produce / consume / listener / reader round trip, unchanged but
    for the import and the URL, against a real standalone."""
    pulsar: Any = magnetar
    topic = f"persistent://public/default/conformance-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(standalone.service_url, operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=True)
        ids = [producer.send(f"Hello-{i}".encode(), properties={"i": str(i)}) for i in range(5)]
        sent: list[Any] = []
        done = threading.Event()

        def callback(res: Any, msg_id: Any) -> None:
            sent.append((res, msg_id))
            done.set()

        producer.send_async(b"Hello-async", callback)
        producer.flush()
        assert done.wait(30)
        assert sent[0][0] == pulsar.Result.Ok
        assert sent[0][1] > ids[-1]
        got = []
        for _ in range(6):
            msg = consumer.receive(timeout_millis=10_000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == [f"Hello-{i}".encode() for i in range(5)] + [b"Hello-async"]
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        first = reader.read_next(timeout_millis=10_000)
        assert first.data() == b"Hello-0" and first.message_id() == ids[0]
        assert first.properties() == {"i": "0"}
        reader.close()
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=100)
    finally:
        client.close()


async def test_pulsar_asyncio_program_runs_with_magnetar_asyncio(standalone: Any) -> None:
    """pulsar.asyncio's documented flow (no ``async with``, ``await`` on every call but the
    accessors), unchanged but for the import and the URL."""
    pulsar_asyncio: Any = importlib.import_module("magnetar.asyncio")
    topic = f"persistent://public/default/conformance-async-{uuid.uuid4().hex[:8]}"
    client = pulsar_asyncio.Client(standalone.service_url)
    try:
        consumer = await client.subscribe(topic, "sub", initial_position=pulsar_asyncio.InitialPosition.Earliest)
        producer = await client.create_producer(topic)
        msg_id = await producer.send(b"hello", properties={"k": "v"})
        assert producer.topic() == consumer.topic() == topic
        msg = await consumer.receive()
        assert msg.data() == b"hello" and msg.properties() == {"k": "v"} and msg.message_id() == msg_id
        await consumer.acknowledge(msg)
        await producer.flush()
        await producer.close()
        await consumer.close()
    finally:
        await client.close()


def test_pulsar_listeners_get_consumer_or_reader_and_message(standalone: Any) -> None:
    """``message_listener(consumer, msg)`` and ``reader_listener(reader, msg)``, as pulsar-client
    calls them: the listener acknowledges through the object it is given."""
    pulsar: Any = magnetar
    topic = f"persistent://public/default/conformance-listener-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(standalone.service_url)
    try:
        got: list[bytes] = []
        read: list[bytes] = []
        consumed, was_read = threading.Event(), threading.Event()

        def on_message(consumer: Any, msg: Any) -> None:
            consumer.acknowledge(msg)
            got.append(msg.data())
            if len(got) == 3:
                consumed.set()

        topics: set[str] = set()

        def on_read(reader: Any, msg: Any) -> None:
            topics.add(reader.topic())
            read.append(msg.data())
            if len(read) == 3:
                was_read.set()

        client.subscribe(topic, "listener", message_listener=on_message)
        client.create_reader(topic, pulsar.MessageId.earliest, reader_listener=on_read)
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"m{i}".encode())
        assert consumed.wait(30) and was_read.wait(30)
        assert got == read == [b"m0", b"m1", b"m2"]
        assert topics == {topic}
    finally:
        client.close()
