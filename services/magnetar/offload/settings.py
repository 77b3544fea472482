"""``OffloadPolicies``: Pulsar's offload-policies JSON (the admin API's ``offload-policies`` body and
the broker's offload settings), with Pulsar's field names and defaults, and the store it opens.

Every field of Pulsar's ``OffloadPoliciesImpl`` is kept, so a body written for Pulsar round-trips
unchanged, including the drivers Magnetar does not implement (their settings are kept, a policy
naming them is refused with the list of supported drivers). The generic fields
(``managedLedgerOffloadBucket``, ...) win over the driver-specific ones (``s3ManagedLedgerOffloadBucket``,
...), as in Pulsar. Validation reports every mistake, each in one line naming the field.
Pure (no I/O) except ``open_store``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from magnetar.offload.blob_store import BlobStore
from magnetar.offload.credentials import S3Credentials, resolve_s3_credentials
from magnetar.offload.errors import InvalidOffloadConfig
from magnetar.offload.filesystem_store import FileSystemStore, root_from_uri
from magnetar.offload.s3_store import MIN_BLOCK_SIZE, S3Store, S3StoreConfig

DEFAULT_MAX_BLOCK_SIZE_IN_BYTES = 64 * 1024 * 1024
DEFAULT_READ_BUFFER_SIZE_IN_BYTES = 1024 * 1024
DEFAULT_OFFLOAD_MAX_THREADS = 2
DEFAULT_OFFLOAD_MAX_PREFETCH_ROUNDS = 1
DEFAULT_OFFLOADERS_DIRECTORY = "./offloaders"
DEFAULT_ROLE_SESSION_NAME = "pulsar-s3-offload"
# Pulsar's OffloadedReadPriority, as its JSON writes it (the enum's name) and as its CLI takes it.
READ_PRIORITIES = {"TIERED_STORAGE_FIRST": "tiered-storage-first", "BOOKKEEPER_FIRST": "bookkeeper-first"}
DEFAULT_READ_PRIORITY = "TIERED_STORAGE_FIRST"

S3_DRIVERS = ("aws-s3", "S3")
FILESYSTEM_DRIVER = "filesystem"
SUPPORTED_DRIVERS = (*S3_DRIVERS, FILESYSTEM_DRIVER)
# Pulsar's other drivers: their settings are kept in the JSON, but no store opens for them.
PULSAR_ONLY_DRIVERS = ("google-cloud-storage", "azureblob", "aliyun-oss")
# Read-only properties of Pulsar's JSON (getters isS3Driver, ...): written out, ignored when read.
_DERIVED_FIELDS = ("s3Driver", "gcsDriver", "fileSystemDriver")
_MASK = "****"


@dataclass(frozen=True)
class _Field:
    json_name: str
    kind: type
    default: Any = None


# Pulsar's OffloadPoliciesImpl, field by field, in its order.
_FIELDS = (
    _Field("offloadersDirectory", str, DEFAULT_OFFLOADERS_DIRECTORY),
    _Field("managedLedgerOffloadDriver", str),
    _Field("managedLedgerOffloadMaxThreads", int, DEFAULT_OFFLOAD_MAX_THREADS),
    _Field("managedLedgerOffloadPrefetchRounds", int, DEFAULT_OFFLOAD_MAX_PREFETCH_ROUNDS),
    _Field("managedLedgerOffloadThresholdInBytes", int),
    _Field("managedLedgerOffloadThresholdInSeconds", int),
    _Field("managedLedgerOffloadDeletionLagInMillis", int),
    _Field("managedLedgerOffloadedReadPriority", str, DEFAULT_READ_PRIORITY),
    _Field("s3ManagedLedgerOffloadRegion", str),
    _Field("s3ManagedLedgerOffloadBucket", str),
    _Field("s3ManagedLedgerOffloadServiceEndpoint", str),
    _Field("s3ManagedLedgerOffloadMaxBlockSizeInBytes", int, DEFAULT_MAX_BLOCK_SIZE_IN_BYTES),
    _Field("s3ManagedLedgerOffloadReadBufferSizeInBytes", int, DEFAULT_READ_BUFFER_SIZE_IN_BYTES),
    _Field("s3ManagedLedgerOffloadCredentialId", str),
    _Field("s3ManagedLedgerOffloadCredentialSecret", str),
    _Field("s3ManagedLedgerOffloadRole", str),
    _Field("s3ManagedLedgerOffloadRoleSessionName", str, DEFAULT_ROLE_SESSION_NAME),
    _Field("gcsManagedLedgerOffloadRegion", str),
    _Field("gcsManagedLedgerOffloadBucket", str),
    _Field("gcsManagedLedgerOffloadMaxBlockSizeInBytes", int, DEFAULT_MAX_BLOCK_SIZE_IN_BYTES),
    _Field("gcsManagedLedgerOffloadReadBufferSizeInBytes", int, DEFAULT_READ_BUFFER_SIZE_IN_BYTES),
    _Field("gcsManagedLedgerOffloadServiceAccountKeyFile", str),
    _Field("fileSystemProfilePath", str),
    _Field("fileSystemURI", str),
    _Field("managedLedgerOffloadBucket", str),
    _Field("managedLedgerOffloadRegion", str),
    _Field("managedLedgerOffloadServiceEndpoint", str),
    _Field("managedLedgerOffloadMaxBlockSizeInBytes", int),
    _Field("managedLedgerOffloadReadBufferSizeInBytes", int),
    _Field("managedLedgerExtraConfigurations", dict),
)
_BY_NAME = {f.json_name: f for f in _FIELDS}
_SECRET_FIELDS = ("s3ManagedLedgerOffloadCredentialSecret",)


@dataclass(frozen=True)
class OffloadPolicies:
    """Pulsar's offload policies: ``values`` holds every field by its JSON name (unset: the default)."""

    values: dict[str, Any] = field(default_factory=lambda: {f.json_name: _default(f) for f in _FIELDS})

    # ------------------------------------------------------------------------------------- reading

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> OffloadPolicies:
        """Build from a decoded JSON body; ``InvalidOffloadConfig`` lists every unknown or mistyped field."""
        if not isinstance(body, dict):
            raise InvalidOffloadConfig(f"offload policies must be a JSON object, not {type(body).__name__}")
        values = {f.json_name: _default(f) for f in _FIELDS}
        problems: list[str] = []
        for name, value in body.items():
            if name in _DERIVED_FIELDS:
                continue
            spec = _BY_NAME.get(name)
            if spec is None:
                problems.append(f"unknown field {name!r}")
            elif value is not None and not _is_kind(value, spec.kind):
                problems.append(f"{name} must be {_kind_name(spec.kind)}, not {json.dumps(value)}")
            else:
                values[name] = dict(value) if isinstance(value, dict) else value
        if problems:
            raise InvalidOffloadConfig("; ".join(problems))
        return cls(values)

    @classmethod
    def from_json(cls, text: str | bytes) -> OffloadPolicies:
        try:
            body = json.loads(text)
        except ValueError as e:
            raise InvalidOffloadConfig(f"offload policies are not valid JSON: {e}") from None
        return cls.from_dict(body)

    def replace(self, **changes: Any) -> OffloadPolicies:
        """A copy with fields changed, by JSON name (``replace(managedLedgerOffloadDriver="S3")``)."""
        unknown = [name for name in changes if name not in _BY_NAME]
        if unknown:
            raise InvalidOffloadConfig("; ".join(f"unknown field {name!r}" for name in unknown))
        return dataclasses.replace(self, values={**self.values, **changes})

    def get(self, name: str) -> Any:
        return self.values[_BY_NAME[name].json_name]

    # ------------------------------------------------------------------------------------- writing

    def to_dict(self, *, include_secret: bool = False) -> dict[str, Any]:
        """The JSON body, in Pulsar's field order, with its derived ``s3Driver``/``gcsDriver``/``fileSystemDriver``.

        The credential secret is masked unless ``include_secret`` (for storing the policies, never for
        showing them).
        """
        body: dict[str, Any] = {}
        for f in _FIELDS:
            value = self.values[f.json_name]
            if f.json_name in _SECRET_FIELDS and value is not None and not include_secret:
                value = _MASK
            body[f.json_name] = dict(value) if isinstance(value, dict) else value
        body["s3Driver"] = self.is_s3_driver
        body["gcsDriver"] = _same_driver(self.driver, "google-cloud-storage")
        body["fileSystemDriver"] = self.is_filesystem_driver
        return body

    def to_json(self, *, include_secret: bool = False) -> str:
        return json.dumps(self.to_dict(include_secret=include_secret))

    def __repr__(self) -> str:
        return f"OffloadPolicies({self.to_dict()!r})"

    # ------------------------------------------------------------------------------- what they say

    @property
    def driver(self) -> str | None:
        value = self.values["managedLedgerOffloadDriver"]
        return str(value) if value is not None else None

    @property
    def is_s3_driver(self) -> bool:
        return any(_same_driver(self.driver, d) for d in S3_DRIVERS)

    @property
    def is_filesystem_driver(self) -> bool:
        return _same_driver(self.driver, FILESYSTEM_DRIVER)

    @property
    def bucket(self) -> str | None:
        return self._text("managedLedgerOffloadBucket", "s3ManagedLedgerOffloadBucket")

    @property
    def region(self) -> str | None:
        return self._text("managedLedgerOffloadRegion", "s3ManagedLedgerOffloadRegion")

    @property
    def service_endpoint(self) -> str | None:
        return self._text("managedLedgerOffloadServiceEndpoint", "s3ManagedLedgerOffloadServiceEndpoint")

    @property
    def max_block_size(self) -> int:
        value = self._generic_or("managedLedgerOffloadMaxBlockSizeInBytes", "s3ManagedLedgerOffloadMaxBlockSizeInBytes")
        return int(value) if value is not None else DEFAULT_MAX_BLOCK_SIZE_IN_BYTES

    @property
    def read_buffer_size(self) -> int:
        value = self._generic_or(
            "managedLedgerOffloadReadBufferSizeInBytes", "s3ManagedLedgerOffloadReadBufferSizeInBytes"
        )
        return int(value) if value is not None else DEFAULT_READ_BUFFER_SIZE_IN_BYTES

    @property
    def threshold_in_bytes(self) -> int | None:
        """Bytes kept on the bookies before ledgers are offloaded; None: not set here; negative: off."""
        value = self.values["managedLedgerOffloadThresholdInBytes"]
        return int(value) if value is not None else None

    @property
    def deletion_lag_ms(self) -> int | None:
        """How long bookie copies stay after a ledger is offloaded; None: not set here."""
        value = self.values["managedLedgerOffloadDeletionLagInMillis"]
        return int(value) if value is not None else None

    def _generic_or(self, generic: str, specific: str) -> Any:
        value = self.values[generic]
        if value not in (None, ""):
            return value
        return self.values[specific] if self.is_s3_driver else None

    def _text(self, generic: str, specific: str) -> str | None:
        value = self._generic_or(generic, specific)
        return str(value) if value not in (None, "") else None

    # ---------------------------------------------------------------------------------- validation

    def problems(self) -> list[str]:
        """Every mistake, one line each, naming the field (empty: the policies can work)."""
        found: list[str] = []
        driver = self.driver
        supported = ", ".join(SUPPORTED_DRIVERS)
        if driver is not None and not any(_same_driver(driver, d) for d in SUPPORTED_DRIVERS):
            if any(_same_driver(driver, d) for d in PULSAR_ONLY_DRIVERS):
                found.append(
                    f"managedLedgerOffloadDriver {driver!r} is not supported by Magnetar; supported: {supported}"
                )
            else:
                found.append(f"managedLedgerOffloadDriver {driver!r} is unknown; supported: {supported}")
        if self.is_s3_driver:
            if not self.bucket:
                found.append(
                    f"s3ManagedLedgerOffloadBucket (or managedLedgerOffloadBucket) is required for driver {driver!r}"
                )
            if _same_driver(driver, "S3") and not self.service_endpoint:
                found.append(
                    "s3ManagedLedgerOffloadServiceEndpoint (or managedLedgerOffloadServiceEndpoint) is required "
                    "for driver 'S3' (an S3-compatible store)"
                )
            if _same_driver(driver, "aws-s3") and not (self.region or self.service_endpoint):
                found.append(
                    "s3ManagedLedgerOffloadRegion or s3ManagedLedgerOffloadServiceEndpoint is required "
                    "for driver 'aws-s3'"
                )
            if bool(self.values["s3ManagedLedgerOffloadCredentialId"]) != bool(
                self.values["s3ManagedLedgerOffloadCredentialSecret"]
            ):
                found.append(
                    "s3ManagedLedgerOffloadCredentialId and s3ManagedLedgerOffloadCredentialSecret go together"
                )
        if self.is_filesystem_driver:
            uri = self.values["fileSystemURI"]
            if not uri:
                found.append("fileSystemURI is required for driver 'filesystem'")
            else:
                try:
                    root_from_uri(str(uri))
                except InvalidOffloadConfig as e:
                    found.append(str(e))
        for name in (
            "s3ManagedLedgerOffloadMaxBlockSizeInBytes",
            "managedLedgerOffloadMaxBlockSizeInBytes",
            "gcsManagedLedgerOffloadMaxBlockSizeInBytes",
        ):
            value = self.values[name]
            if value is not None and value < MIN_BLOCK_SIZE:
                found.append(f"{name} must be at least {MIN_BLOCK_SIZE} (5 MiB, S3's smallest part), not {value}")
        for name in (
            "s3ManagedLedgerOffloadReadBufferSizeInBytes",
            "managedLedgerOffloadReadBufferSizeInBytes",
            "gcsManagedLedgerOffloadReadBufferSizeInBytes",
            "managedLedgerOffloadMaxThreads",
            "managedLedgerOffloadPrefetchRounds",
        ):
            value = self.values[name]
            if value is not None and value <= 0:
                found.append(f"{name} must be positive, not {value}")
        lag = self.values["managedLedgerOffloadDeletionLagInMillis"]
        if lag is not None and lag < 0:
            found.append(f"managedLedgerOffloadDeletionLagInMillis must not be negative, not {lag}")
        priority = self.values["managedLedgerOffloadedReadPriority"]
        if priority is not None and priority not in READ_PRIORITIES and priority not in READ_PRIORITIES.values():
            choices = ", ".join(READ_PRIORITIES.values())
            found.append(f"managedLedgerOffloadedReadPriority {priority!r} is unknown; one of: {choices}")
        return found

    def validate(self) -> OffloadPolicies:
        """``self`` if it can work; else ``InvalidOffloadConfig`` with every mistake (``; ``-separated)."""
        found = self.problems()
        if found:
            raise InvalidOffloadConfig("; ".join(found))
        return self


