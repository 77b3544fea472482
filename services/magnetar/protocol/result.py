"""``Result``: the outcome codes of Pulsar's client, with Pulsar's names and integer values.

Programs written for pulsar-client compare ``send_async`` outcomes and ``exc.error()`` against
``pulsar.Result`` members, and some log or store the integers, so both the names and the numbers
follow the C++ client's ``pulsar::Result`` (``Ok`` = 0 ... ``Interrupted`` = 45). It lives in the
protocol layer because every exception class, on either side of the wire, names its ``Result``.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Result"]


class Result(Enum):
    """Outcome of a client operation, named and numbered as ``pulsar.Result``.

    Pulsar's ``send_async`` callbacks get ``Result.Ok`` or an error member; ours get ``Result.Ok``
    or the exception itself, whose ``error()`` is the member (``result_of`` maps either).
    """

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45
