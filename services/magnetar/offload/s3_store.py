"""The S3-compatible driver (Pulsar's ``aws-s3`` and ``S3`` offload drivers) on boto3.

boto3 blocks, so every call runs in a worker thread (``asyncio.to_thread``); one client serves all
of them (boto3 clients are thread-safe). Timeouts and a bounded number of attempts make a stopped
store fail in bounded time with ``ObjectStoreUnavailable`` instead of hanging an offload or a read.
Large objects go up as multipart uploads in parts of ``max_block_size`` bytes; reads are ranged GETs.
Non-AWS endpoints (SeaweedFS, MinIO, ...) get path-style addressing, which they all understand.
Nothing is created implicitly unless ``create_bucket_if_missing`` says so.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any, TypeVar

import boto3
import botocore.exceptions
from boto3.s3.transfer import TransferConfig
from botocore.config import Config

from magnetar.offload.blob_store import BlobSource, ObjectInfo
from magnetar.offload.credentials import S3Credentials
from magnetar.offload.errors import (
    InvalidOffloadConfig,
    ObjectNotFound,
    ObjectStoreAccessDenied,
    ObjectStoreError,
    ObjectStoreUnavailable,
)

T = TypeVar("T")

# Pulsar's defaults (s3ManagedLedgerOffloadMaxBlockSizeInBytes / ...ReadBufferSizeInBytes).
DEFAULT_MAX_BLOCK_SIZE = 64 * 1024 * 1024
DEFAULT_READ_BUFFER_SIZE = 1024 * 1024
# S3 refuses multipart parts under 5 MiB (but the last).
MIN_BLOCK_SIZE = 5 * 1024 * 1024

_ACCESS_DENIED_CODES = {
    "403",
    "AccessDenied",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "InvalidToken",
    "ExpiredToken",
    "InvalidSecurity",
}
_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound", "NoSuchUpload"}
_UNAVAILABLE_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "RequestTimeTooSkewed"}
_CONNECTION_ERRORS = (
    botocore.exceptions.EndpointConnectionError,
    botocore.exceptions.ConnectTimeoutError,
    botocore.exceptions.ReadTimeoutError,
    botocore.exceptions.ConnectionClosedError,
    botocore.exceptions.ConnectionError,
)


@dataclass(frozen=True)
class S3StoreConfig:
    """Where the bucket is and how to talk to it (built from ``OffloadPolicies`` by ``open_store``)."""

    bucket: str
    region: str | None = None
    endpoint: str | None = None
    # Path-style addressing (``endpoint/bucket/key``); None: on when an endpoint is given.
    path_style: bool | None = None
    max_block_size: int = DEFAULT_MAX_BLOCK_SIZE
    read_buffer_size: int = DEFAULT_READ_BUFFER_SIZE
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    # Attempts per request (the first and its retries), with boto3's standard backoff between them.
    max_attempts: int = 3
    create_bucket_if_missing: bool = False


class S3Store:
    """A bucket of an S3-compatible store, as a ``BlobStore``."""

    def __init__(self, config: S3StoreConfig, credentials: S3Credentials | None = None) -> None:
        if not config.bucket:
            raise InvalidOffloadConfig("S3 offload needs a bucket (s3ManagedLedgerOffloadBucket)")
        if config.max_block_size < MIN_BLOCK_SIZE:
            raise InvalidOffloadConfig(
                f"S3 max block size {config.max_block_size} is below S3's 5 MiB part minimum ({MIN_BLOCK_SIZE})"
            )
        if config.read_buffer_size <= 0:
            raise InvalidOffloadConfig(f"S3 read buffer size must be positive, not {config.read_buffer_size}")
        self._config = config
        self._credentials = credentials or S3Credentials()
        path_style = config.path_style if config.path_style is not None else config.endpoint is not None
        client_config = Config(
            region_name=config.region,
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            retries={"max_attempts": config.max_attempts, "mode": "standard"},
            s3={"addressing_style": "path" if path_style else "auto"},
            # Checksums only where S3 requires them: S3-compatible stores vary in what they accept.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        session = boto3.session.Session(
            aws_access_key_id=self._credentials.access_key_id,
            aws_secret_access_key=self._credentials.secret_access_key,
            aws_session_token=self._credentials.session_token,
            region_name=config.region,
        )
        self._client: Any = session.client("s3", endpoint_url=config.endpoint, config=client_config)
        self._transfer = TransferConfig(
            multipart_threshold=config.max_block_size,
            multipart_chunksize=config.max_block_size,
            max_concurrency=4,
        )
        self._bucket_checked = not config.create_bucket_if_missing
        self._bucket_lock = threading.Lock()

    @property
    def location(self) -> str:
        where = f" at {self._config.endpoint}" if self._config.endpoint else ""
        return f"S3 bucket {self._config.bucket!r}{where}"

    @property
    def read_buffer_size(self) -> int:
        return self._config.read_buffer_size

    @property
    def config(self) -> S3StoreConfig:
        return self._config

    # ----------------------------------------------------------------------------- the BlobStore calls

    async def put(self, key: str, data: BlobSource, metadata: Mapping[str, str] | None = None) -> ObjectInfo:
        meta = dict(metadata or {})

        def upload() -> None:
            self._ensure_bucket()
            extra = {"Metadata": meta}
            if isinstance(data, Path):
                self._client.upload_file(str(data), self._config.bucket, key, ExtraArgs=extra, Config=self._transfer)
            else:
                stream = BytesIO(data) if isinstance(data, bytes) else data
                self._client.upload_fileobj(stream, self._config.bucket, key, ExtraArgs=extra, Config=self._transfer)

        await self._call("put", key, upload)
        info = await self.info(key)
        if info is None:
            raise ObjectNotFound(f"{self.location}: object {key!r} is absent right after its upload")
        return info

    async def read(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise ValueError(f"bad byte range [{start}, {end})")
        if end == start:
            return b""
        pieces: list[bytes] = []
        position = start
        while position < end:
            last = min(end, position + self._config.read_buffer_size) - 1
            piece = await self._call("read", key, functools.partial(self._get, key, f"bytes={position}-{last}"))
            pieces.append(piece)
            position += len(piece)
            if position <= last:  # the object ended inside this range
                break
        return b"".join(pieces)

    async def read_all(self, key: str) -> bytes:
        return await self._call("read", key, lambda: self._get(key, None))

    async def info(self, key: str) -> ObjectInfo | None:
        def head() -> ObjectInfo | None:
            try:
                answer = self._client.head_object(Bucket=self._config.bucket, Key=key)
            except botocore.exceptions.ClientError as e:
                if _error_code(e) in _NOT_FOUND_CODES:
                    return None
                raise
            return ObjectInfo(
                key=key,
                size=int(answer["ContentLength"]),
                metadata=dict(answer.get("Metadata", {})),
                etag=str(answer.get("ETag", "")).strip('"'),
            )

        return await self._call("info", key, head)

    async def delete(self, key: str) -> None:
        await self._call("delete", key, lambda: self._client.delete_object(Bucket=self._config.bucket, Key=key))

    async def list(self, prefix: str = "") -> list[str]:
        def list_keys() -> list[str]:
            keys: list[str] = []
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self._config.bucket, Prefix=prefix):
                keys.extend(str(item["Key"]) for item in page.get("Contents", []))
            return sorted(keys)

        return await self._call("list", prefix, list_keys)

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> S3Store:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # ------------------------------------------------------------------------------------- internals

    def _get(self, key: str, byte_range: str | None) -> bytes:
        kwargs: dict[str, str] = {"Bucket": self._config.bucket, "Key": key}
        if byte_range is not None:
            kwargs["Range"] = byte_range
        try:
            answer = self._client.get_object(**kwargs)
        except botocore.exceptions.ClientError as e:
            if _error_code(e) == "InvalidRange":  # a range starting at or past the end
                return b""
            raise
        body = answer["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    def _ensure_bucket(self) -> None:
        """Create the bucket once, if told to and it is missing (for tests and a chart's own store)."""
        if self._bucket_checked:
            return
        with self._bucket_lock:
            if self._bucket_checked:
                return
            try:
                self._client.head_bucket(Bucket=self._config.bucket)
            except botocore.exceptions.ClientError as e:
                if _error_code(e) not in _NOT_FOUND_CODES | {"NoSuchBucket"}:
                    raise
                create: dict[str, Any] = {"Bucket": self._config.bucket}
                region = self._config.region
                if region and region != "us-east-1" and self._config.endpoint is None:
                    create["CreateBucketConfiguration"] = {"LocationConstraint": region}
                try:
                    self._client.create_bucket(**create)
                except botocore.exceptions.ClientError as created:
                    if _error_code(created) not in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                        raise
            self._bucket_checked = True

    async def _call(self, operation: str, key: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a thread and turn boto3's errors into the offload errors."""
        try:
            return await asyncio.to_thread(fn)
        except ObjectStoreError:
            raise
        except botocore.exceptions.ClientError as e:
            raise self._client_error(operation, key, e) from None
        except _CONNECTION_ERRORS as e:
            raise ObjectStoreUnavailable(
                f"{self.location}: {operation} {key!r} failed: store unreachable ({type(e).__name__})"
            ) from None
        except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError) as e:
            raise ObjectStoreAccessDenied(
                f"{self.location}: {operation} {key!r}: no usable credentials from {self._credentials.source} "
                f"({type(e).__name__})"
            ) from None
        except botocore.exceptions.BotoCoreError as e:
            raise ObjectStoreUnavailable(f"{self.location}: {operation} {key!r} failed: {type(e).__name__}") from None
        except Exception as e:
            # boto3's transfer manager wraps failures of a multipart upload in its own error type.
            cause = e.__cause__ or e.__context__
            if isinstance(cause, botocore.exceptions.ClientError):
                raise self._client_error(operation, key, cause) from None
            if isinstance(cause, _CONNECTION_ERRORS):
                raise ObjectStoreUnavailable(
                    f"{self.location}: {operation} {key!r} failed: store unreachable ({type(cause).__name__})"
                ) from None
            raise

    def _client_error(self, operation: str, key: str, e: botocore.exceptions.ClientError) -> ObjectStoreError:
        code = _error_code(e)
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        what = f"{self.location}: {operation} {key!r}"
        if code in _ACCESS_DENIED_CODES or status == 403:
            return ObjectStoreAccessDenied(
                f"{what} refused ({code}): check the credentials from {self._credentials.source}"
            )
        if code == "NoSuchBucket":
            return ObjectNotFound(f"{what}: the bucket does not exist")
        if code in _NOT_FOUND_CODES or status == 404:
            return ObjectNotFound(f"{what}: no such object")
        if code in _UNAVAILABLE_CODES or status >= 500:
            return ObjectStoreUnavailable(f"{what} failed: the store answered {code} (HTTP {status})")
        return ObjectStoreError(f"{what} failed: {code} (HTTP {status})")


def _error_code(e: botocore.exceptions.ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))
