"""Wire error codes, and Pulsar's exception hierarchy with one class per code.

Errors cross the wire as ``{"code": <name>, "message": <text>}``; ``error_from_wire`` turns them
back into the matching exception class so callers can ``except TopicNotFound``. Retryable errors
subclass ``RetryableError`` so clients can decide on retry by type, not by string matching.

Programs written for pulsar-client catch ``pulsar.PulsarException`` and its 45 subclasses (one per
``pulsar.Result`` member but ``Ok``), so every error here descends from ``PulsarException`` (still
importable as ``MagnetarError``, the name the servers use) and ``error()`` gives its ``Result``.
Magnetar's older names stay as aliases of Pulsar's (``MessageTooLarge`` is ``MessageTooBig``,
``ServiceNotReady`` is ``ServiceUnitNotReady``...), keeping their wire code strings so that
clients and brokers of either age understand each other. Errors that only the storage and metadata
layers raise keep classes of their own, under the base, with the closest ``Result``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from magnetar.protocol.result import Result


class ErrorCode(StrEnum):
    UNKNOWN = "UnknownError"
    MALFORMED_FRAME = "MalformedFrame"
    FRAME_TOO_LARGE = "FrameTooLarge"
    UNKNOWN_COMMAND = "UnknownCommand"
    INVALID_COMMAND = "InvalidCommand"
    MESSAGE_TOO_LARGE = "MessageTooLarge"
    CHECKSUM_ERROR = "ChecksumError"
    TOPIC_NOT_FOUND = "TopicNotFound"
    TENANT_NOT_FOUND = "TenantNotFound"
    NAMESPACE_NOT_FOUND = "NamespaceNotFound"
    INVALID_TOPIC_NAME = "InvalidTopicName"
    CONSUMER_BUSY = "ConsumerBusy"
    PRODUCER_BUSY = "ProducerBusy"
    SERVICE_NOT_READY = "ServiceNotReady"
    PERSISTENCE_ERROR = "PersistenceError"
    TIMEOUT = "Timeout"
    ALREADY_CLOSED = "AlreadyClosed"
    NOT_CONNECTED = "NotConnected"
    NOT_ENOUGH_BOOKIES = "NotEnoughBookies"
    LEDGER_FENCED = "LedgerFenced"
    LEDGER_CLOSED = "LedgerClosed"
    NO_SUCH_ENTRY = "NoSuchEntry"
    NO_SUCH_LEDGER = "NoSuchLedger"
    BOOKIE_READ_ONLY = "BookieReadOnly"
    BAD_VERSION = "BadVersion"
    NOT_FOUND = "NotFound"
    ALREADY_EXISTS = "AlreadyExists"
    INCOMPATIBLE_SCHEMA = "IncompatibleSchema"
    UNSUPPORTED = "Unsupported"
    PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR = "ProducerBlockedQuotaExceededError"
    PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION = "ProducerBlockedQuotaExceededException"
    AUTHENTICATION_ERROR = "AuthenticationError"
    AUTHORIZATION_ERROR = "AuthorizationError"
    # The rest of pulsar.Result's members, so that every Pulsar exception has a wire code.
    INVALID_CONFIGURATION = "InvalidConfiguration"
    LOOKUP_ERROR = "LookupError"
    CONNECT_ERROR = "ConnectError"
    READ_ERROR = "ReadError"
    ERROR_GETTING_AUTHENTICATION_DATA = "ErrorGettingAuthenticationData"
    BROKER_METADATA_ERROR = "BrokerMetadataError"
    INVALID_MESSAGE = "InvalidMessage"
    CONSUMER_NOT_INITIALIZED = "ConsumerNotInitialized"
    PRODUCER_NOT_INITIALIZED = "ProducerNotInitialized"
    TOO_MANY_LOOKUP_REQUEST_EXCEPTION = "TooManyLookupRequestException"
    INVALID_URL = "InvalidUrl"
    PRODUCER_QUEUE_IS_FULL = "ProducerQueueIsFull"
    SUBSCRIPTION_NOT_FOUND = "SubscriptionNotFound"
    CONSUMER_NOT_FOUND = "ConsumerNotFound"
    UNSUPPORTED_VERSION_ERROR = "UnsupportedVersionError"
    TOPIC_TERMINATED = "TopicTerminated"
    CRYPTO_ERROR = "CryptoError"
    CONSUMER_ASSIGN_ERROR = "ConsumerAssignError"
    CUMULATIVE_ACKNOWLEDGEMENT_NOT_ALLOWED_ERROR = "CumulativeAcknowledgementNotAllowedError"
    TRANSACTION_COORDINATOR_NOT_FOUND_ERROR = "TransactionCoordinatorNotFoundError"
    INVALID_TXN_STATUS_ERROR = "InvalidTxnStatusError"
    NOT_ALLOWED_ERROR = "NotAllowedError"
    TRANSACTION_CONFLICT = "TransactionConflict"
    TRANSACTION_NOT_FOUND = "TransactionNotFound"
    PRODUCER_FENCED = "ProducerFenced"
    MEMORY_BUFFER_IS_FULL = "MemoryBufferIsFull"
    INTERRUPTED = "Interrupted"


class PulsarException(Exception):
    """Base of every Magnetar and Pulsar client error (``pulsar.PulsarException``)."""

    code: ErrorCode = ErrorCode.UNKNOWN
    _result: ClassVar[Result] = Result.UnknownError

    def error(self) -> Result:
        """This error's ``Result`` member (``pulsar.Result``), e.g. ``Result.Timeout``."""
        return self._result

    def to_wire(self) -> dict[str, str]:
        return {"code": str(self.code), "message": str(self)}


