"""A real Magnetar cluster for tests: etcd, N bookies and M brokers as separate processes on loopback.

``LocalCluster`` is the test twin of ``magnetar local-cluster``: the same commands, but on free
ports picked at start (so several clusters, or a developer's own local-cluster, never collide),
with each process wrapped in a ``Proc`` that the fault tests can ``kill9()``, ``stop()`` (SIGTERM),
``pause()`` (SIGSTOP), ``resume()`` (SIGCONT) and ``restart()`` on the same data directory and
ports. Readiness is the process's own banner on stdout (etcd: its ``/health`` endpoint), never a
sleep. Every process logs to ``<base>/logs/<name>.log``; ``log_tails()`` collects the ends for a
failure report, and ``close()`` always leaves nothing running (a paused process gets SIGCONT
before SIGKILL, or it would linger as a zombie-to-be holding its ports).

Metadata is read directly from etcd through ``EtcdMetadataStore`` (``metadata()``), so tests can
look at ledger fragments, under-replication markers and bundle ownership as the brokers see them.

The metadata session lease TTL of every broker and bookie is shortened for tests (``lease_ttl``,
passed as the environment variable ``MAGNETAR_METADATA_LEASE_TTL``) so that a killed broker's
bundles are free after a few seconds instead of ten.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.polling import wait_until as wait_until  # re-exported: tests import it from here
from tests.support.process import ProcessControl

from magnetar.ledger.metadata_format import LedgerMetadata, decode
from magnetar.metadata.etcd_store import EtcdMetadataStore
from magnetar.protocol.topic_name import TopicName

LEASE_TTL_ENV = "MAGNETAR_METADATA_LEASE_TTL"
BOOKIE_BANNER = re.compile(r"magnetar bookie (\S+) ready on (\S+):(\d+)")
BROKER_BANNER = re.compile(r"magnetar broker ready: service (\S+) admin (\S+) id (\S+)")

_ports_lock = threading.Lock()
_ports_given: set[int] = set()


def http_json(url: str, method: str = "GET", body: Any = None, timeout: float = 30.0) -> tuple[int, Any]:
    """One admin REST call to any broker: the status and the decoded JSON body (None when empty),
    for errors too (an error body that is not JSON comes back as its text)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw) if raw.strip() else None
        except ValueError:
            return exc.code, raw.decode(errors="replace")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports, never handed out twice in this test session.

    All sockets are held open until every port is chosen, so the ``n`` are distinct; the kernel
    may still give one to somebody else before our process binds it (unlikely on loopback)."""
    with _ports_lock:
        socks: list[socket.socket] = []
        ports: list[int] = []
        try:
            while len(ports) < n:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", 0))
                socks.append(s)
                port = s.getsockname()[1]
                if port in _ports_given:
                    continue
                _ports_given.add(port)
                ports.append(port)
        finally:
            for s in socks:
                s.close()
        return ports


@dataclass
class Proc(ProcessControl):
    """One child process: its command line, log, readiness banner and signals.

    ``ready`` patterns are searched in every stdout/stderr line; the first match's groups are kept in
    ``banner``. ``ready_probe`` (used for etcd) is polled instead when there is no banner."""

    name: str
    role: str
    argv: list[str]
    log_path: Path
    ready: re.Pattern[str] | None = None
    ready_probe: Callable[[], bool] | None = None
    env: dict[str, str] = field(default_factory=dict)
    data_dir: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    banner: tuple[str, ...] = ()
    paused: bool = False
    started_at: float = 0.0
    starts: int = 0
    _ready_event: threading.Event = field(default_factory=threading.Event)
    _pump_done: threading.Event = field(default_factory=threading.Event)
    _lines: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ lifecycle

    def spawn(self) -> None:
        """Start the process without waiting for readiness (see ``wait_ready``)."""
        if self.alive:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self._ready_event = threading.Event()
        self._pump_done = threading.Event()
        self._lines = []
        self.banner = ()
        self.paused = False
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        log = open(self.log_path, "ab")
        self.starts += 1
        log.write(f"\n===== {self.name} start #{self.starts}: {' '.join(self.argv)}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a ^C in the terminal must not reach the cluster directly
        )
        self.started_at = time.monotonic()
        proc, ready_event, lines, pattern, done = self.proc, self._ready_event, self._lines, self.ready, self._pump_done
        assert proc.stdout is not None
        stdout = proc.stdout

        def pump() -> None:
            with log:
                for raw in stdout:
                    log.write(raw)
                    log.flush()
                    line = raw.decode(errors="replace")
                    lines.append(line)
                    if len(lines) > 400:
                        del lines[:200]
                    if pattern is not None and not ready_event.is_set():
                        m = pattern.search(line)
                        if m:
                            self.banner = m.groups()
                            ready_event.set()
                code = proc.wait()
                log.write(f"===== {self.name} (pid {proc.pid}) exited with {code}\n".encode())
            done.set()

        threading.Thread(target=pump, name=f"pump-{self.name}", daemon=True).start()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.ready_probe is not None:
                if self.ready_probe():
                    self._ready_event.set()
                    return
                waited = self._ready_event.wait(0.1)
            else:
                waited = self._ready_event.wait(0.1)
            if waited:
                return
            if self.proc is not None and self.proc.poll() is not None:
                self._drain_pump()
                raise ProcessExited(self.name, self.proc.returncode, self.log_tail())
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} not ready after {timeout}s; log:\n{self.log_tail()}")

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        self.wait_ready(timeout)

    def _drain_pump(self) -> None:
        """Let the pump thread copy the last output of an exited process (bounded)."""
        self._pump_done.wait(5)

    # ------------------------------------------------------------------ state

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    @property
    def is_ready(self) -> bool:
        return self.alive and self._ready_event.is_set()

    def output(self) -> str:
        """The recent output of the current run (kept in memory, last few hundred lines)."""
        return "".join(self._lines)

    # ------------------------------------------------------------------ signals (ProcessControl)

    def pause(self) -> None:
        super().pause()
        self.paused = True

    def resume(self) -> None:
        super().resume()
        self.paused = False

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        self._drain_pump()
        return code

    def kill9(self) -> None:
        """As ``ProcessControl.kill9``, then let the pump write the process's last output and its
        exit line: a test that reads the log right after found it missing under load (CI)."""
        super().kill9()
        if self.proc is not None and self.proc.poll() is not None:
            self._drain_pump()

    def stop(self, timeout: float = 30.0) -> int | None:
        code = super().stop(timeout)
        if self.proc is not None and self.proc.poll() is not None:
            self._drain_pump()
        return code

    def restart(self, timeout: float = 60.0) -> None:
        """Stop (SIGTERM) if running, then start again with the same data directory and ports."""
        if self.alive:
            self.stop()
        self.start(timeout)


class ProcessExited(RuntimeError):
    def __init__(self, name: str, code: int | None, tail: str) -> None:
        super().__init__(f"{name} exited with {code} before it was ready; log:\n{tail}")
        self.name = name
        self.code = code
        self.tail = tail


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as resp:
            return b'"true"' in resp.read()
    except (OSError, urllib.error.URLError):
        return False


@dataclass
class BrokerAddress:
    service_url: str
    admin_url: str
    broker_id: str


class LocalCluster:
    """etcd + ``bookies`` bookies + ``brokers`` brokers under ``base``; ``start()``, then ``close()``.

    Bookie ids are ``bookie-0`` … (explicit, so a restart keeps its identity and ports); a broker's
    id is its ``host:port``, as the broker chooses it."""

    def __init__(
        self,
        base: Path,
        *,
        bookies: int = 3,
        brokers: int = 2,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        lease_ttl: float = 3.0,
        broker_args: Iterable[str] = (),
        bookie_args: Iterable[str] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.base = Path(base)
        self.logs = self.base / "logs"
        self.lease_ttl = lease_ttl
        self.env = {LEASE_TTL_ENV: str(lease_ttl), **(env or {})}
        self.quorums = (ensemble_size, write_quorum, ack_quorum)
        self._broker_args = list(broker_args)
        self._bookie_args = list(bookie_args)
        etcd_bin = shutil.which("etcd") or "/usr/bin/etcd"
        py = [sys.executable, "-m", "magnetar.cli.main"]

        ports = free_ports(2 + 2 * bookies + 2 * brokers)
        self.bookie_http_ports = ports[2 + 2 * brokers + bookies :]
        self.etcd_port, peer = ports[0], ports[1]
        self.metadata_url = f"etcd://127.0.0.1:{self.etcd_port}"
        self.etcd = Proc(
            "etcd",
            "etcd",
            [
                etcd_bin,
                "--name",
                "faults",
                "--data-dir",
                str(self.base / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"faults=http://127.0.0.1:{peer}",
                "--log-level",
                "warn",
            ],
            self.logs / "etcd.log",
            ready_probe=lambda: _etcd_healthy(self.etcd_port),
            data_dir=self.base / "etcd",
        )
        self.bookie_ports = ports[2 : 2 + bookies]
        self.bookies: list[Proc] = []
        for i, port in enumerate(self.bookie_ports):
            self.bookies.append(self._bookie_proc(i, port, py))
        self.broker_ports = ports[2 + bookies : 2 + bookies + brokers]
        self.web_ports = ports[2 + bookies + brokers : 2 + bookies + 2 * brokers]
        self.brokers: list[Proc] = []
        e, qw, qa = self.quorums
        for i, (port, web) in enumerate(zip(self.broker_ports, self.web_ports, strict=True)):
            argv = [
                *py,
                "broker",
                "--metadata-url",
                self.metadata_url,
                "--port",
                str(port),
                "--web-port",
                str(web),
                "--ensemble-size",
                str(e),
                "--write-quorum",
                str(qw),
                "--ack-quorum",
                str(qa),
                *self._broker_args,
            ]
            self.brokers.append(
                Proc(f"broker-{i}", "broker", argv, self.logs / f"broker-{i}.log", BROKER_BANNER, env=self.env)
            )

    def _bookie_proc(self, i: int, port: int, py: list[str]) -> Proc:
        data = self.base / f"bookie-{i}"
        argv = [
            *py,
            "bookie",
            "--metadata-url",
            self.metadata_url,
            "--data-dir",
            str(data),
            "--port",
            str(port),
            "--bookie-id",
            f"bookie-{i}",
            "--http-port",
            str(self.bookie_http_ports[i]),
            *self._bookie_args,
        ]
        return Proc(
            f"bookie-{i}", "bookie", argv, self.logs / f"bookie-{i}.log", BOOKIE_BANNER, env=self.env, data_dir=data
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 90.0) -> LocalCluster:
        """Start etcd, then every bookie (together), then every broker (together)."""
        try:
            self.etcd.start(timeout)
            for b in self.bookies:
                b.spawn()
            for b in self.bookies:
                b.wait_ready(timeout)
            for br in self.brokers:
                br.spawn()
            for br in self.brokers:
                br.wait_ready(timeout)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def processes(self) -> list[Proc]:
        return [self.etcd, *self.bookies, *self.brokers]

    def close(self) -> None:
        """Kill everything, paused or not (SIGCONT first), brokers first, etcd last."""
        for p in [*self.brokers, *self.bookies, self.etcd]:
            with contextlib.suppress(Exception):
                p.kill9()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def log_tails(self, n: int = 40) -> str:
        parts = []
        for p in self.processes:
            state = "running" if p.alive else f"exited {p.returncode}"
            parts.append(f"----- {p.name} (pid {p.pid}, {state}, {p.log_path}) -----\n{p.log_tail(n)}")
        return "\n".join(parts)

    # ------------------------------------------------------------------ addresses

    @property
    def bookie_ids(self) -> list[str]:
        return [f"bookie-{i}" for i in range(len(self.bookies))]

    def bookie(self, bookie_id: str) -> Proc:
        for p in self.bookies:
            if p.name == bookie_id:
                return p
        raise KeyError(bookie_id)

    def broker_address(self, i: int) -> BrokerAddress:
        p = self.brokers[i]
        if p.banner:
            service, admin, broker_id = p.banner
            return BrokerAddress(service, admin, broker_id)
        port, web = self.broker_ports[i], self.web_ports[i]
        return BrokerAddress(f"magnetar://127.0.0.1:{port}", f"http://127.0.0.1:{web}", f"127.0.0.1:{port}")

    @property
    def service_url(self) -> str:
        """Every broker, as one multi-host service URL (the client tries them in turn)."""
        return "magnetar://" + ",".join(f"127.0.0.1:{p}" for p in self.broker_ports)

    @property
    def admin_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{w}" for w in self.web_ports]

    def broker_by_id(self, broker_id: str) -> Proc:
        """The broker process whose id (``host:port``) is ``broker_id``."""
        for i, port in enumerate(self.broker_ports):
            if broker_id.endswith(f":{port}"):
                return self.brokers[i]
        raise KeyError(broker_id)

    def broker_index(self, proc: Proc) -> int:
        return self.brokers.index(proc)

    # ------------------------------------------------------------------ bookie disks

    def wipe_bookie(self, bookie_id: str) -> None:
        """Delete a (stopped) bookie's data directory, as a disk replacement would."""
        p = self.bookie(bookie_id)
        if p.alive:
            raise RuntimeError(f"{bookie_id} is running; kill it before wiping its disk")
        assert p.data_dir is not None
        shutil.rmtree(p.data_dir, ignore_errors=True)

    def wipe_and_restart_bookie(self, bookie_id: str, *, reprovision: bool = False, timeout: float = 60.0) -> None:
        """kill -9, wipe the data directory, start again (with ``--reprovision`` if asked).

        Without ``reprovision`` the bookie is expected to refuse: ``ProcessExited`` is raised."""
        p = self.bookie(bookie_id)
        p.kill9()
        self.wipe_bookie(bookie_id)
        argv = [a for a in p.argv if a != "--reprovision"]
        if reprovision:
            argv.append("--reprovision")
        p.argv = argv
        try:
            p.start(timeout)
        finally:
            p.argv = [a for a in p.argv if a != "--reprovision"]

    # ------------------------------------------------------------------ admin REST

    def admin_get(self, path: str, *, broker: int | None = None, timeout: float = 5.0) -> Any:
        """GET ``path`` from the first live broker (or ``broker``), JSON-decoded."""
        order = [broker] if broker is not None else [i for i, p in enumerate(self.brokers) if p.alive]
        last: Exception | None = None
        for i in order:
            try:
                with urllib.request.urlopen(self.admin_urls[i] + path, timeout=timeout) as resp:
                    return json.loads(resp.read() or b"null")
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = exc
        raise RuntimeError(f"GET {path} failed on every live broker: {last}")

    def topic_stats(self, topic: str, *, broker: int | None = None) -> Any:
        t = TopicName.parse(topic)
        return self.admin_get(f"/admin/v2/persistent/{t.tenant}/{t.namespace}/{t.local_name}/stats", broker=broker)

    def metrics_text(self, url: str, timeout: float = 5.0) -> str:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return str(resp.read().decode())

    def bookie_metrics_url(self, bookie_id: str) -> str:
        i = self.bookies.index(self.bookie(bookie_id))
        return f"http://127.0.0.1:{self.bookie_http_ports[i]}/metrics"

    def bookie_gauge(self, name: str) -> dict[str, float]:
        """``name``'s samples from every live bookie's ``/metrics``: {bookie id: value}."""
        out: dict[str, float] = {}
        for p in self.bookies:
            if not p.is_ready:
                continue
            try:
                text = self.metrics_text(self.bookie_metrics_url(p.name), timeout=2)
            except (OSError, urllib.error.URLError):
                continue
            for line in text.splitlines():
                if line.startswith(name) and (line[len(name)] in "{ "):
                    out[p.name] = max(out.get(p.name, 0.0), float(line.rsplit(" ", 1)[1]))
        return out

    def granted_lease_ttls(self) -> list[int]:
        """The TTLs (s) etcd granted to the live leases: the session timeout the brokers and
        bookies really run with (``lease_ttl`` is only a request, honoured if the product reads
        ``MAGNETAR_METADATA_LEASE_TTL``)."""

        def post(path: str, body: dict[str, Any]) -> Any:
            req = urllib.request.Request(
                f"http://127.0.0.1:{self.etcd_port}{path}", data=json.dumps(body).encode(), method="POST"
            )
            with urllib.request.urlopen(req, timeout=5) as resp:
                return json.loads(resp.read())

        ttls = []
        for lease in post("/v3/lease/leases", {}).get("leases", []):
            info = post("/v3/lease/timetolive", {"ID": lease["ID"]})
            ttls.append(int(info.get("grantedTTL", 0)))
        return sorted(ttls)

    # ------------------------------------------------------------------ metadata

    @contextlib.asynccontextmanager
    async def metadata(self) -> AsyncIterator[ClusterMetadata]:
        """A direct view of the cluster's etcd metadata (its own session; closed on exit)."""
        store = await EtcdMetadataStore.connect(self.metadata_url, lease_ttl=max(self.lease_ttl, 5.0))
        try:
            yield ClusterMetadata(store)
        finally:
            await store.close()


