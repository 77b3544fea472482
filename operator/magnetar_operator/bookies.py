"""Pure builders of a BookieEnsemble's children: ConfigMap, headless Service, StatefulSet, PDB.

Why these shapes (DESIGN.md section 6):
- a StatefulSet, because a bookie's identity is its disk: pod `<name>-N` always gets volume
  `data-<name>-N` back, and the bookie's cookie on that disk must match its registration;
- a headless Service, so each bookie has a stable DNS name (`<name>-N.<name>.<ns>.svc`) to
  advertise in the metadata store;
- `podManagementPolicy: Parallel`: bookies do not depend on each other to start, and a whole
  ensemble coming back after an outage should not wait for bookie 0;
- `updateStrategy: OnDelete`: the StatefulSet controller never restarts a bookie by itself; the
  operator deletes one pod at a time, gated on every bookie being Ready and no ledger being
  under-replicated (rolling.py) — a readiness probe cannot say the latter;
- a PodDisruptionBudget of one unavailable, so that a node drain never takes two replicas of the
  same ledger fragment away at once either;
- a config checksum on the pod template, so that a config change rolls the pods;
- the pod securityContext from `spec.podSecurityContext` (or the operator's default): the image
  runs as a non-root user, and `fsGroup` makes the data volume writable for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import identity, manifests, transport_tls
from .config import SETTINGS

BOOKIE_PORT = 3181
HTTP_PORT = 8000
DATA_PATH = "/data"
CONFIG_PATH = "/etc/magnetar"
CONFIG_FILE = "bookie.yaml"
CLAIM_NAME = "data"  # pod N's claim is data-<name>-N
COMPONENT = "bookie"
ENSEMBLE_LABEL = "magnetar.dev/bookie-ensemble"


def selector(name: str) -> dict[str, str]:
    """The immutable StatefulSet selector; also what the PDB and anti-affinity match."""
    return {"app.kubernetes.io/component": COMPONENT, ENSEMBLE_LABEL: name}


def bookie_labels(name: str) -> dict[str, str]:
    return manifests.labels(COMPONENT, name, **{ENSEMBLE_LABEL: name})


def config_name(name: str) -> str:
    return f"{name}-config"


def delete_claim(spec: Mapping[str, Any]) -> bool:
    """spec.storage.deleteClaim: whether a drained bookie's volume claim goes with it (default yes)."""
    return bool((spec.get("storage") or {}).get("deleteClaim", True))


def _auth(auth: identity.AuthSettings | None) -> identity.AuthSettings:
    """``auth`` None: the operator's setting (identity.py; off unless MAGNETAR_AUTH_ENABLED)."""
    return SETTINGS.auth if auth is None else auth


def _tls(tls: transport_tls.TlsSettings | None) -> transport_tls.TlsSettings:
    """``tls`` None: the operator's setting (transport_tls.py; off unless MAGNETAR_TLS_SECRET)."""
    return SETTINGS.tls if tls is None else tls


def render_bookie_config(
    spec: Mapping[str, Any],
    name: str,
    namespace: str,
    auth: identity.AuthSettings | None = None,
    tls: transport_tls.TlsSettings | None = None,
) -> str:
    defaults: dict[str, Any] = {
        "bookiePort": BOOKIE_PORT,
        "httpPort": HTTP_PORT,
        "dataDir": f"{DATA_PATH}/ledgers",
        "advertisedAddressTemplate": f"{{POD_NAME}}.{name}.{namespace}.svc",
    }
    defaults.update(identity.bookie_config(_auth(auth)))
    defaults.update(transport_tls.bookie_config(_tls(tls)))
    return manifests.render_config(defaults, spec.get("config"))


def build_bookie_configmap(
    spec: Mapping[str, Any],
    name: str,
    namespace: str,
    owner: Mapping[str, Any] | None = None,
    auth: identity.AuthSettings | None = None,
    tls: transport_tls.TlsSettings | None = None,
) -> dict[str, Any]:
    files = {CONFIG_FILE: render_bookie_config(spec, name, namespace, auth, tls)}
    return manifests.build_configmap(config_name(name), namespace, bookie_labels(name), files, owner)


