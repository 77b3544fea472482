"""Pure builders of broker sets: the shared pool and a Tenant's isolated set (DESIGN.md section 6).

A broker set is a ConfigMap, a headless Service (stable pod names for ownership leases and
redirects), a client Service (`<name>:6650` binary protocol, `<name>:8080` admin/HTTP — the
operator's default MAGNETAR_ADMIN_URL points at it), a StatefulSet and a PodDisruptionBudget.

Brokers keep no data, but a StatefulSet still fits: each broker advertises a stable name that
clients are redirected to. The readiness probe is `/ready`, which the broker answers only once it
serves, and the liveness probe is the admin health check.

Why brokers keep the StatefulSet's own RollingUpdate while bookies are rolled by the operator
(rolling.py): Kubernetes' roll already is the right one for brokers. It restarts one pod at a time,
highest ordinal first, and waits for the restarted pod to be Ready before the next — and Ready is
all a broker's health amounts to, since it holds no data another broker might still need. What
makes a broker restart gentle happens inside the broker: on SIGTERM (`magnetar broker` stops on
SIGINT/SIGTERM; tini, the images' PID 1, forwards it) it stops answering `/ready`, leaves the live
set, unloads its topics (sealing their ledgers) and releases its bundles while its listeners still
redirect clients, so the other brokers take the topics over and clients look up again. A bookie's
health, by contrast, is a cluster-wide fact (no ledger under-replicated) that no readiness probe
can express.

Before that SIGTERM, a pre-stop hook drains the broker as Pulsar's `brokers shutdown` does
(`drain_command`): it leaves the live set, unloads every bundle it owns (so the next lookups place
them on the remaining brokers, by load) and then exits. This is what makes scaling in, by hand or
by a HorizontalPodAutoscaler, invisible to clients: they get a reconnect while their broker still
answers, not a refused connection. The hook and the stop must both fit in
terminationGracePeriodSeconds (MAGNETAR_BROKER_TERMINATION_GRACE_SECONDS, the chart's
brokers.terminationGracePeriodSeconds) before the kubelet's SIGKILL. Should the drain fail (an
older broker without the verb), the kubelet goes on to SIGTERM and the stop above still happens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import identity, manifests, transport_tls
from .config import SETTINGS

BINARY_PORT = 6650
HTTP_PORT = 8080
CONFIG_PATH = "/etc/magnetar"
CONFIG_FILE = "broker.yaml"
COMPONENT = "broker"
SET_LABEL = "magnetar.dev/broker-set"
TENANT_LABEL = "magnetar.dev/isolated-tenant"


@dataclass(frozen=True)
class BrokerSet:
    """What one broker set should look like; built from operator settings or a Tenant spec."""

    name: str
    namespace: str
    replicas: int
    image: str
    config: Mapping[str, Any] = field(default_factory=dict)
    resources: Mapping[str, Any] = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    #: The tenant this set alone serves; None for the shared pool.
    isolated_tenant: str | None = None
    #: The pods' securityContext (runAsUser, fsGroup, ...); empty: the image's defaults.
    pod_security_context: Mapping[str, Any] = field(default_factory=dict)
    #: Internal identity (identity.py): the operator's setting unless given; off by default.
    auth: identity.AuthSettings = field(default_factory=lambda: SETTINGS.auth)
    #: TLS from the chart's certificate Secret (transport_tls.py): the operator's setting; off by default.
    tls: transport_tls.TlsSettings = field(default_factory=lambda: SETTINGS.tls)
    #: Seconds the kubelet gives a stopping broker: the pre-stop drain, then the stop on SIGTERM.
    termination_grace: int = field(default_factory=lambda: SETTINGS.broker_termination_grace)


def selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/component": COMPONENT, SET_LABEL: name}


def broker_labels(bs: BrokerSet) -> dict[str, str]:
    extra = {SET_LABEL: bs.name}
    if bs.isolated_tenant:
        extra[TENANT_LABEL] = bs.isolated_tenant
    return manifests.labels(COMPONENT, bs.name, **extra)


def headless_name(name: str) -> str:
    return f"{name}-headless"


def render_broker_config(bs: BrokerSet) -> str:
    defaults: dict[str, Any] = {
        "brokerServicePort": BINARY_PORT,
        "webServicePort": HTTP_PORT,
        "advertisedAddressTemplate": f"{{POD_NAME}}.{headless_name(bs.name)}.{bs.namespace}.svc",
    }
    if bs.isolated_tenant:
        defaults["isolatedTenant"] = bs.isolated_tenant
    defaults.update(identity.broker_config(bs.auth))
    defaults.update(transport_tls.broker_config(bs.tls))
    return manifests.render_config(defaults, bs.config)


def drain_command(bs: BrokerSet) -> list[str]:
    """The pre-stop hook: `magnetar-admin brokers shutdown` against this pod's own web port, over
    loopback (plaintext is served with TLS on too), with the pod's broker token when auth is on."""
    command = ["magnetar-admin", "--admin-url", f"http://127.0.0.1:{HTTP_PORT}"]
    if bs.auth.enabled:
        command += ["--auth-params", f"file://{identity.TOKEN_DIR}/{identity.TOKEN_KEY}"]
    return [*command, "brokers", "shutdown"]


