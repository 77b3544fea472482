"""Settings of the Spark jobs the operator launches (topic exports, retention sweeps).

Why a module of its own beside config.py: these settings only shape SparkApplication documents and
the `job` submitter, and the chart's `spark.*` values reach them as MAGNETAR_SPARK_* environment
variables, the way the broker settings reach config.py. Read once at import time, like SETTINGS.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

#: SparkApplications run by the operator itself (a Job doing spark-submit per application).
SUBMITTER_JOB = "job"
#: SparkApplications run by the kubeflow spark-operator (installed separately).
SUBMITTER_OPERATOR = "operator"


def _json(name: str, default: Any) -> Any:
    raw = os.environ.get(name)
    return json.loads(raw) if raw else default


@dataclass(frozen=True)
class SparkSettings:
    submitter: str = SUBMITTER_JOB
    image: str = "localhost/magnetar-spark:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    service_account: str = "magnetar-spark"
    spark_version: str = "4.3.0"
    #: The job entry point inside the image (the venv of images/Containerfile).
    main_application_file: str = "local:///opt/magnetar/lib/python3.11/site-packages/magnetar/jobs/main.py"
    #: {cores, coreRequest, memory} of the driver and of each executor.
    driver: dict[str, Any] = field(default_factory=lambda: {"cores": 1, "coreRequest": "100m", "memory": "512m"})
    executor: dict[str, Any] = field(default_factory=lambda: {"cores": 1, "coreRequest": "100m", "memory": "512m"})
    #: Kubernetes volumes and the mounts of driver and executors (a file:// target on a PVC).
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)
    #: Seconds between passes of the `job` submitter and of the status mirroring.
    poll_interval: float = 10.0
    #: Runs of a ScheduledSparkApplication kept when it does not say (the spark-operator's default).
    run_history_limit: int = 1

    @property
    def job_mode(self) -> bool:
        return self.submitter == SUBMITTER_JOB

    @classmethod
    def from_env(cls) -> SparkSettings:
        defaults = cls()
        submitter = os.environ.get("MAGNETAR_SPARK_SUBMITTER") or SUBMITTER_JOB
        if submitter not in (SUBMITTER_JOB, SUBMITTER_OPERATOR):
            raise ValueError(f"MAGNETAR_SPARK_SUBMITTER must be job or operator, not {submitter!r}")
        return cls(
            submitter=submitter,
            image=os.environ.get("MAGNETAR_SPARK_IMAGE") or defaults.image,
            image_pull_policy=os.environ.get("MAGNETAR_IMAGE_PULL_POLICY") or defaults.image_pull_policy,
            service_account=os.environ.get("MAGNETAR_SPARK_SERVICE_ACCOUNT") or defaults.service_account,
            driver={**defaults.driver, **_json("MAGNETAR_SPARK_DRIVER", {})},
            executor={**defaults.executor, **_json("MAGNETAR_SPARK_EXECUTOR", {})},
            volumes=list(_json("MAGNETAR_SPARK_VOLUMES", [])),
            volume_mounts=list(_json("MAGNETAR_SPARK_VOLUME_MOUNTS", [])),
            poll_interval=float(os.environ.get("MAGNETAR_SPARK_POLL_INTERVAL") or defaults.poll_interval),
        )


SPARK = SparkSettings.from_env()