MagnetarError = PulsarException


class RetryableError(PulsarException):
    """An error after which the same request may succeed (possibly elsewhere)."""


# ------------------------------------------------------------- pulsar.exceptions, in Result's order


class UnknownError(PulsarException):
    code = ErrorCode.UNKNOWN
    _result = Result.UnknownError


class InvalidConfiguration(PulsarException):
    code = ErrorCode.INVALID_CONFIGURATION
    _result = Result.InvalidConfiguration


class Timeout(RetryableError):
    code = ErrorCode.TIMEOUT
    _result = Result.Timeout


class LookupError(PulsarException):
    code = ErrorCode.LOOKUP_ERROR
    _result = Result.LookupError


class ConnectError(PulsarException):
    """A connection could not be established, and retrying will not help (a failed TLS handshake) or
    ``connection_timeout_ms`` has passed."""

    code = ErrorCode.CONNECT_ERROR
    _result = Result.ConnectError


class ReadError(PulsarException):
    code = ErrorCode.READ_ERROR
    _result = Result.ReadError


class AuthenticationError(PulsarException):
    """Missing, invalid or expired credentials (WIRE.md R60-R62). Not retryable: the same
    credentials are refused again."""

    code = ErrorCode.AUTHENTICATION_ERROR
    _result = Result.AuthenticationError


class AuthorizationError(PulsarException):
    """An authenticated role that may not do this (WIRE.md R70-R74). Not retryable: only a grant
    changes the answer."""

    code = ErrorCode.AUTHORIZATION_ERROR
    _result = Result.AuthorizationError


class ErrorGettingAuthenticationData(PulsarException):
    code = ErrorCode.ERROR_GETTING_AUTHENTICATION_DATA
    _result = Result.ErrorGettingAuthenticationData


class BrokerMetadataError(PulsarException):
    code = ErrorCode.BROKER_METADATA_ERROR
    _result = Result.BrokerMetadataError


class BrokerPersistenceError(RetryableError):
    code = ErrorCode.PERSISTENCE_ERROR
    _result = Result.BrokerPersistenceError


class ChecksumError(PulsarException):
    code = ErrorCode.CHECKSUM_ERROR
    _result = Result.ChecksumError


class ConsumerBusy(PulsarException):
    code = ErrorCode.CONSUMER_BUSY
    _result = Result.ConsumerBusy


class NotConnected(RetryableError):
    code = ErrorCode.NOT_CONNECTED
    _result = Result.NotConnected


class AlreadyClosed(PulsarException):
    """The client, producer or consumer was closed; every later call raises this at once."""

    code = ErrorCode.ALREADY_CLOSED
    _result = Result.AlreadyClosed


