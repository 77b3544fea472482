"""The Kubernetes calls of the Spark part: custom objects (SparkApplications, their scheduled kind,
our Topic/Namespace/Tenant), batch Jobs, pods and their logs, and the checkpoint claims of
streaming exports. Blocking; call from threads.

Why not kube.Kube: that wrapper is create-or-patch of children with a fixed set of mutable
fields. Here the operator also writes other controllers' status subresources (the SparkApplication
status the Go operator would write) and its own resources' status from outside a kopf handler,
both as read-modify-write guarded by resourceVersion, and lists across all namespaces.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from magnetar_operator.kube import connect_api_client

MERGE = "application/merge-patch+json"


def _plural(kind: str) -> str:
    return kind.lower() + "s"


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class SparkKube:
    """Thin typed-as-dicts access; NotFound is None or False, never an exception."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        self._custom: Any = k8s_client.CustomObjectsApi(api_client)
        self._batch: Any = k8s_client.BatchV1Api(api_client)
        self._core: Any = k8s_client.CoreV1Api(api_client)
        self._api: Any = api_client

    @classmethod
    def connect(cls) -> SparkKube:
        return cls(connect_api_client())

    # ------------------------------------------------------------------ custom objects
    def list_objects(self, api_version: str, kind: str, selector: str) -> list[dict[str, Any]]:
        """Objects of `kind` in every namespace with labels matching `selector`; [] when the
        kind is not served (the spark-operator CRDs are not installed)."""
        group, version = _group_version(api_version)
        try:
            found = self._custom.list_cluster_custom_object(group, version, _plural(kind), label_selector=selector)
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return [dict(item) for item in found.get("items") or []]

    def get_object(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        group, version = _group_version(api_version)
        try:
            return dict(self._custom.get_namespaced_custom_object(group, version, namespace, _plural(kind), name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_object(self, body: Mapping[str, Any]) -> dict[str, Any]:
        group, version = _group_version(body["apiVersion"])
        namespace = body["metadata"]["namespace"]
        created = self._custom.create_namespaced_custom_object(group, version, namespace, _plural(body["kind"]), body)
        return dict(created)

    def patch_object(
        self, api_version: str, kind: str, name: str, namespace: str, patch: Mapping[str, Any], *, status: bool = False
    ) -> None:
        """A merge patch (of the status subresource with status=True); a resourceVersion in
        `patch.metadata` makes it conditional (409 when the object changed meanwhile)."""
        group, version = _group_version(api_version)
        call = (
            self._custom.patch_namespaced_custom_object_status
            if status
            else self._custom.patch_namespaced_custom_object
        )
        call(group, version, namespace, _plural(kind), name, dict(patch), _content_type=MERGE)

    def delete_object(self, api_version: str, kind: str, name: str, namespace: str) -> bool:
        group, version = _group_version(api_version)
        try:
            self._custom.delete_namespaced_custom_object(
                group, version, namespace, _plural(kind), name, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # ------------------------------------------------------------------ jobs and pods
    def get_job(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            job = self._batch.read_namespaced_job(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(self._api.sanitize_for_serialization(job))

    def create_job(self, body: Mapping[str, Any]) -> bool:
        """False when a Job of that name exists already (made by an earlier pass)."""
        try:
            self._batch.create_namespaced_job(body["metadata"]["namespace"], dict(body))
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def delete_job(self, name: str, namespace: str) -> bool:
        """Delete the Job and (in the background) its pods; False when it was gone already."""
        try:
            self._batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def job_pods(self, job_name: str, namespace: str) -> list[dict[str, Any]]:
        pods = self._core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}")
        return [dict(self._api.sanitize_for_serialization(p)) for p in pods.items]

    def get_pod(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            pod = self._core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(self._api.sanitize_for_serialization(pod))

    # ------------------------------------------------------------------ claims
    def ensure_claim(self, body: Mapping[str, Any]) -> bool:
        """Create the claim, or bring its annotations up to date (a claim's size and class cannot
        change in place); True when something was written."""
        meta = body["metadata"]
        try:
            live = self._core.read_namespaced_persistent_volume_claim(meta["name"], meta["namespace"])
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._core.create_namespaced_persistent_volume_claim(meta["namespace"], dict(body))
            return True
        annotations = dict(live.metadata.annotations or {})
        wanted = dict(meta.get("annotations") or {})
        if all(annotations.get(k) == v for k, v in wanted.items()):
            return False
        self._core.patch_namespaced_persistent_volume_claim(
            meta["name"], meta["namespace"], {"metadata": {"annotations": wanted}}
        )
        return True

    def get_claim(self, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            claim = self._core.read_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(self._api.sanitize_for_serialization(claim))

    def delete_claim(self, name: str, namespace: str) -> bool:
        try:
            self._core.delete_namespaced_persistent_volume_claim(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pod_log(self, name: str, namespace: str, *, tail_lines: int = 1000) -> str | None:
        """The last lines of the pod's log; None when there is no pod or no log (no kubelet)."""
        try:
            return str(self._core.read_namespaced_pod_log(name, namespace, tail_lines=tail_lines))
        except ApiException as exc:
            if exc.status in (400, 404):
                return None
            raise


_client: SparkKube | None = None


def spark_kube() -> SparkKube:
    """The process's client, made on first use (in-cluster credentials or KUBECONFIG)."""
    global _client
    if _client is None:
        _client = SparkKube.connect()
    return _client
