"""Client-side errors, on top of the protocol's one-class-per-wire-code hierarchy.

Everything a caller can catch is a ``MagnetarError``; errors the broker reports arrive as the
protocol class for their wire code (``errors.error_from_wire``). The two classes here have no
wire code because the client raises them itself, before anything is sent, as Pulsar's client does.
"""

from __future__ import annotations

from magnetar.protocol.errors import (
    AlreadyClosed,
    ChecksumError,
    ConsumerBusy,
    InvalidTopicName,
    MagnetarError,
    MessageTooLarge,
    NotConnected,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
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


class ProducerQueueIsFull(MagnetarError):
    """``max_pending_messages`` are already in flight and the producer was told not to block."""


class CumulativeAcknowledgementNotAllowedError(MagnetarError):
    """Cumulative acks make no sense when messages are spread over consumers (Shared, Key_Shared)."""
