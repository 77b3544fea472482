"""Internal identity on Kubernetes (operator/magnetar_operator/identity.py).

The builders (no cluster): with auth on, broker and bookie pods mount the signing key and their
own token and get the config keys that turn authentication on; Spark applications get the jobs
token from its Secret; with auth off nothing changes. On a real API server (tests/operator
conftest's control plane): the operator mints one valid token Secret per role from the key Secret,
leaves valid ones alone, mints again when the key changed, copies Secrets into other namespaces
(the key only for bookies), and refuses clearly when the key Secret is missing.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

import jwt
import pytest
import yaml
from kubernetes import config as k8s_config
from tests.operator.harness import ControlPlane
from tests.operator.test_spark_apps import SETTINGS, TOPIC

from magnetar.security.tokens import TokenVerifier
from magnetar_operator import bookies, brokers, identity, spark_submitter
from magnetar_operator.identity import AuthSettings
from magnetar_operator.kube import Kube
from magnetar_operator.spark_apps import EXPORT_KIND, SPEC_HASH, build_application

ON = AuthSettings(enabled=True)
SPEC: dict[str, Any] = {"replicas": 3, "image": "magnetar:test", "storage": {"size": "1Gi"}}


def _container(sts: dict[str, Any]) -> dict[str, Any]:
    return dict(sts["spec"]["template"]["spec"]["containers"][0])


def test_broker_pods_mount_the_key_and_their_token_and_turn_auth_on() -> None:
    bs = brokers.BrokerSet(name="magnetar-broker", namespace="m", replicas=2, image="x", auth=ON)
    sts = brokers.build_broker_statefulset(bs)
    volumes = {
        v["name"]: v["secret"]["secretName"] for v in sts["spec"]["template"]["spec"]["volumes"] if "secret" in v
    }
    assert volumes == {"auth-key": "magnetar-auth-key", "auth-token": "magnetar-token-broker"}
    mounts = {m["name"]: m["mountPath"] for m in _container(sts)["volumeMounts"]}
    assert mounts["auth-key"] == "/etc/magnetar/auth/key" and mounts["auth-token"] == "/etc/magnetar/auth/token"
    config = yaml.safe_load(brokers.render_broker_config(bs))
    assert config["authenticationEnabled"] == "true"
    assert config["tokenSecretKey"] == "file:///etc/magnetar/auth/key/secret.key"
    assert config["superUserRoles"] == "broker,bookie,operator,jobs,admin"
    assert config["bookkeeperClientAuthenticationParameters"] == "file:///etc/magnetar/auth/token/token"
    assert config["brokerClientAuthenticationParameters"] == "file:///etc/magnetar/auth/token/token"


def test_user_broker_config_wins_over_the_identity_keys() -> None:
    bs = brokers.BrokerSet(
        name="b", namespace="m", replicas=1, image="x", auth=ON, config={"superUserRoles": "admin,ops"}
    )
    assert yaml.safe_load(brokers.render_broker_config(bs))["superUserRoles"] == "admin,ops"


def test_bookie_pods_admit_only_internal_roles_and_send_their_token() -> None:
    sts = bookies.build_bookie_statefulset(SPEC, "bk", "data", auth=ON)
    secrets_ = {v["secret"]["secretName"] for v in sts["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert secrets_ == {"magnetar-auth-key", "magnetar-token-bookie"}
    config = yaml.safe_load(bookies.render_bookie_config(SPEC, "bk", "data", ON))
    assert config["superUserRoles"] == "broker,bookie,jobs"
    assert config["bookkeeperClientAuthenticationParameters"] == "file:///etc/magnetar/auth/token/token"
    children = bookies.build_bookie_children(SPEC, "bk", "data", pdb_api_version="policy/v1", auth=ON)
    assert "authenticationEnabled" in children[0]["data"]["bookie.yaml"]


def test_auth_off_changes_nothing() -> None:
    off = AuthSettings()
    bs = brokers.BrokerSet(name="b", namespace="m", replicas=1, image="x", auth=off)
    assert brokers.build_broker_statefulset(bs) == brokers.build_broker_statefulset(
        brokers.BrokerSet(name="b", namespace="m", replicas=1, image="x")
    )
    assert "authentication" not in brokers.render_broker_config(bs)
    assert bookies.build_bookie_statefulset(SPEC, "bk", "d", auth=off) == bookies.build_bookie_statefulset(
        SPEC, "bk", "d"
    )


def test_spark_driver_and_executors_get_the_jobs_token() -> None:
    section = {"target": "file:///x"}
    app = build_application(TOPIC, EXPORT_KIND, ["export"], section, SETTINGS, identity.spark_env(ON))
    ref = {"secretKeyRef": {"name": "magnetar-token-jobs", "key": "token"}}
    assert app["spec"]["driver"]["env"] == [{"name": "MAGNETAR_AUTH_TOKEN", "valueFrom": ref}]
    assert app["spec"]["executor"]["env"] == [{"name": "MAGNETAR_AUTH_TOKEN", "valueFrom": ref}]
    command = spark_submitter.submit_command(app)
    assert "spark.kubernetes.executor.secretKeyRef.MAGNETAR_AUTH_TOKEN=magnetar-token-jobs:token" in command
    app["metadata"]["uid"] = "u1"  # the API server's, once the application exists
    job = spark_submitter.build_submit_job(app)
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "MAGNETAR_AUTH_TOKEN", "valueFrom": ref} in env
    scheduled = build_application(
        TOPIC, EXPORT_KIND, ["export"], {**section, "schedule": "@daily"}, SETTINGS, identity.spark_env(ON)
    )
    assert scheduled["spec"]["template"]["driver"]["env"][0]["name"] == "MAGNETAR_AUTH_TOKEN"


def test_the_token_env_is_part_of_the_spec_hash_only_when_auth_is_on() -> None:
    """An application made before auth was turned on differs in its hash, so it is replaced by
    one with the token (spark_resources.ensure_application); with auth off the hash is unchanged."""
    section = {"target": "file:///x"}
    before = build_application(TOPIC, EXPORT_KIND, ["export"], section, SETTINGS)
    off = build_application(TOPIC, EXPORT_KIND, ["export"], section, SETTINGS, identity.spark_env(AuthSettings()))
    on = build_application(TOPIC, EXPORT_KIND, ["export"], section, SETTINGS, identity.spark_env(ON))
    assert off == before and "env" not in before["spec"]["driver"]
    assert on["metadata"]["annotations"][SPEC_HASH] != before["metadata"]["annotations"][SPEC_HASH]
    daily = {**section, "schedule": "@daily"}
    scheduled_before = build_application(TOPIC, EXPORT_KIND, ["export"], daily, SETTINGS)
    scheduled_on = build_application(TOPIC, EXPORT_KIND, ["export"], daily, SETTINGS, identity.spark_env(ON))
    assert scheduled_on["metadata"]["annotations"][SPEC_HASH] != scheduled_before["metadata"]["annotations"][SPEC_HASH]


def test_minted_tokens_verify_with_pyjwt_and_the_brokers_verifier() -> None:
    key = secrets.token_bytes(32)
    token = identity.mint(key, "broker")
    assert jwt.decode(token, key, algorithms=["HS256"]) == {"sub": "broker"}
    assert TokenVerifier("HS256", key).verify(token).role == "broker"
    assert identity.verifies(key, token, "broker")
    assert not identity.verifies(key, token, "bookie")
    assert not identity.verifies(secrets.token_bytes(32), token, "broker")


# ---------------------------------------------------------------------- on a real API server


def _kube(cp: ControlPlane) -> Kube:
    return Kube(k8s_config.new_client_from_config(config_file=str(cp.kubeconfig)))  # type: ignore[no-untyped-call]


def _put_key(cp: ControlPlane, namespace: str, key: bytes) -> None:
    cp.kubectl("delete", "secret", "magnetar-auth-key", "-n", namespace, "--ignore-not-found")
    path = cp.run_dir / f"key-{namespace}"
    path.write_bytes(key)
    cp.kubectl("create", "secret", "generic", "magnetar-auth-key", "-n", namespace, f"--from-file=secret.key={path}")


def _token_of(kube: Kube, namespace: str, role: str) -> str:
    secret = kube.get("v1", "Secret", f"magnetar-token-{role}", namespace)
    assert secret is not None
    return base64.b64decode(secret["data"]["token"]).decode()


def test_operator_mints_token_secrets_from_the_key(crds: ControlPlane, ns: str) -> None:
    kube = _kube(crds)
    with pytest.raises(identity.IdentityError, match=f"Secret {ns}/magnetar-auth-key with key 'secret.key' not found"):
        identity.ensure_tokens(kube, ns, ON)
    assert kube.get("v1", "Secret", "magnetar-token-broker", ns) is None  # nothing minted without a key
    key = secrets.token_bytes(32)
    _put_key(crds, ns, key)
    tokens = identity.ensure_tokens(kube, ns, ON)
    assert sorted(tokens) == sorted(identity.ROLES)
    for role in identity.ROLES:
        stored = _token_of(kube, ns, role)
        assert stored == tokens[role]
        assert jwt.decode(stored, key, algorithms=["HS256"])["sub"] == role
    versions = {r: kube.get("v1", "Secret", f"magnetar-token-{r}", ns)["metadata"]["resourceVersion"] for r in tokens}  # type: ignore[index]
    assert identity.ensure_tokens(kube, ns, ON) == tokens  # a restart changes nothing
    again = {r: kube.get("v1", "Secret", f"magnetar-token-{r}", ns)["metadata"]["resourceVersion"] for r in tokens}  # type: ignore[index]
    assert again == versions
    new_key = secrets.token_bytes(32)
    _put_key(crds, ns, new_key)  # the key was replaced: every token is minted again
    renewed = identity.ensure_tokens(kube, ns, ON)
    for role in identity.ROLES:
        assert renewed[role] != tokens[role]
        assert jwt.decode(_token_of(kube, ns, role), new_key, algorithms=["HS256"])["sub"] == role


def test_copies_into_other_namespaces_carry_the_key_only_for_bookies(crds: ControlPlane, ns: str) -> None:
    kube = _kube(crds)
    key = secrets.token_bytes(32)
    _put_key(crds, ns, key)
    bookie_ns, jobs_ns = f"{ns}-bk", f"{ns}-jobs"
    crds.kubectl("create", "namespace", bookie_ns)
    crds.kubectl("create", "namespace", jobs_ns)
    identity.ensure_copies(kube, ns, bookie_ns, ON, "bookie", with_key=True)
    identity.ensure_copies(kube, ns, jobs_ns, ON, "jobs", with_key=False)
    copied_key = kube.get("v1", "Secret", "magnetar-auth-key", bookie_ns)
    assert copied_key is not None and base64.b64decode(copied_key["data"]["secret.key"]) == key
    assert jwt.decode(_token_of(kube, bookie_ns, "bookie"), key, algorithms=["HS256"])["sub"] == "bookie"
    assert jwt.decode(_token_of(kube, jobs_ns, "jobs"), key, algorithms=["HS256"])["sub"] == "jobs"
    assert kube.get("v1", "Secret", "magnetar-auth-key", jobs_ns) is None  # jobs never see the key
    assert _token_of(kube, ns, "jobs") == _token_of(kube, jobs_ns, "jobs")
