"""Helpers of the Helm chart tests: find helm, render the chart, walk the rendered objects.

helm is the binary scripts/k8s/helm.sh installs next to the Kubernetes 1.20 binaries (or one on
PATH). Without it the chart tests skip, except in CI (CI=true), where a missing helm is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.operator.harness import BIN, ROOT

CHART = ROOT / "charts" / "magnetar"
HERE = Path(__file__).resolve().parent
VALUES = HERE / "values"
GOLDEN = HERE / "golden"
RELEASE = "magnetar"
NAMESPACE = "magnetar"
#: The images' default tag: the chart's appVersion.
APP_VERSION = "0.1.0"

Doc = dict[str, Any]


def helm_binary() -> str:
    """The helm to run; skips the test (fails it in CI) when there is none."""
    local = BIN / "helm"
    if os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("helm")
    if found:
        return found
    message = f"helm not found ({local} or PATH); install it with scripts/k8s/helm.sh"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run helm; with check=True a non-zero exit fails the test with helm's output."""
    command = [helm_binary(), *args]
    if kubeconfig is not None:
        command.append(f"--kubeconfig={kubeconfig}")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def template_args(*extra: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[str]:
    return ["template", release, str(CHART), f"--namespace={namespace}", *extra]


def render_text(*extra: str, release: str = RELEASE, namespace: str = NAMESPACE) -> str:
    """`helm template` output, as text (what the golden files hold)."""
    return helm(*template_args(*extra, release=release, namespace=namespace)).stdout


def parse(text: str) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(*extra: str, release: str = RELEASE, namespace: str = NAMESPACE) -> list[Doc]:
    """`helm template` output, as objects."""
    return parse(render_text(*extra, release=release, namespace=namespace))


def find(docs: list[Doc], kind: str, name: str) -> Doc:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    have = sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)
    raise AssertionError(f"no {kind}/{name} in the rendered chart; have {have}")


def pod_spec(doc: Doc) -> Doc | None:
    """The pod spec of a Deployment, StatefulSet or Job, else None."""
    if doc["kind"] in {"Deployment", "StatefulSet", "Job"}:
        return dict(doc["spec"]["template"]["spec"])
    return None


def pod_specs(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    for doc in docs:
        spec = pod_spec(doc)
        if spec is not None:
            yield f"{doc['kind']}/{doc['metadata']['name']}", spec


def env_of(container: Doc) -> dict[str, str]:
    """A container's literal environment variables (not the fieldRef ones)."""
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


def values_file(name: str) -> Path:
    return VALUES / f"{name}.yaml"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
