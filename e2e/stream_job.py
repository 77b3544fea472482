"""The in-cluster stream check as a Kubernetes Job (the program itself is e2e/clients/stream.py).

The Job runs the Magnetar server image's Python with the script mounted from a ConfigMap, and
reaches the brokers through the broker Service's DNS name, as a user's in-cluster program does.
The test follows its ``PROGRESS`` lines (to kill pods in the middle of the stream) and judges
its ``RESULT`` line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from e2e.cluster import Cluster, wait_for

SCRIPT = Path(__file__).resolve().parent / "clients" / "stream.py"
CONFIGMAP = "e2e-stream-client"


class StreamJob:
    def __init__(
        self, cluster: Cluster, namespace: str, image: str, pull_policy: str, service_url: str, name: str, topic: str
    ) -> None:
        self.cluster, self.namespace, self.name, self.topic = cluster, namespace, name, topic
        self.image, self.pull_policy, self.service_url = image, pull_policy, service_url

    def start(self, messages: int, rate: float) -> StreamJob:
        self.cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": self.namespace},
                "data": {"stream.py": SCRIPT.read_text()},
            }
        )
        args = ["--url", self.service_url, "--topic", self.topic, "--subscription", self.name]
        args += ["--messages", str(messages), "--rate", str(rate)]
        self.cluster.apply(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": {"magnetar.dev/e2e": "stream"}},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "metadata": {"labels": {"magnetar.dev/e2e": "stream"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "securityContext": {"runAsNonRoot": True, "runAsUser": 10000},
                            "containers": [
                                {
                                    "name": "stream",
                                    "image": self.image,
                                    "imagePullPolicy": self.pull_policy,
                                    "command": ["python", "/e2e/stream.py", *args],
                                    "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                                    "volumeMounts": [{"name": "script", "mountPath": "/e2e", "readOnly": True}],
                                }
                            ],
                            "volumes": [{"name": "script", "configMap": {"name": CONFIGMAP}}],
                        },
                    },
                },
            }
        )
        return self

    def log(self) -> str:
        return self.cluster.kubectl("logs", "-n", self.namespace, f"job/{self.name}", check=False)

    def acked(self) -> int:
        """The acknowledged count of the last PROGRESS line (0 before the first)."""
        for line in reversed(self.log().splitlines()):
            if line.startswith("PROGRESS "):
                fields = dict(part.split("=", 1) for part in line.split()[1:])
                return int(fields["acked"])
        return 0

    def wait_acked(self, at_least: int, timeout: float) -> float:
        """Wait until ``at_least`` sends are acknowledged; return when (time.monotonic())."""
        wait_for(
            f"job {self.name}: {at_least} acknowledged sends", lambda: self.acked() >= at_least, timeout, every=0.5
        )
        return time.monotonic()

    def result(self, timeout: float = 600) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            job = self.cluster.get("job", self.name, self.namespace) or {}
            status = job.get("status", {})
            if status.get("failed"):
                raise AssertionError(f"job {self.name} failed:\n{self.log()[-4000:]}")
            return status if status.get("succeeded") else None

        wait_for(f"job {self.name} to finish", finished, timeout, every=2)
        log = self.log()
        for line in reversed(log.splitlines()):
            if line.startswith("RESULT "):
                result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
                result["events"] = [x for x in log.splitlines() if x.startswith("EVENT ")]
                return result
        raise AssertionError(f"job {self.name} printed no RESULT:\n{log[-4000:]}")