def build_bookie_service(name: str, namespace: str, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Headless; publishes not-ready addresses so a recovering bookie is reachable by its peers."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": manifests.metadata(name, namespace, bookie_labels(name), owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector(name),
            "ports": [
                {"name": "bookie", "port": BOOKIE_PORT, "targetPort": "bookie", "protocol": "TCP"},
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def build_bookie_statefulset(
    spec: Mapping[str, Any],
    name: str,
    namespace: str,
    *,
    owner: Mapping[str, Any] | None = None,
    replicas: int | None = None,
    config_checksum: str | None = None,
    default_security_context: Mapping[str, Any] | None = None,
    auth: identity.AuthSettings | None = None,
    tls: transport_tls.TlsSettings | None = None,
) -> dict[str, Any]:
    """The bookie StatefulSet. `replicas` overrides spec.replicas (used to refuse scale-down);
    `default_security_context` is the pods' securityContext when spec.podSecurityContext is unset."""
    storage = spec["storage"]
    checksum = config_checksum or manifests.checksum(render_bookie_config(spec, name, namespace, auth, tls))
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": spec["image"],
        "imagePullPolicy": spec.get("imagePullPolicy", "IfNotPresent"),
        "args": ["bookie", "--config", f"{CONFIG_PATH}/{CONFIG_FILE}"],
        "ports": [
            {"name": "bookie", "containerPort": BOOKIE_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        ],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "MAGNETAR_BOOKIE_ADVERTISED_ADDRESS", "value": f"$(POD_NAME).{name}.{namespace}.svc"},
        ],
        "readinessProbe": manifests.http_probe("/ready", "http", initial=5, period=10, failures=3),
        "livenessProbe": manifests.http_probe("/health", "http", initial=30, period=15, failures=6),
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_PATH},
            {"name": "config", "mountPath": CONFIG_PATH, "readOnly": True},
        ],
    }
    res = manifests.resources(spec.get("resources"))
    if res:
        container["resources"] = res
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 60,
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": config_name(name)}}],
    }
    security = spec.get("podSecurityContext") or default_security_context
    if security:
        pod_spec["securityContext"] = dict(security)
    identity.add_mounts(pod_spec, container, _auth(auth), "bookie")
    transport_tls.add_mount(pod_spec, container, _tls(tls))
    affinity = manifests.anti_affinity(spec.get("antiAffinity", "preferred"), selector(name))
    if affinity:
        pod_spec["affinity"] = affinity
    claim: dict[str, Any] = {
        "metadata": {"name": CLAIM_NAME, "labels": bookie_labels(name)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage["size"]}},
        },
    }
    if storage.get("storageClassName"):
        claim["spec"]["storageClassName"] = storage["storageClassName"]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": manifests.metadata(name, namespace, bookie_labels(name), owner),
        "spec": {
            "replicas": spec["replicas"] if replicas is None else replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": selector(name)},
            "template": {
                "metadata": {
                    "labels": bookie_labels(name),
                    "annotations": {manifests.CHECKSUM_ANNOTATION: checksum},
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [claim],
        },
    }


def build_bookie_pdb(
    name: str, namespace: str, *, api_version: str, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    return manifests.build_pdb(
        name, namespace, bookie_labels(name), selector(name), api_version=api_version, owner=owner
    )


def build_bookie_children(
    spec: Mapping[str, Any],
    name: str,
    namespace: str,
    *,
    pdb_api_version: str,
    owner: Mapping[str, Any] | None = None,
    replicas: int | None = None,
    default_security_context: Mapping[str, Any] | None = None,
    auth: identity.AuthSettings | None = None,
    tls: transport_tls.TlsSettings | None = None,
) -> list[dict[str, Any]]:
    """All children in the order they should be applied (config before the pods that mount it)."""
    configmap = build_bookie_configmap(spec, name, namespace, owner, auth, tls)
    digest = manifests.checksum(configmap["data"][CONFIG_FILE])
    return [
        configmap,
        build_bookie_service(name, namespace, owner),
        build_bookie_statefulset(
            spec,
            name,
            namespace,
            owner=owner,
            replicas=replicas,
            config_checksum=digest,
            default_security_context=default_security_context,
            auth=auth,
            tls=tls,
        ),
        build_bookie_pdb(name, namespace, api_version=pdb_api_version, owner=owner),
    ]