class ClusterMetadata:
    """Read helpers over the cluster's metadata tree (DESIGN.md §5)."""

    def __init__(self, store: EtcdMetadataStore) -> None:
        self.store = store

    async def ledger(self, ledger_id: int) -> LedgerMetadata | None:
        found = await self.store.get(f"/ledgers/{ledger_id}")
        return decode(found.value) if found is not None else None

    async def ledger_ids(self) -> list[int]:
        return sorted(int(x) for x in await self.store.children("/ledgers") if x.isdigit())

    async def underreplicated(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for name in await self.store.children("/underreplicated"):
            found = await self.store.get(f"/underreplicated/{name}")
            if found is not None and name.isdigit():
                out[int(name)] = found.value
        return out

    async def available_bookies(self) -> list[str]:
        return await self.store.children("/bookies/available")

    async def ownership(self) -> dict[str, str]:
        """Every owned bundle path -> owning broker id."""
        out: dict[str, str] = {}
        for tenant in await self.store.children("/ownership"):
            for ns in await self.store.children(f"/ownership/{tenant}"):
                for bundle in await self.store.children(f"/ownership/{tenant}/{ns}"):
                    path = f"/ownership/{tenant}/{ns}/{bundle}"
                    found = await self.store.get(path)
                    if found is not None:
                        out[path] = str(json.loads(found.value)["id"])
        return out

    async def topic_owner(self, topic: str, bundles: int = 4) -> str | None:
        """The id (``host:port``) of the broker owning ``topic``'s bundle, or None if unowned."""
        from magnetar.broker.cluster.ownership import bundle_of
        from magnetar.metadata import paths

        t = TopicName.parse(topic)
        found = await self.store.get(paths.ownership(t.tenant, t.namespace, bundle_of(t, bundles)))
        return str(json.loads(found.value)["id"]) if found is not None else None


def two_broker_cluster(tmp_path_factory: Any, name: str) -> Iterator[LocalCluster]:
    """etcd, one bookie (E1/Qw1/Qa1) and two brokers: the smallest cluster with ownership and
    forwarding, for a module-scoped fixture (``yield from two_broker_cluster(tmp_path_factory,
    "name")``). Skips without etcd, and fails instead under ``CI=true``."""
    import pytest

    if shutil.which("etcd") is None:
        reason = "etcd is not installed (apt-get install etcd-server)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    base: Path = tmp_path_factory.mktemp(name)
    with LocalCluster(base, bookies=1, brokers=2, ensemble_size=1, write_quorum=1, ack_quorum=1) as cluster:
        yield cluster
