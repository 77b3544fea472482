"""Client-side errors, on top of the protocol's one-class-per-wire-code hierarchy.

Everything a caller can catch is a ``PulsarException`` (``MagnetarError``); errors the broker
reports arrive as the protocol class for their wire code (``errors.error_from_wire``). The whole
hierarchy lives in ``magnetar.protocol.errors``; this module keeps the names the client modules
import, including the two the client raises itself before anything is sent (``ProducerQueueIsFull``,
``CumulativeAcknowledgementNotAllowedError``).
"""

from __future__ import annotations

from magnetar.protocol.errors import (
    AlreadyClosed,
    ChecksumError,
    ConsumerBusy,
    CumulativeAcknowledgementNotAllowedError,
    InvalidTopicName,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerQueueIsFull,
    RetryableError,
    Timeout,
    TopicNotFound,
    Unsupported,
)

__all__ = [
    "AlreadyClosed",
    "ChecksumError",
    "ConsumerBusy",
    "CumulativeAcknowledgementNotAllowedError",
    "InvalidTopicName",
    "MagnetarError",
    "MessageTooLarge",
    "NotConnected",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerQueueIsFull",
    "RetryableError",
    "Timeout",
    "TopicNotFound",
    "Unsupported",
]
