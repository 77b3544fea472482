"""Create-or-patch of child objects through the Kubernetes API (blocking; call from threads).

Why not server-side apply: it is beta on Kubernetes 1.20, which is what the test harness runs,
and its conflict rules differ between versions. Instead each child is read, created when absent,
and otherwise merge-patched with only the fields that may change after creation (a StatefulSet's
replicas, template and update strategy; a Service's ports and selector; ...). The patch is skipped
when the live object already contains everything we want, so a steady state causes no writes:
no new resourceVersion, no rollout, and an operator restart repeats nothing.

Every handler is async, so the handlers and the broker-pool loop call in via asyncio.to_thread.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal

from kubernetes import client as k8s_client
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import load_incluster_config
from kubernetes.config.kube_config import load_kube_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from .manifests import choose_pdb_api_version

Outcome = Literal["created", "updated", "unchanged"]

# Per kind: the top-level keys of `spec` that may be patched after creation, or None for `data`.
_MUTABLE_SPEC: dict[str, tuple[str, ...]] = {
    "StatefulSet": ("replicas", "template", "updateStrategy"),
    "Service": ("ports", "selector", "publishNotReadyAddresses"),
    "PodDisruptionBudget": ("maxUnavailable", "selector"),
}


def contains(want: Any, have: Any) -> bool:
    """Whether `have` already holds all of `want`: dicts by key, lists item by item.

    The API server adds defaults (a container's terminationMessagePath, a probe's scheme, ...)
    that we never send; they must not count as a difference.
    """
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(contains(v, have.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(contains, want, have))
    return bool(want == have)


def mutable_part(desired: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a desired child that a merge patch may change on a live object."""
    meta = desired["metadata"]
    patch: dict[str, Any] = {
        "metadata": {k: meta[k] for k in ("labels", "annotations", "ownerReferences") if k in meta}
    }
    kind = desired["kind"]
    if kind == "ConfigMap":
        patch["data"] = desired.get("data", {})
    elif kind in _MUTABLE_SPEC:
        spec = desired.get("spec", {})
        patch["spec"] = {k: spec[k] for k in _MUTABLE_SPEC[kind] if k in spec}
        strategy = patch["spec"].get("updateStrategy")
        if kind == "StatefulSet" and strategy is not None and strategy.get("type") == "OnDelete":
            # A StatefulSet made before bookies were rolled by the operator has
            # rollingUpdate: {partition: 0}, which OnDelete forbids: the merge patch removes it.
            patch["spec"]["updateStrategy"] = {**strategy, "rollingUpdate": None}
    return patch


def connect_api_client() -> Any:
    """An API client with in-cluster credentials when running in a pod, else the kubeconfig
    (KUBECONFIG)."""
    try:
        load_incluster_config()  # type: ignore[no-untyped-call]
    except ConfigException:
        load_kube_config()  # type: ignore[no-untyped-call]
    return k8s_client.ApiClient()


class Kube:
    """A thin, thread-safe wrapper over the dynamic client for the few kinds the operator owns."""

    def __init__(self, api_client: k8s_client.ApiClient) -> None:
        # The kubernetes package ships py.typed but leaves these untyped: hence the ignores.
        self._dyn: Any = DynamicClient(api_client)  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str], Any] = {}
        self._pdb_version: str | None = None

    @classmethod
    def connect(cls) -> Kube:
        return cls(connect_api_client())

    def _resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        with self._lock:
            if key not in self._resources:
                self._resources[key] = self._dyn.resources.get(api_version=api_version, kind=kind)
            return self._resources[key]

    def pdb_api_version(self) -> str:
        """policy/v1 or policy/v1beta1, whichever this API server serves (asked once)."""
        if self._pdb_version is None:
            groups = k8s_client.ApisApi(self._dyn.client).get_api_versions().groups
            served = [v.group_version for g in groups if g.name == "policy" for v in g.versions]
            self._pdb_version = choose_pdb_api_version(served)
        return self._pdb_version

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            obj = self._resource(api_version, kind).get(name=name, namespace=namespace)
        except NotFoundError:
            return None
        return dict(obj.to_dict())

    def apply(self, desired: Mapping[str, Any]) -> Outcome:
        """Create `desired`, or patch its mutable part when the live object differs."""
        api_version, kind = desired["apiVersion"], desired["kind"]
        name, namespace = desired["metadata"]["name"], desired["metadata"]["namespace"]
        resource = self._resource(api_version, kind)
        live = self.get(api_version, kind, name, namespace)
        if live is None:
            try:
                resource.create(body=dict(desired), namespace=namespace)
                return "created"
            except ConflictError:  # created concurrently (the drift timer and a handler): patch it
                live = self.get(api_version, kind, name, namespace) or {}
        patch = mutable_part(desired)
        if contains(patch, live):
            return "unchanged"
        resource.patch(body=patch, name=name, namespace=namespace, content_type="application/merge-patch+json")
        return "updated"

    def patch_status(self, api_version: str, kind: str, name: str, namespace: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the status subresource (lists such as ``conditions`` are replaced whole);
        False when the object is gone."""
        try:
            self._resource(api_version, kind).status.patch(
                body={"status": dict(status)},
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return False
        return True

    def select(self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        """The objects of one kind in `namespace` whose labels include all of `selector`."""
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        found = self._resource(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        return [dict(item) for item in found.to_dict().get("items") or []]

    def delete_pod(self, name: str, namespace: str, uid: str) -> bool:
        """Delete the pod `name` only if it still is the one with `uid` (not a successor of the same
        name); False when it is gone or was replaced. The pod keeps its grace period."""
        try:
            self._resource("v1", "Pod").delete(name=name, namespace=namespace, body={"preconditions": {"uid": uid}})
        except (NotFoundError, ConflictError):
            return False
        return True

    def delete(self, api_version: str, kind: str, name: str, namespace: str) -> bool:
        """Delete with background propagation; False when it was already gone."""
        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Background"}
            )
        except NotFoundError:
            return False
        return True