def build_broker_configmap(bs: BrokerSet, owner: Mapping[str, Any] | None = None) -> dict[str, Any]:
    files = {CONFIG_FILE: render_broker_config(bs)}
    return manifests.build_configmap(f"{bs.name}-config", bs.namespace, broker_labels(bs), files, owner)


def _ports(target: bool, tls: transport_tls.TlsSettings | None = None) -> list[dict[str, Any]]:
    ports: list[dict[str, Any]] = [
        {"name": "binary", "port": BINARY_PORT, "protocol": "TCP"},
        {"name": "http", "port": HTTP_PORT, "protocol": "TCP"},
    ]
    ports += [{"name": n, "port": p, "protocol": "TCP"} for n, p in transport_tls.broker_ports(tls or SETTINGS.tls)]
    if target:
        for port in ports:
            port["targetPort"] = port["name"]
    return ports


def build_broker_services(bs: BrokerSet, owner: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The client Service (ready brokers only) and the headless one (every pod, for redirects)."""
    client = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": manifests.metadata(bs.name, bs.namespace, broker_labels(bs), owner),
        "spec": {"type": "ClusterIP", "selector": selector(bs.name), "ports": _ports(True, bs.tls)},
    }
    headless = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": manifests.metadata(headless_name(bs.name), bs.namespace, broker_labels(bs), owner),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector(bs.name),
            "ports": _ports(True, bs.tls),
        },
    }
    return [client, headless]


def build_broker_statefulset(
    bs: BrokerSet, owner: Mapping[str, Any] | None = None, *, config_checksum: str | None = None
) -> dict[str, Any]:
    checksum = config_checksum or manifests.checksum(render_broker_config(bs))
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    if bs.isolated_tenant:
        env.append({"name": "MAGNETAR_ISOLATED_TENANT", "value": bs.isolated_tenant})
    container: dict[str, Any] = {
        "name": COMPONENT,
        "image": bs.image,
        "imagePullPolicy": bs.image_pull_policy,
        "args": ["broker", "--config", f"{CONFIG_PATH}/{CONFIG_FILE}"],
        "ports": [
            {"name": "binary", "containerPort": BINARY_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            *({"name": n, "containerPort": p, "protocol": "TCP"} for n, p in transport_tls.broker_ports(bs.tls)),
        ],
        "env": env,
        "readinessProbe": manifests.http_probe("/ready", "http", initial=5, period=5, failures=3),
        "livenessProbe": manifests.http_probe("/admin/v2/brokers/health", "http", initial=30, period=15, failures=4),
        "lifecycle": {"preStop": {"exec": {"command": drain_command(bs)}}},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_PATH, "readOnly": True}],
    }
    res = manifests.resources(bs.resources)
    if res:
        container["resources"] = res
    pod_spec: dict[str, Any] = {
        # Long enough for the pre-stop drain and then the stop on SIGTERM.
        "terminationGracePeriodSeconds": bs.termination_grace,
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": f"{bs.name}-config"}}],
        "affinity": manifests.anti_affinity("preferred", selector(bs.name)),
    }
    if bs.pod_security_context:
        pod_spec["securityContext"] = dict(bs.pod_security_context)
    identity.add_mounts(pod_spec, container, bs.auth, "broker")
    transport_tls.add_mount(pod_spec, container, bs.tls)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": manifests.metadata(bs.name, bs.namespace, broker_labels(bs), owner),
        "spec": {
            "replicas": bs.replicas,
            "serviceName": headless_name(bs.name),
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector(bs.name)},
            "template": {
                "metadata": {
                    "labels": broker_labels(bs),
                    "annotations": {manifests.CHECKSUM_ANNOTATION: checksum},
                },
                "spec": pod_spec,
            },
        },
    }


def build_broker_children(
    bs: BrokerSet, *, pdb_api_version: str, owner: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    configmap = build_broker_configmap(bs, owner)
    digest = manifests.checksum(configmap["data"][CONFIG_FILE])
    return [
        configmap,
        *build_broker_services(bs, owner),
        build_broker_statefulset(bs, owner, config_checksum=digest),
        manifests.build_pdb(
            bs.name,
            bs.namespace,
            broker_labels(bs),
            selector(bs.name),
            api_version=pdb_api_version,
            owner=owner,
        ),
    ]


def isolated_set_name(tenant_resource_name: str) -> str:
    return f"magnetar-broker-{tenant_resource_name}"
