"""Enums named and valued after Pulsar's Python client, so that code written for ``pulsar`` reads the same.

``ConsumerType`` values are the wire names of subscription types (WIRE.md ``subscribe.sub_type``),
and ``InitialPosition`` values are the wire names of ``subscribe.initial_position``, so no mapping
table sits between the public API and the frames. ``CompressionType`` is the protocol's own enum:
one definition, shared by the producer that compresses and the consumer that decompresses.
"""

from __future__ import annotations

from enum import Enum

from magnetar.client.errors import CumulativeAcknowledgementNotAllowedError, ProducerQueueIsFull
from magnetar.protocol import errors
from magnetar.protocol.compression import CompressionType
from magnetar.protocol.errors import MagnetarError

__all__ = ["CompressionType", "ConsumerType", "InitialPosition", "Result", "result_of"]


class ConsumerType(Enum):
    """Subscription type; the value is what the ``subscribe`` command carries."""

    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    KeyShared = "Key_Shared"
    # Pulsar spells it ``KeyShared``; the wire spells it ``Key_Shared``: accept both (an alias).
    Key_Shared = "Key_Shared"


class InitialPosition(Enum):
    """Where a new subscription's cursor starts."""

    Latest = "Latest"
    Earliest = "Earliest"


class Result(Enum):
    """Outcome handed to ``send_async`` callbacks, named after ``pulsar.Result``.

    Pulsar's callbacks get ``Result.Ok`` or an error ``Result``; ours get ``Result.Ok`` or the
    exception itself, which carries the broker's message. ``result_of`` maps an exception to the
    Pulsar-style member for code that wants to compare against names.
    """

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ChecksumError = 6
    ConsumerBusy = 7
    NotConnected = 8
    AlreadyClosed = 9
    ProducerBusy = 10
    InvalidTopicName = 11
    ServiceUnitNotReady = 12
    OperationNotSupported = 13
    ProducerQueueIsFull = 14
    MessageTooBig = 15
    TopicNotFound = 16
    BrokerPersistenceError = 17
    CumulativeAcknowledgementNotAllowedError = 18


_RESULT_BY_ERROR: dict[type[MagnetarError], Result] = {
    errors.Timeout: Result.Timeout,
    errors.ChecksumError: Result.ChecksumError,
    errors.ConsumerBusy: Result.ConsumerBusy,
    errors.NotConnected: Result.NotConnected,
    errors.AlreadyClosed: Result.AlreadyClosed,
    errors.ProducerBusy: Result.ProducerBusy,
    errors.InvalidTopicName: Result.InvalidTopicName,
    errors.ServiceNotReady: Result.ServiceUnitNotReady,
    errors.Unsupported: Result.OperationNotSupported,
    errors.UnknownCommand: Result.OperationNotSupported,
    errors.MessageTooLarge: Result.MessageTooBig,
    errors.TopicNotFound: Result.TopicNotFound,
    errors.PersistenceError: Result.BrokerPersistenceError,
    ProducerQueueIsFull: Result.ProducerQueueIsFull,
    CumulativeAcknowledgementNotAllowedError: Result.CumulativeAcknowledgementNotAllowedError,
}


def result_of(exc: BaseException | Result) -> Result:
    """The Pulsar-style ``Result`` member for an outcome (``Result.Ok`` passes through)."""
    if isinstance(exc, Result):
        return exc
    for cls in type(exc).__mro__:
        found = _RESULT_BY_ERROR.get(cls)
        if found is not None:
            return found
    return Result.UnknownError
