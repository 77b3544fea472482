"""TLS for broker and bookie pods from the chart's certificate Secret (transport_tls.py).

The builders, without a cluster: with TLS on, broker pods mount the Secret and open the TLS ports
(container and Services) with Pulsar's keys in their config, bookie pods mount it and speak only
TLS; with it off nothing changes. On a real API server (tests/operator conftest's control plane):
the Secret is copied into another namespace, and copied again when the source is renewed.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
import yaml
from kubernetes import config as k8s_config
from tests.operator.harness import ControlPlane
from tests.operator.test_spark_apps import SETTINGS, TOPIC

from magnetar_operator import bookies, brokers, spark_submitter, transport_tls
from magnetar_operator.identity import AuthSettings
from magnetar_operator.kube import Kube
from magnetar_operator.spark_apps import EXPORT_KIND, SPEC_HASH, build_application
from magnetar_operator.transport_tls import TlsSettings

ON = TlsSettings("magnetar-tls")
OFF = TlsSettings()
SPEC: dict[str, Any] = {"replicas": 3, "image": "magnetar:test", "storage": {"size": "1Gi"}}


def _broker_set(tls: TlsSettings) -> brokers.BrokerSet:
    return brokers.BrokerSet(name="magnetar-broker", namespace="m", replicas=2, image="x", auth=AuthSettings(), tls=tls)


def _pod(sts: dict[str, Any]) -> dict[str, Any]:
    return dict(sts["spec"]["template"]["spec"])


def test_broker_pods_mount_the_certificate_and_open_the_tls_ports() -> None:
    bs = _broker_set(ON)
    config = yaml.safe_load(brokers.render_broker_config(bs))
    assert {k: config[k] for k in transport_tls.broker_config(ON)} == {
        "brokerServicePortTls": 6651,
        "webServicePortTls": 8443,
        "tlsCertificateFilePath": "/etc/magnetar/tls/tls.crt",
        "tlsKeyFilePath": "/etc/magnetar/tls/tls.key",
        "tlsTrustCertsFilePath": "/etc/magnetar/tls/ca.crt",
        "bookkeeperTLSTrustCertsFilePath": "/etc/magnetar/tls/ca.crt",
    }
    assert (config["brokerServicePort"], config["webServicePort"]) == (6650, 8080)  # plaintext stays
    pod = _pod(brokers.build_broker_statefulset(bs))
    assert {"name": "tls", "secret": {"secretName": "magnetar-tls", "defaultMode": 0o444}} in pod["volumes"]
    container = pod["containers"][0]
    assert {"name": "tls", "mountPath": "/etc/magnetar/tls", "readOnly": True} in container["volumeMounts"]
    assert [p["containerPort"] for p in container["ports"]] == [6650, 8080, 6651, 8443]
    for service in brokers.build_broker_services(bs):
        assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
            ("binary", 6650, "binary"),
            ("http", 8080, "http"),
            ("binary-tls", 6651, "binary-tls"),
            ("https", 8443, "https"),
        ]


def test_bookie_pods_mount_the_certificate_and_speak_only_tls() -> None:
    config = yaml.safe_load(bookies.render_bookie_config(SPEC, "bk", "d", AuthSettings(), ON))
    assert config["tlsEnabled"] == "true"
    assert (config["tlsCertificateFilePath"], config["tlsKeyFilePath"]) == (
        "/etc/magnetar/tls/tls.crt",
        "/etc/magnetar/tls/tls.key",
    )
    assert config["bookkeeperTLSTrustCertsFilePath"] == "/etc/magnetar/tls/ca.crt"
    pod = _pod(bookies.build_bookie_statefulset(SPEC, "bk", "d", auth=AuthSettings(), tls=ON))
    assert {"name": "tls", "secret": {"secretName": "magnetar-tls", "defaultMode": 0o444}} in pod["volumes"]


def test_user_config_still_wins_over_the_tls_defaults() -> None:
    spec = {**SPEC, "config": {"tlsEnabled": "false"}}
    assert yaml.safe_load(bookies.render_bookie_config(spec, "bk", "d", AuthSettings(), ON))["tlsEnabled"] == "false"


def test_tls_off_changes_nothing() -> None:
    off = brokers.build_broker_children(_broker_set(OFF), pdb_api_version="policy/v1")
    default = brokers.BrokerSet(name="magnetar-broker", namespace="m", replicas=2, image="x", auth=AuthSettings())
    assert off == brokers.build_broker_children(default, pdb_api_version="policy/v1")
    assert "6651" not in json.dumps(off) and "/etc/magnetar/tls" not in json.dumps(off)
    assert "tls" not in bookies.render_bookie_config(SPEC, "bk", "d", AuthSettings(), OFF).lower()
    assert bookies.build_bookie_statefulset(SPEC, "bk", "d", auth=AuthSettings(), tls=OFF) == (
        bookies.build_bookie_statefulset(SPEC, "bk", "d", auth=AuthSettings())
    )


def test_spark_applications_get_the_ca_and_its_path_never_the_key() -> None:
    env, secrets = transport_tls.spark_env(ON), transport_tls.spark_secrets(ON)
    app = build_application(TOPIC, EXPORT_KIND, ["export"], {"target": "file:///x"}, SETTINGS, env, secrets)
    app["metadata"]["uid"] = "u1"  # the API server's, once the application exists
    trust = {"name": "MAGNETAR_TLS_TRUST_CERTS_FILE", "value": "/etc/magnetar/tls/ca.crt"}
    for part in ("driver", "executor"):
        assert app["spec"][part]["env"] == [trust]
        assert app["spec"][part]["secrets"] == [
            {"name": "magnetar-tls-ca", "path": "/etc/magnetar/tls", "secretType": "Generic"}
        ]
    plain = build_application(TOPIC, EXPORT_KIND, ["export"], {"target": "file:///x"}, SETTINGS)
    assert app["metadata"]["annotations"][SPEC_HASH] != plain["metadata"]["annotations"][SPEC_HASH]
    command = spark_submitter.submit_command(app)
    assert "spark.kubernetes.executor.secrets.magnetar-tls-ca=/etc/magnetar/tls" in command
    assert "spark.executorEnv.MAGNETAR_TLS_TRUST_CERTS_FILE=/etc/magnetar/tls/ca.crt" in command
    pod = spark_submitter.build_submit_job(app)["spec"]["template"]["spec"]
    assert {"name": "secret-0", "secret": {"secretName": "magnetar-tls-ca"}} in pod["volumes"]
    container = pod["containers"][0]
    assert {"name": "secret-0", "mountPath": "/etc/magnetar/tls", "readOnly": True} in container["volumeMounts"]
    assert trust in container["env"]
    assert transport_tls.spark_env(OFF) == [] and transport_tls.spark_secrets(OFF) == []


def _tls_secret(name: str, namespace: str, cert: bytes) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"tls.crt": b64(cert), "tls.key": b64(b"key"), "ca.crt": b64(b"ca"), "extra": b64(b"not copied")},
    }


@pytest.mark.k8s
def test_the_certificate_secret_is_copied_and_renewed(crds: ControlPlane, ns: str) -> None:
    control_plane, source, target = crds, ns, f"tls-dst-{uuid.uuid4().hex[:6]}"
    control_plane.kubectl("create", "namespace", target)
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(_tls_secret("magnetar-tls", source, b"cert-1")))
    api = k8s_config.new_client_from_config(config_file=str(control_plane.kubeconfig))  # type: ignore[no-untyped-call]
    kube = Kube(api)

    def copied() -> dict[str, Any]:
        secret = control_plane.get("secret", "magnetar-tls", target)
        assert secret is not None
        return {k: base64.b64decode(v) for k, v in secret["data"].items()}

    transport_tls.ensure_copy(kube, source, target, ON)
    assert copied() == {"tls.crt": b"cert-1", "tls.key": b"key", "ca.crt": b"ca"}
    # cert-manager renews the source in place: the next pass copies the new certificate.
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(_tls_secret("magnetar-tls", source, b"cert-2")))
    transport_tls.ensure_copy(kube, source, target, ON)
    assert copied()["tls.crt"] == b"cert-2"
    # A Spark namespace (the source's own too) gets the CA alone, under its own name.
    for namespace in (target, source):
        transport_tls.ensure_copy(kube, source, namespace, ON, ca_only=True)
        ca = control_plane.get("secret", "magnetar-tls-ca", namespace)
        assert ca is not None and {k: base64.b64decode(v) for k, v in ca["data"].items()} == {"ca.crt": b"ca"}
