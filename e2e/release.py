"""The installed release under test: its names, the values this environment needs, its waits."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from tests.operator.harness import ROOT, condition

from e2e.cluster import Cluster, CommandFailed, pod_ready, wait_for

NAMESPACE = "magnetar"
RELEASE = "magnetar"
CHART = ROOT / "charts" / "magnetar"


@dataclass(frozen=True)
class Images:
    tag: str
    #: ``localhost/name=/path/archive.oci.tar ...`` as scripts/k8s/up.sh takes them.
    archives: str


@dataclass
class Release:
    cluster: Cluster
    images: Images
    namespace: str = NAMESPACE
    name: str = RELEASE

    @property
    def image(self) -> str:
        return f"localhost/magnetar:{self.images.tag}"

    @property
    def service_url(self) -> str:
        return f"magnetar://{self.name}-broker.{self.namespace}.svc:6650"

    def base_values(self) -> list[str]:
        """What this environment needs on top of the chart's defaults (kept on every upgrade)."""
        values = [
            f"image.tag={self.images.tag}",
            "image.pullPolicy=" + ("Never" if self.cluster.pods_reachable else "IfNotPresent"),
            "bookies.storage.size=1Gi",
            "etcd.storage.size=1Gi",
            "operator.reconcileInterval=5",
        ]
        if self.cluster.storage_class:
            values += [
                f"bookies.storage.storageClassName={self.cluster.storage_class}",
                f"etcd.storage.storageClassName={self.cluster.storage_class}",
            ]
        return values

    def helm_upgrade(self, *sets: str, install: bool = False, wait: bool = True) -> str:
        """`helm upgrade --reuse-values` (or the first install) with this environment's values.

        ``wait=False`` where a bookie is meant not to get Ready: helm 4's ``--wait`` also waits for
        the BookieEnsemble's Ready condition (the test then waits on what it expects itself)."""
        args = ["upgrade", self.name, str(CHART), "-n", self.namespace]
        if install:
            args += ["--install", "--create-namespace"]
        else:
            args += ["--reuse-values"]
        for value in [*self.base_values(), *sets]:
            args += ["--set", value]
        if not wait:
            return self.cluster.helm(*args)
        try:
            return self.cluster.helm(*args, "--wait", "--timeout", "10m")
        except (CommandFailed, subprocess.TimeoutExpired) as exc:
            raise AssertionError(f"{exc}\n{self.cluster.diagnose(self.namespace)}") from exc

    def bookie_pods(self) -> list[dict[str, Any]]:
        return self.cluster.pods(self.namespace, f"magnetar.dev/bookie-ensemble={self.name}-bookie")

    def broker_pods(self) -> list[dict[str, Any]]:
        return self.cluster.pods(self.namespace, f"magnetar.dev/broker-set={self.name}-broker")

    def wait_ready(self, bookies: int, brokers: int, timeout: float = 600) -> None:
        def ready() -> bool:
            be = self.cluster.get("bookieensemble", f"{self.name}-bookie", self.namespace)
            bk = [p for p in self.bookie_pods() if pod_ready(p)]
            br = [p for p in self.broker_pods() if pod_ready(p)]
            return condition(be).get("status") == "True" and len(bk) == bookies and len(br) == brokers

        try:
            wait_for(f"{bookies} bookies and {brokers} brokers Ready", ready, timeout, every=2)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.cluster.diagnose(self.namespace)}") from exc
