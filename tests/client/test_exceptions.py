"""pulsar-client's exception hierarchy and ``Result``, name for name: a program that catches
``pulsar.exceptions.Timeout`` or compares ``exc.error()`` with ``pulsar.Result.Timeout`` must work
after ``import magnetar as pulsar``. The names and numbers come from pulsar-client 3.x
(``_pulsar.Result``, ``pulsar.exceptions``)."""

from __future__ import annotations

import importlib

import pytest

import magnetar as pulsar
from magnetar.protocol import errors
from magnetar.protocol.errors import ErrorCode, error_from_wire

# pulsar.Result, in pulsar-client's order: the value of each is its index.
PULSAR_RESULTS = """Ok UnknownError InvalidConfiguration Timeout LookupError ConnectError ReadError AuthenticationError
AuthorizationError ErrorGettingAuthenticationData BrokerMetadataError BrokerPersistenceError ChecksumError ConsumerBusy
NotConnected AlreadyClosed InvalidMessage ConsumerNotInitialized ProducerNotInitialized ProducerBusy
TooManyLookupRequestException InvalidTopicName InvalidUrl ServiceUnitNotReady OperationNotSupported
ProducerBlockedQuotaExceededError ProducerBlockedQuotaExceededException ProducerQueueIsFull MessageTooBig TopicNotFound
SubscriptionNotFound ConsumerNotFound UnsupportedVersionError TopicTerminated CryptoError IncompatibleSchema
ConsumerAssignError CumulativeAcknowledgementNotAllowedError TransactionCoordinatorNotFoundError InvalidTxnStatusError
NotAllowedError TransactionConflict TransactionNotFound ProducerFenced MemoryBufferIsFull Interrupted""".split()


def test_result_has_every_pulsar_member_with_pulsars_value() -> None:
    assert [(m.name, m.value) for m in pulsar.Result] == [(n, i) for i, n in enumerate(PULSAR_RESULTS)]


@pytest.mark.parametrize("name", PULSAR_RESULTS[1:])
def test_each_pulsar_exception_exists_under_one_base_and_knows_its_result(name: str) -> None:
    exceptions = importlib.import_module("magnetar.exceptions")
    cls = getattr(exceptions, name)
    assert cls is getattr(pulsar, name)  # also a top-level name, as in pulsar-client
    assert issubclass(cls, pulsar.PulsarException) and issubclass(cls, Exception)
    exc = cls("text")
    assert exc.error() is pulsar.Result[name]
    assert pulsar.result_of(exc) is pulsar.Result[name]
    assert str(exc) == "text"


def test_the_exceptions_module_is_reachable_as_an_attribute() -> None:
    assert pulsar.exceptions.Timeout is pulsar.Timeout  # ``pulsar.exceptions.X`` without importing it
    assert sorted(pulsar.exceptions.__all__) == sorted(["PulsarException", *PULSAR_RESULTS[1:]])


def test_magnetar_names_stay_as_aliases_of_pulsars() -> None:
    assert pulsar.MagnetarError is pulsar.PulsarException
    assert errors.MessageTooLarge is pulsar.MessageTooBig
    assert errors.ServiceNotReady is pulsar.ServiceUnitNotReady
    assert errors.PersistenceError is pulsar.BrokerPersistenceError
    assert errors.Unsupported is pulsar.OperationNotSupported
    assert pulsar.ConnectError is errors.ConnectError  # the TLS failure and the connect timeout share it


def test_magnetar_only_errors_are_pulsar_exceptions_with_the_closest_result() -> None:
    assert errors.NamespaceNotFound("x").error() is pulsar.Result.TopicNotFound
    assert errors.UnknownCommand("x").error() is pulsar.Result.OperationNotSupported
    assert errors.NotEnoughBookies("x").error() is pulsar.Result.BrokerPersistenceError
    assert isinstance(errors.LedgerFenced("x"), pulsar.PulsarException)


def test_every_wire_code_comes_back_as_its_class_and_unknown_ones_as_unknown_error() -> None:
    for code in ErrorCode:
        exc = error_from_wire(code.value, "why")
        assert exc.code == code and str(exc) == "why"
    for cls in errors.PULSAR_EXCEPTIONS:
        assert type(error_from_wire(cls.code.value, "")) is cls
    odd = error_from_wire("NoSuchCode", "why")
    assert type(odd) is pulsar.UnknownError and odd.error() is pulsar.Result.UnknownError


def test_retryable_errors_are_the_transient_ones() -> None:
    for cls in (pulsar.Timeout, pulsar.NotConnected, pulsar.ServiceUnitNotReady, pulsar.BrokerPersistenceError):
        assert issubclass(cls, errors.RetryableError)
    for cls in (pulsar.TopicNotFound, pulsar.AlreadyClosed, pulsar.ConnectError, pulsar.AuthenticationError):
        assert not issubclass(cls, errors.RetryableError)


def test_result_of_passes_results_through_and_maps_foreign_exceptions_to_unknown_error() -> None:
    assert pulsar.result_of(pulsar.Result.Ok) is pulsar.Result.Ok
    assert pulsar.result_of(ValueError("x")) is pulsar.Result.UnknownError