class InvalidMessage(PulsarException):
    code = ErrorCode.INVALID_MESSAGE
    _result = Result.InvalidMessage


class ConsumerNotInitialized(PulsarException):
    code = ErrorCode.CONSUMER_NOT_INITIALIZED
    _result = Result.ConsumerNotInitialized


class ProducerNotInitialized(PulsarException):
    code = ErrorCode.PRODUCER_NOT_INITIALIZED
    _result = Result.ProducerNotInitialized


class ProducerBusy(PulsarException):
    code = ErrorCode.PRODUCER_BUSY
    _result = Result.ProducerBusy


class TooManyLookupRequestException(PulsarException):
    code = ErrorCode.TOO_MANY_LOOKUP_REQUEST_EXCEPTION
    _result = Result.TooManyLookupRequestException


class InvalidTopicName(PulsarException):
    code = ErrorCode.INVALID_TOPIC_NAME
    _result = Result.InvalidTopicName


class InvalidUrl(PulsarException):
    code = ErrorCode.INVALID_URL
    _result = Result.InvalidUrl


class ServiceUnitNotReady(RetryableError):
    code = ErrorCode.SERVICE_NOT_READY
    _result = Result.ServiceUnitNotReady


class OperationNotSupported(PulsarException):
    code = ErrorCode.UNSUPPORTED
    _result = Result.OperationNotSupported


class ProducerBlockedQuotaExceededError(RetryableError):
    """The topic's backlog quota is exceeded under ``producer_request_hold`` (WIRE.md R44a):
    producer creation is refused until consumers catch up. Retryable, so that a producer
    re-attaching keeps trying (as Pulsar's client does) while its sends wait for their timeout."""

    code = ErrorCode.PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR
    _result = Result.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(PulsarException):
    """The topic's backlog quota is exceeded under ``producer_exception`` (WIRE.md R44a): the send
    or producer creation fails at once."""

    code = ErrorCode.PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION
    _result = Result.ProducerBlockedQuotaExceededException


class ProducerQueueIsFull(PulsarException):
    """``max_pending_messages`` are already in flight and the producer was told not to block."""

    code = ErrorCode.PRODUCER_QUEUE_IS_FULL
    _result = Result.ProducerQueueIsFull


class MessageTooBig(PulsarException):
    code = ErrorCode.MESSAGE_TOO_LARGE
    _result = Result.MessageTooBig


class TopicNotFound(PulsarException):
    code = ErrorCode.TOPIC_NOT_FOUND
    _result = Result.TopicNotFound


class SubscriptionNotFound(PulsarException):
    code = ErrorCode.SUBSCRIPTION_NOT_FOUND
    _result = Result.SubscriptionNotFound


class ConsumerNotFound(PulsarException):
    code = ErrorCode.CONSUMER_NOT_FOUND
    _result = Result.ConsumerNotFound


class UnsupportedVersionError(PulsarException):
    code = ErrorCode.UNSUPPORTED_VERSION_ERROR
    _result = Result.UnsupportedVersionError


class TopicTerminated(PulsarException):
    code = ErrorCode.TOPIC_TERMINATED
    _result = Result.TopicTerminated


class CryptoError(PulsarException):
    code = ErrorCode.CRYPTO_ERROR
    _result = Result.CryptoError


class IncompatibleSchema(PulsarException):
    code = ErrorCode.INCOMPATIBLE_SCHEMA
    _result = Result.IncompatibleSchema


class ConsumerAssignError(PulsarException):
    code = ErrorCode.CONSUMER_ASSIGN_ERROR
    _result = Result.ConsumerAssignError


class CumulativeAcknowledgementNotAllowedError(PulsarException):
    """Cumulative acks make no sense when messages are spread over consumers (Shared, Key_Shared)."""

    code = ErrorCode.CUMULATIVE_ACKNOWLEDGEMENT_NOT_ALLOWED_ERROR
    _result = Result.CumulativeAcknowledgementNotAllowedError


class TransactionCoordinatorNotFoundError(PulsarException):
    code = ErrorCode.TRANSACTION_COORDINATOR_NOT_FOUND_ERROR
    _result = Result.TransactionCoordinatorNotFoundError


