"""Object stores that closed ledgers are offloaded to (Pulsar's tiered storage): the drivers, their
settings (Pulsar's ``OffloadPolicies``), where S3 credentials come from, and the errors they raise.

The managed ledger above uses it; it uses nothing above ``magnetar.ledger``.
"""

from magnetar.offload.blob_store import BlobStore, ObjectInfo, put_verified, verify_object
from magnetar.offload.credentials import S3Credentials, resolve_s3_credentials
from magnetar.offload.errors import (
    CorruptObject,
    InvalidOffloadConfig,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreUnavailable,
)
from magnetar.offload.settings import OffloadPolicies, open_store

__all__ = [
    "BlobStore",
    "CorruptObject",
    "InvalidOffloadConfig",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStoreAccessDenied",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "OffloadPolicies",
    "S3Credentials",
    "open_store",
    "put_verified",
    "resolve_s3_credentials",
    "verify_object",
]
