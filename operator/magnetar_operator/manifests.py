"""Pieces shared by every child manifest: labels, owner references, config files and checksums,
PodDisruptionBudgets and anti-affinity.

Why pure functions returning plain dicts: a manifest is data, so the tests can assert on it
without a cluster, and the handlers only have to create-or-patch what comes back. Nothing here
reads the environment or talks to an API server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

MANAGED_BY = "magnetar-operator"
CHECKSUM_ANNOTATION = "magnetar.dev/config-checksum"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"


def labels(component: str, instance: str, **extra: str) -> dict[str, str]:
    """The recommended app.kubernetes.io labels, plus ours; children and pods both carry them."""
    out = {
        "app.kubernetes.io/name": "magnetar",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/managed-by": MANAGED_BY,
    }
    out.update(extra)
    return out


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    """A reference to `owner`, so the garbage collector deletes children with it.

    We build it ourselves rather than calling kopf.adopt(), which would also copy the owner's
    labels onto the children — surprising for users who label their custom resources. A
    controller reference (the default: our custom resources control their children) also blocks
    the owner's foreground deletion until the children are gone; a plain one (`controller=False`,
    the operator's Deployment owning the broker pool) only ties their lifetimes together, and
    needs no permission on the owner's finalizers.
    """
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": controller,
    }


def metadata(
    name: str,
    namespace: str,
    lbls: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(lbls)}
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner_reference(owner)]
    return meta


def render_config(defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> str:
    """One YAML config file: our defaults, then the user's settings on top, keys sorted.

    Sorted keys make the text, and so the checksum, independent of the order users write them in.
    """
    merged = dict(defaults)
    merged.update(overrides or {})
    return str(yaml.safe_dump(merged, sort_keys=True, default_flow_style=False))


def checksum(*parts: str) -> str:
    """SHA-256 of the config text; as a pod-template annotation it rolls the pods when it changes."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def build_configmap(
    name: str,
    namespace: str,
    lbls: Mapping[str, str],
    files: Mapping[str, str],
    owner: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, namespace, lbls, owner),
        "data": dict(files),
    }


def choose_pdb_api_version(served_versions: Iterable[str]) -> str:
    """policy/v1 where served (Kubernetes >= 1.21), else policy/v1beta1 (1.20 and older)."""
    served = set(served_versions)
    if "policy/v1" in served or "v1" in served:
        return "policy/v1"
    return "policy/v1beta1"


def build_pdb(
    name: str,
    namespace: str,
    lbls: Mapping[str, str],
    selector: Mapping[str, str],
    *,
    api_version: str,
    owner: Mapping[str, Any] | None = None,
    max_unavailable: int = 1,
) -> dict[str, Any]:
    """At most `max_unavailable` pods voluntarily down: a drain never takes two bookies at once."""
    return {
        "apiVersion": api_version,
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name, namespace, lbls, owner),
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": dict(selector)}},
    }


def anti_affinity(mode: str, selector: Mapping[str, str]) -> dict[str, Any] | None:
    """Spread pods over nodes: `required` refuses to co-locate, `preferred` avoids it, `none` off."""
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": HOSTNAME_TOPOLOGY}
    if mode == "required":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if mode == "preferred":
        return {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
            }
        }
    return None


def http_probe(path: str, port: str, *, initial: int, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "initialDelaySeconds": initial,
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def resources(spec_resources: Mapping[str, Any] | None) -> dict[str, Any]:
    """Requests and limits as given; quantities are passed through as strings."""
    out: dict[str, Any] = {}
    for key in ("requests", "limits"):
        values = (spec_resources or {}).get(key)
        if values:
            out[key] = {k: str(v) for k, v in values.items()}
    return out