def open_store(
    policies: OffloadPolicies,
    credentials: S3Credentials | None = None,
    *,
    create_bucket_if_missing: bool = False,
) -> BlobStore:
    """The store the policies name. S3 credentials: ``credentials`` if given, else resolved from the
    policies' ``s3ManagedLedgerOffloadCredentialId``/``Secret`` and then the environment."""
    policies.validate()
    if policies.driver is None:
        raise InvalidOffloadConfig(f"managedLedgerOffloadDriver is not set; supported: {', '.join(SUPPORTED_DRIVERS)}")
    if policies.is_filesystem_driver:
        return FileSystemStore(root_from_uri(str(policies.values["fileSystemURI"])), policies.read_buffer_size)
    found = credentials or resolve_s3_credentials(
        credential_id=policies.values["s3ManagedLedgerOffloadCredentialId"],
        credential_secret=policies.values["s3ManagedLedgerOffloadCredentialSecret"],
    )
    config = S3StoreConfig(
        bucket=str(policies.bucket),
        region=policies.region,
        endpoint=policies.service_endpoint,
        max_block_size=policies.max_block_size,
        read_buffer_size=policies.read_buffer_size,
        create_bucket_if_missing=create_bucket_if_missing,
    )
    return S3Store(config, found)


def _default(spec: _Field) -> Any:
    return {} if spec.kind is dict and spec.default is None else spec.default


def _same_driver(driver: str | None, name: str) -> bool:
    return driver is not None and driver.lower() == name.lower()


def _is_kind(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return isinstance(value, kind)


def _kind_name(kind: type) -> str:
    return {int: "an integer", str: "a string", dict: "an object of strings"}.get(kind, kind.__name__)