class InvalidTxnStatusError(PulsarException):
    code = ErrorCode.INVALID_TXN_STATUS_ERROR
    _result = Result.InvalidTxnStatusError


class NotAllowedError(PulsarException):
    code = ErrorCode.NOT_ALLOWED_ERROR
    _result = Result.NotAllowedError


class TransactionConflict(PulsarException):
    code = ErrorCode.TRANSACTION_CONFLICT
    _result = Result.TransactionConflict


class TransactionNotFound(PulsarException):
    code = ErrorCode.TRANSACTION_NOT_FOUND
    _result = Result.TransactionNotFound


class ProducerFenced(PulsarException):
    code = ErrorCode.PRODUCER_FENCED
    _result = Result.ProducerFenced


class MemoryBufferIsFull(PulsarException):
    code = ErrorCode.MEMORY_BUFFER_IS_FULL
    _result = Result.MemoryBufferIsFull


class Interrupted(PulsarException):
    """A blocking call was interrupted by a signal (SIGINT) while it waited."""

    code = ErrorCode.INTERRUPTED
    _result = Result.Interrupted


# ------------------------------------------------------------------------ Magnetar's older names

MessageTooLarge = MessageTooBig
ServiceNotReady = ServiceUnitNotReady
PersistenceError = BrokerPersistenceError
Unsupported = OperationNotSupported


# ------------------------------------------------- Magnetar's own errors (protocol, storage, metadata)


class MalformedFrame(PulsarException):
    code = ErrorCode.MALFORMED_FRAME
    _result = Result.InvalidMessage


class FrameTooLarge(PulsarException):
    code = ErrorCode.FRAME_TOO_LARGE
    _result = Result.MessageTooBig


class UnknownCommand(PulsarException):
    code = ErrorCode.UNKNOWN_COMMAND
    _result = Result.OperationNotSupported


class InvalidCommand(PulsarException):
    code = ErrorCode.INVALID_COMMAND


class TenantNotFound(PulsarException):
    code = ErrorCode.TENANT_NOT_FOUND
    _result = Result.TopicNotFound


class NamespaceNotFound(PulsarException):
    code = ErrorCode.NAMESPACE_NOT_FOUND
    _result = Result.TopicNotFound


class NotEnoughBookies(RetryableError):
    code = ErrorCode.NOT_ENOUGH_BOOKIES
    _result = Result.BrokerPersistenceError


class LedgerFenced(PulsarException):
    code = ErrorCode.LEDGER_FENCED
    _result = Result.BrokerPersistenceError


class LedgerClosed(PulsarException):
    code = ErrorCode.LEDGER_CLOSED
    _result = Result.BrokerPersistenceError


class NoSuchEntry(PulsarException):
    code = ErrorCode.NO_SUCH_ENTRY
    _result = Result.BrokerPersistenceError


class NoSuchLedger(PulsarException):
    code = ErrorCode.NO_SUCH_LEDGER
    _result = Result.BrokerPersistenceError


class BookieReadOnly(RetryableError):
    code = ErrorCode.BOOKIE_READ_ONLY
    _result = Result.BrokerPersistenceError


class BadVersion(PulsarException):
    code = ErrorCode.BAD_VERSION
    _result = Result.BrokerMetadataError


class NotFound(PulsarException):
    code = ErrorCode.NOT_FOUND


class AlreadyExists(PulsarException):
    code = ErrorCode.ALREADY_EXISTS


PULSAR_EXCEPTIONS: tuple[type[PulsarException], ...] = tuple(
    cls
    for cls in PulsarException.__subclasses__() + RetryableError.__subclasses__()
    if cls.__name__ == cls._result.name
)
"""The 45 classes of ``pulsar.exceptions`` (one per ``Result`` member but ``Ok``)."""

_BY_CODE: dict[str, type[PulsarException]] = {
    cls.code.value: cls
    for cls in PulsarException.__subclasses__() + RetryableError.__subclasses__()
    if cls is not RetryableError
}


def error_from_wire(code: str, message: str) -> PulsarException:
    """Rebuild the exception for a wire error; unknown codes become ``UnknownError``."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownError(f"{code}: {message}")
    return cls(message)
