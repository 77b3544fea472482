"""``magnetar.asyncio``: the asyncio client under the name pulsar-client 3.x gives it.

Pulsar's Python client ships its asyncio flavour as the submodule ``pulsar.asyncio``, so a program
written against it says ``from pulsar.asyncio import Client``. This module makes that line work
after ``import magnetar as pulsar``-style renaming: it is a real submodule (an attribute alone
would satisfy ``magnetar.asyncio.Client`` but not the ``from ... import`` form, which the README
promised and which raised ``ModuleNotFoundError``). The implementation lives in
``magnetar.client.aio``; this module only re-exports it. ``PulsarException`` is the one base of
every client error (``pulsar.asyncio`` has its own, with ``error()``; ours has that too).

It sits directly under ``services/magnetar/``, never on ``sys.path`` by itself, so it cannot
shadow the standard library's ``asyncio``.
"""

from __future__ import annotations

from magnetar.client.aio import (
    BatchingType,
    Client,
    CompressionType,
    Consumer,
    ConsumerCryptoFailureAction,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    KeySharedMode,
    MagnetarError,
    Message,
    MessageId,
    MultiplierRedeliveryBackoff,
    PartitionsRoutingMode,
    Producer,
    ProducerAccessMode,
    ProducerQueueIsFull,
    Reader,
    RegexSubscriptionMode,
    Result,
)
from magnetar.protocol.errors import PulsarException

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "HashingScheme",
    "InitialPosition",
    "KeySharedMode",
    "MagnetarError",
    "Message",
    "MessageId",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "ProducerQueueIsFull",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
]
