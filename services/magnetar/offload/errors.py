"""The errors every object-store driver raises, so that callers decide by type, not by driver.

Each message is one line naming the store (driver and bucket or root path) and the key, so an
operator can find the object; no message ever carries a credential, only where it came from.
``ObjectStoreUnavailable`` is a ``RetryableError``: the offloader keeps the ledger on the bookies and
tries later, and a reader gets an error it may retry, instead of a failure it must report.
"""

from __future__ import annotations

from magnetar.protocol.errors import PulsarException, RetryableError


class ObjectStoreError(PulsarException):
    """Base of the object-store errors."""


class ObjectStoreUnavailable(ObjectStoreError, RetryableError):
    """The store did not answer (refused, timed out) or answered with a server error (5xx)."""


class ObjectNotFound(ObjectStoreError):
    """No object under the key (or no such bucket)."""


class ObjectStoreAccessDenied(ObjectStoreError):
    """The store refused the credentials or the request (403): the message names the credential source."""


class CorruptObject(ObjectStoreError):
    """An object's size or CRC32C differs from what was written: it is never handed out as data."""


class InvalidOffloadConfig(ObjectStoreError):
    """Offload settings that cannot work (unknown driver, missing bucket, negative size, ...)."""
