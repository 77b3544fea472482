"""The chart's internal identity (auth.*): the signing key Secret, the operator's settings, RBAC.

Rendered with ``helm template`` (no cluster, so ``lookup`` finds nothing and the key is new); the
operator's environment is read back through ``Settings.from_env`` to show that the names the chart
renders are the ones the operator mints and mounts (identity.py).
"""

from __future__ import annotations

import base64

import pytest
from tests.chart.chart import Doc, env_of, find, helm, render, template_args

from magnetar_operator import brokers
from magnetar_operator.config import Settings

OPERATOR = "magnetar-operator"


def _operator_env(docs: list[Doc]) -> dict[str, str]:
    return env_of(find(docs, "Deployment", OPERATOR)["spec"]["template"]["spec"]["containers"][0])


def _secret_rules(docs: list[Doc]) -> list[Doc]:
    role = find(docs, "ClusterRole", f"magnetar-{OPERATOR}")
    return [r for r in role["rules"] if "secrets" in r["resources"]]


def test_auth_enabled_renders_a_random_key_and_tells_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render("--set", "auth.enabled=true")
    secret = find(docs, "Secret", "magnetar-auth-key")
    assert len(base64.b64decode(secret["data"]["secret.key"])) == 32
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    other = find(render("--set", "auth.enabled=true"), "Secret", "magnetar-auth-key")
    assert other["data"]["secret.key"] != secret["data"]["secret.key"]  # random per install
    env = _operator_env(docs)
    assert env["MAGNETAR_AUTH_ENABLED"] == "true"
    assert env["MAGNETAR_AUTH_KEY_SECRET"] == "magnetar-auth-key"
    assert env["MAGNETAR_AUTH_TOKEN_SECRET_PREFIX"] == "magnetar-token"
    assert env["MAGNETAR_AUTH_SUPERUSER_ROLES"] == "broker,bookie,operator,jobs,admin"
    assert env["MAGNETAR_AUTH_AUTHORIZATION_ENABLED"] == "true"
    for name, value in env.items():  # the operator reads exactly these names
        monkeypatch.setenv(name, value)
    auth = Settings.from_env().auth
    assert auth.enabled and auth.key_secret == "magnetar-auth-key"
    assert auth.token_secret("operator") == "magnetar-token-operator"
    assert (
        auth.authorization
        and brokers.render_broker_config(
            brokers.BrokerSet(name="b", namespace="m", replicas=1, image="x", auth=auth)
        ).count("authorizationEnabled: 'true'")
        == 1
    )
    assert _secret_rules(docs) == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "delete"]}]


def test_existing_secret_is_used_and_no_key_is_made() -> None:
    docs = render(
        "--set", "auth.enabled=true", "--set", "auth.existingSecret=my-key", "--set", "auth.superUserRoles={ops}"
    )
    assert not [d for d in docs if d["kind"] == "Secret"]
    env = _operator_env(docs)
    assert env["MAGNETAR_AUTH_KEY_SECRET"] == "my-key"
    assert env["MAGNETAR_AUTH_SUPERUSER_ROLES"] == "ops"


def test_authorization_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    env = _operator_env(render("--set", "auth.enabled=true", "--set", "auth.authorization.enabled=false"))
    assert env["MAGNETAR_AUTH_AUTHORIZATION_ENABLED"] == "false"
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    auth = Settings.from_env().auth
    config = brokers.render_broker_config(brokers.BrokerSet(name="b", namespace="m", replicas=1, image="x", auth=auth))
    assert "authenticationEnabled: 'true'" in config and "authorizationEnabled: 'false'" in config


def test_auth_is_off_by_default() -> None:
    docs = render()
    assert not [d for d in docs if d["kind"] == "Secret"]
    assert not [k for k in _operator_env(docs) if k.startswith("MAGNETAR_AUTH")]
    assert _secret_rules(docs) == []


# ----------------------------------------------------------------------------- tls.*
def test_tls_names_the_certificate_secret_to_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render("--set", "tls.enabled=true", "--set", "tls.existingSecret=magnetar-tls")
    env = _operator_env(docs)
    assert env["MAGNETAR_TLS_SECRET"] == "magnetar-tls"
    assert not [k for k in env if k.startswith("MAGNETAR_AUTH")]  # TLS without tokens is allowed
    assert _secret_rules(docs) == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "delete"]}]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    assert settings.tls.enabled and settings.tls.secret == "magnetar-tls"
    config = brokers.render_broker_config(
        brokers.BrokerSet(name="b", namespace="m", replicas=1, image="x", auth=settings.auth, tls=settings.tls)
    )
    assert "brokerServicePortTls: 6651" in config and "tlsCertificateFilePath: /etc/magnetar/tls/tls.crt" in config


def test_tls_without_a_secret_is_refused_with_the_reason() -> None:
    proc = helm(*template_args("--set", "tls.enabled=true"), check=False)
    assert proc.returncode != 0
    assert "tls.enabled needs tls.existingSecret" in proc.stderr


def test_tls_is_off_by_default() -> None:
    assert "MAGNETAR_TLS_SECRET" not in _operator_env(render())
