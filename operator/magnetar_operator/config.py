"""Operator settings, read once from the environment.

Why the environment: the operator runs as a Deployment rendered by the Helm chart, and the chart
already turns its values into environment variables; tests start the operator as a subprocess and
set the same variables. Kopf's decorators are evaluated at import time, so the timer interval must
be known when the handler modules are imported — `Settings.from_env()` is called then, once.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .identity import AuthSettings
from .transport_tls import TlsSettings

GROUP = "magnetar.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FINALIZER = f"{GROUP}/finalizer"

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace() -> str:
    """The namespace the operator runs in: where the shared broker pool and its Service live."""
    explicit = os.environ.get("MAGNETAR_BROKER_NAMESPACE") or os.environ.get("POD_NAMESPACE")
    if explicit:
        return explicit
    try:
        return _SA_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def _names(name: str, default: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in (os.environ.get(name) or default).split(",") if n.strip())


def _json_dict(name: str) -> dict[str, Any]:
    raw = os.environ.get(name)
    if not raw:
        return {}
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(f"{name} must hold a JSON object, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Settings:
    """Everything the operator can be told, with the defaults a Helm install expects."""

    broker_namespace: str
    admin_url: str
    #: How often the drift-correction timers compare the brokers and the children with the spec.
    reconcile_interval: float = 60.0
    #: Delay of kopf.TemporaryError retries (broker down, tenant missing, ...).
    retry_delay: float = 10.0
    #: Timeout of one admin REST request.
    admin_timeout: float = 10.0
    #: Whether the operator runs the shared broker pool itself (the chart turns it on).
    manage_broker_pool: bool = False
    broker_pool_name: str = "magnetar-broker"
    broker_replicas: int = 3
    broker_image: str = "magnetar/broker:0.1.0"
    broker_config: dict[str, Any] = field(default_factory=dict)
    broker_resources: dict[str, Any] = field(default_factory=dict)
    #: A HorizontalPodAutoscaler (the chart's brokers.autoscaling) sizes the shared pool: the
    #: operator then sets the StatefulSet's replicas only when it creates it, never patches them.
    broker_autoscaling: bool = False
    #: The broker pods' terminationGracePeriodSeconds: the pre-stop drain and the stop must fit in it.
    broker_termination_grace: int = 120
    image_pull_policy: str = "IfNotPresent"
    #: The operator's own Deployment (in the pool's namespace): when set, the shared pool's children
    #: carry an owner reference to it, so deleting the operator (`helm uninstall`) removes the pool.
    operator_deployment: str = ""
    #: The pod securityContext of broker pods, and of bookie pods whose BookieEnsemble sets none.
    pod_security_context: dict[str, Any] = field(default_factory=dict)
    #: Internal identity (identity.py): the signing key Secret, token Secrets, superuser roles.
    auth_enabled: bool = False
    auth_key_secret: str = "magnetar-auth-key"
    auth_token_secret_prefix: str = "magnetar-token"
    auth_super_user_roles: tuple[str, ...] = ("broker", "bookie", "operator", "jobs", "admin")
    auth_authorization: bool = True
    #: The certificate Secret of broker and bookie TLS (transport_tls.py); empty: TLS off.
    tls_secret: str = ""

    @classmethod
    def from_env(cls) -> Settings:
        namespace = _own_namespace()
        pool = os.environ.get("MAGNETAR_BROKER_POOL_NAME", "magnetar-broker")
        return cls(
            broker_namespace=namespace,
            admin_url=os.environ.get("MAGNETAR_ADMIN_URL") or f"http://{pool}.{namespace}.svc:8080",
            reconcile_interval=_float("MAGNETAR_RECONCILE_INTERVAL", 60.0),
            retry_delay=_float("MAGNETAR_RETRY_DELAY", 10.0),
            admin_timeout=_float("MAGNETAR_ADMIN_TIMEOUT", 10.0),
            manage_broker_pool=_bool("MAGNETAR_MANAGE_BROKER_POOL", False),
            broker_pool_name=pool,
            broker_replicas=_int("MAGNETAR_BROKER_REPLICAS", 3),
            broker_image=os.environ.get("MAGNETAR_BROKER_IMAGE", "magnetar/broker:0.1.0"),
            broker_config=_json_dict("MAGNETAR_BROKER_CONFIG"),
            broker_resources=_json_dict("MAGNETAR_BROKER_RESOURCES"),
            broker_autoscaling=_bool("MAGNETAR_BROKER_AUTOSCALING", False),
            broker_termination_grace=_int("MAGNETAR_BROKER_TERMINATION_GRACE_SECONDS", 120),
            image_pull_policy=os.environ.get("MAGNETAR_IMAGE_PULL_POLICY", "IfNotPresent"),
            operator_deployment=os.environ.get("MAGNETAR_OPERATOR_DEPLOYMENT", ""),
            pod_security_context=_json_dict("MAGNETAR_POD_SECURITY_CONTEXT"),
            auth_enabled=_bool("MAGNETAR_AUTH_ENABLED", False),
            auth_key_secret=os.environ.get("MAGNETAR_AUTH_KEY_SECRET") or "magnetar-auth-key",
            auth_token_secret_prefix=os.environ.get("MAGNETAR_AUTH_TOKEN_SECRET_PREFIX") or "magnetar-token",
            auth_super_user_roles=_names("MAGNETAR_AUTH_SUPERUSER_ROLES", "broker,bookie,operator,jobs,admin"),
            auth_authorization=_bool("MAGNETAR_AUTH_AUTHORIZATION_ENABLED", True),
            tls_secret=os.environ.get("MAGNETAR_TLS_SECRET", "").strip(),
        )

    @property
    def auth(self) -> AuthSettings:
        """The identity settings the builders and the token minting use."""
        return AuthSettings(
            enabled=self.auth_enabled,
            key_secret=self.auth_key_secret,
            token_secret_prefix=self.auth_token_secret_prefix,
            super_user_roles=self.auth_super_user_roles,
            authorization=self.auth_authorization,
        )

    @property
    def tls(self) -> TlsSettings:
        """The TLS settings the broker and bookie builders use."""
        return TlsSettings(self.tls_secret)


SETTINGS = Settings.from_env()
