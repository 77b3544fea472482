"""Wire error codes and one exception class per code.

Errors cross the wire as ``{"code": <name>, "message": <text>}``; ``error_from_wire`` turns them
back into the matching exception class so callers can ``except TopicNotFound``. Retryable errors
subclass ``RetryableError`` so clients can decide on retry by type, not by string matching.
"""

from __future__ import annotations

from enum import StrEnum


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


class MagnetarError(Exception):
    """Base of every error that has a wire code."""

    code: ErrorCode = ErrorCode.UNKNOWN

    def to_wire(self) -> dict[str, str]:
        return {"code": str(self.code), "message": str(self)}


class RetryableError(MagnetarError):
    """An error after which the same request may succeed (possibly elsewhere)."""


class MalformedFrame(MagnetarError):
    code = ErrorCode.MALFORMED_FRAME


class FrameTooLarge(MagnetarError):
    code = ErrorCode.FRAME_TOO_LARGE


class UnknownCommand(MagnetarError):
    code = ErrorCode.UNKNOWN_COMMAND


class InvalidCommand(MagnetarError):
    code = ErrorCode.INVALID_COMMAND


class MessageTooLarge(MagnetarError):
    code = ErrorCode.MESSAGE_TOO_LARGE


class ChecksumError(MagnetarError):
    code = ErrorCode.CHECKSUM_ERROR


class TopicNotFound(MagnetarError):
    code = ErrorCode.TOPIC_NOT_FOUND


class TenantNotFound(MagnetarError):
    code = ErrorCode.TENANT_NOT_FOUND


class NamespaceNotFound(MagnetarError):
    code = ErrorCode.NAMESPACE_NOT_FOUND


class InvalidTopicName(MagnetarError):
    code = ErrorCode.INVALID_TOPIC_NAME


class ConsumerBusy(MagnetarError):
    code = ErrorCode.CONSUMER_BUSY


class ProducerBusy(MagnetarError):
    code = ErrorCode.PRODUCER_BUSY


class ServiceNotReady(RetryableError):
    code = ErrorCode.SERVICE_NOT_READY


class PersistenceError(RetryableError):
    code = ErrorCode.PERSISTENCE_ERROR


class Timeout(RetryableError):
    code = ErrorCode.TIMEOUT


class AlreadyClosed(MagnetarError):
    code = ErrorCode.ALREADY_CLOSED


class NotConnected(RetryableError):
    code = ErrorCode.NOT_CONNECTED


class NotEnoughBookies(RetryableError):
    code = ErrorCode.NOT_ENOUGH_BOOKIES


class LedgerFenced(MagnetarError):
    code = ErrorCode.LEDGER_FENCED


class LedgerClosed(MagnetarError):
    code = ErrorCode.LEDGER_CLOSED


class NoSuchEntry(MagnetarError):
    code = ErrorCode.NO_SUCH_ENTRY


class NoSuchLedger(MagnetarError):
    code = ErrorCode.NO_SUCH_LEDGER


class BookieReadOnly(RetryableError):
    code = ErrorCode.BOOKIE_READ_ONLY


class BadVersion(MagnetarError):
    code = ErrorCode.BAD_VERSION


class NotFound(MagnetarError):
    code = ErrorCode.NOT_FOUND


class AlreadyExists(MagnetarError):
    code = ErrorCode.ALREADY_EXISTS


class Unsupported(MagnetarError):
    code = ErrorCode.UNSUPPORTED


class ProducerBlockedQuotaExceededError(RetryableError):
    """The topic's backlog quota is exceeded under ``producer_request_hold`` (WIRE.md R44a):
    producer creation is refused until consumers catch up. Retryable, so that a producer
    re-attaching keeps trying (as Pulsar's client does) while its sends wait for their timeout."""

    code = ErrorCode.PRODUCER_BLOCKED_QUOTA_EXCEEDED_ERROR


class ProducerBlockedQuotaExceededException(MagnetarError):
    """The topic's backlog quota is exceeded under ``producer_exception`` (WIRE.md R44a): the send
    or producer creation fails at once."""

    code = ErrorCode.PRODUCER_BLOCKED_QUOTA_EXCEEDED_EXCEPTION


class AuthenticationError(MagnetarError):
    """Missing, invalid or expired credentials (WIRE.md R60-R62; pulsar-client's
    ``AuthenticationError``). Not retryable: the same credentials are refused again."""

    code = ErrorCode.AUTHENTICATION_ERROR


class AuthorizationError(MagnetarError):
    """An authenticated role that may not do this (WIRE.md R70-R74; pulsar-client's
    ``AuthorizationError``). Not retryable: only a grant changes the answer."""

    code = ErrorCode.AUTHORIZATION_ERROR


_BY_CODE: dict[str, type[MagnetarError]] = {
    cls.code.value: cls
    for cls in [
        MalformedFrame,
        FrameTooLarge,
        UnknownCommand,
        InvalidCommand,
        MessageTooLarge,
        ChecksumError,
        TopicNotFound,
        TenantNotFound,
        NamespaceNotFound,
        InvalidTopicName,
        ConsumerBusy,
        ProducerBusy,
        ServiceNotReady,
        PersistenceError,
        Timeout,
        AlreadyClosed,
        NotConnected,
        NotEnoughBookies,
        LedgerFenced,
        LedgerClosed,
        NoSuchEntry,
        NoSuchLedger,
        BookieReadOnly,
        BadVersion,
        NotFound,
        AlreadyExists,
        Unsupported,
        ProducerBlockedQuotaExceededError,
        ProducerBlockedQuotaExceededException,
        AuthenticationError,
        AuthorizationError,
    ]
}


def error_from_wire(code: str, message: str) -> MagnetarError:
    """Rebuild the exception for a wire error; unknown codes become a plain ``MagnetarError``."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return MagnetarError(f"{code}: {message}")
    return cls(message)
