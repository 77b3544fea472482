"""Internal identity on Kubernetes: the signing key, one token Secret per role, and the pods' mounts.

With ``auth.enabled`` the chart makes (or the user names, ``auth.existingSecret``) a Secret holding
the HS256 signing key (``secret.key``: the raw key bytes, what ``tokenSecretKey=file:///...``
reads). A chart cannot sign a JWT, so the operator mints the tokens: at start-up, for each role in
``ROLES``, a Secret ``<prefix>-<role>`` (``magnetar-token-broker``...) with the key ``token``,
signed with the mounted key, ``sub`` the role and no expiry. A token Secret that exists and still
verifies with the key is left alone (an operator restart changes nothing; a user may replace a
token by hand); one that no longer verifies (the key was replaced) is minted again. Bookie pods of
a BookieEnsemble in another namespace get copies of the key and the ``bookie`` token there, since
a pod can mount only Secrets of its own namespace.

Pods then mount the key and their own token, and their config gets the keys that turn
authentication on (``broker_config``, ``bookie_config``): brokers authenticate clients and send
their token to bookies and to other brokers; bookies admit only the internal roles
(``superUserRoles``) and send their token for autorecovery's copies; Spark applications get the
``jobs`` token in ``MAGNETAR_AUTH_TOKEN`` from the Secret (``spark_env``); the operator's own admin
client sends the ``operator`` token (``operator_token``).

HS256 is signed here with the standard library (``hmac``), so the operator needs no JWT library;
the tokens are ordinary JWTs that the brokers verify with PyJWT.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

ROLES = ("broker", "bookie", "operator", "jobs", "admin")
KEY_FILE = "secret.key"
TOKEN_KEY = "token"
AUTH_PATH = "/etc/magnetar/auth"
KEY_DIR = f"{AUTH_PATH}/key"
TOKEN_DIR = f"{AUTH_PATH}/token"
TOKEN_ENV = "MAGNETAR_AUTH_TOKEN"
LABELS = {"app.kubernetes.io/name": "magnetar", "app.kubernetes.io/component": "identity"}


@dataclass(frozen=True)
class AuthSettings:
    """The operator's ``MAGNETAR_AUTH_*`` settings (config.py): off unless ``enabled``."""

    enabled: bool = False
    key_secret: str = "magnetar-auth-key"
    token_secret_prefix: str = "magnetar-token"
    super_user_roles: tuple[str, ...] = ROLES
    #: Roles a bookie admits: the brokers, the bookies' autorecovery, the Spark jobs.
    bookie_roles: tuple[str, ...] = ("broker", "bookie", "jobs")
    #: The brokers check grants too (``authorizationEnabled``): without it any valid token may do
    #: everything, so it is on whenever authentication is (chart ``auth.authorization.enabled``).
    authorization: bool = True

    def token_secret(self, role: str) -> str:
        return f"{self.token_secret_prefix}-{role}"


class SecretStore(Protocol):
    """What minting needs from ``kube.Kube`` (a protocol, so tests can pass the real one)."""

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None: ...

    def apply(self, desired: Mapping[str, Any]) -> str: ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str) -> bool: ...


# --------------------------------------------------------------------- tokens (HS256, stdlib)
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(key: bytes, role: str) -> str:
    """An HS256 JWT with ``sub`` = ``role`` and no expiry (Pulsar's ``tokens create`` default)."""
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = _b64(json.dumps({"sub": role}, separators=(",", ":")).encode())
    signing_input = f"{header}.{claims}".encode()
    return f"{header}.{claims}.{_b64(hmac.new(key, signing_input, hashlib.sha256).digest())}"


def verifies(key: bytes, token: str, role: str) -> bool:
    """Whether ``token`` is an HS256 token for ``role`` signed with ``key``."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        return False
    try:
        header, claims = json.loads(_unb64(parts[0])), json.loads(_unb64(parts[1]))
        signature = _unb64(parts[2])
    except ValueError:
        return False
    expected = hmac.new(key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
    return (
        isinstance(header, dict)
        and header.get("alg") == "HS256"
        and isinstance(claims, dict)
        and claims.get("sub") == role
        and hmac.compare_digest(signature, expected)
    )


# --------------------------------------------------------------------- Secrets
def _secret(name: str, namespace: str, data: Mapping[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def _data(secret: Mapping[str, Any] | None, key: str) -> bytes | None:
    encoded = ((secret or {}).get("data") or {}).get(key)
    return base64.b64decode(encoded) if isinstance(encoded, str) else None


class IdentityError(RuntimeError):
    """The signing key Secret is missing or has no ``secret.key``."""


def signing_key(kube: SecretStore, namespace: str, auth: AuthSettings) -> bytes:
    key = _data(kube.get("v1", "Secret", auth.key_secret, namespace), KEY_FILE)
    if not key:
        raise IdentityError(f"Secret {namespace}/{auth.key_secret} with key {KEY_FILE!r} not found (auth.enabled)")
    return key


def ensure_tokens(
    kube: SecretStore, namespace: str, auth: AuthSettings, roles: tuple[str, ...] = ROLES
) -> dict[str, str]:
    """Mint the missing (or no longer valid) token Secrets of ``roles``; return every token."""
    key = signing_key(kube, namespace, auth)
    tokens: dict[str, str] = {}
    for role in roles:
        name = auth.token_secret(role)
        existing = _data(kube.get("v1", "Secret", name, namespace), TOKEN_KEY)
        if existing is not None and verifies(key, existing.decode(errors="replace"), role):
            tokens[role] = existing.decode().strip()
            continue
        if existing is not None:  # signed with a key that is no longer the key: mint it again
            kube.delete("v1", "Secret", name, namespace)
        tokens[role] = mint(key, role)
        kube.apply(_secret(name, namespace, {TOKEN_KEY: tokens[role].encode()}))
    return tokens


def ensure_copies(
    kube: SecretStore, source_namespace: str, namespace: str, auth: AuthSettings, role: str, *, with_key: bool
) -> None:
    """Copy ``role``'s token (and, ``with_key``, the signing key: bookies verify tokens with it)
    into ``namespace``, since pods mount only Secrets of their own namespace. Spark jobs get no key."""
    if namespace == source_namespace:
        ensure_tokens(kube, namespace, auth, (role,))
        return
    token = ensure_tokens(kube, source_namespace, auth, (role,))[role]
    copies: list[tuple[str, dict[str, bytes]]] = [(auth.token_secret(role), {TOKEN_KEY: token.encode()})]
    if with_key:
        copies.append((auth.key_secret, {KEY_FILE: signing_key(kube, source_namespace, auth)}))
    for name, data in copies:
        current = kube.get("v1", "Secret", name, namespace)
        wanted = next(iter(data.items()))
        if _data(current, wanted[0]) != wanted[1]:
            if current is not None:
                kube.delete("v1", "Secret", name, namespace)
            kube.apply(_secret(name, namespace, data))


# --------------------------------------------------------------------- pods and config
def _file(directory: str, name: str) -> str:
    return f"file://{directory}/{name}"


def broker_config(auth: AuthSettings) -> dict[str, Any]:
    """broker.conf keys for a broker pod (the user's ``broker.config`` still wins over these)."""
    if not auth.enabled:
        return {}
    own = _file(TOKEN_DIR, TOKEN_KEY)
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": "token",
        "tokenSecretKey": _file(KEY_DIR, KEY_FILE),
        "superUserRoles": ",".join(auth.super_user_roles),
        "authorizationEnabled": "true" if auth.authorization else "false",
        "brokerClientAuthenticationPlugin": "token",
        "brokerClientAuthenticationParameters": own,
        "bookkeeperClientAuthenticationPlugin": "token",
        "bookkeeperClientAuthenticationParameters": own,
    }


def bookie_config(auth: AuthSettings) -> dict[str, Any]:
    """bookie settings: admit only the internal roles; autorecovery sends the bookie's token."""
    if not auth.enabled:
        return {}
    return {
        "authenticationEnabled": "true",
        "authenticationProviders": "token",
        "tokenSecretKey": _file(KEY_DIR, KEY_FILE),
        "superUserRoles": ",".join(auth.bookie_roles),
        "bookkeeperClientAuthenticationPlugin": "token",
        "bookkeeperClientAuthenticationParameters": _file(TOKEN_DIR, TOKEN_KEY),
    }


def add_mounts(pod_spec: dict[str, Any], container: dict[str, Any], auth: AuthSettings, role: str) -> None:
    """Mount the signing key and ``role``'s token into ``container`` (nothing with auth off)."""
    if not auth.enabled:
        return
    pod_spec.setdefault("volumes", []).extend(
        [
            {"name": "auth-key", "secret": {"secretName": auth.key_secret, "defaultMode": 0o444}},
            {"name": "auth-token", "secret": {"secretName": auth.token_secret(role), "defaultMode": 0o444}},
        ]
    )
    container.setdefault("volumeMounts", []).extend(
        [
            {"name": "auth-key", "mountPath": KEY_DIR, "readOnly": True},
            {"name": "auth-token", "mountPath": TOKEN_DIR, "readOnly": True},
        ]
    )


def spark_env(auth: AuthSettings) -> list[dict[str, Any]]:
    """The ``jobs`` token as a secret env var for a Spark driver and its executors."""
    if not auth.enabled:
        return []
    ref = {"secretKeyRef": {"name": auth.token_secret("jobs"), "key": TOKEN_KEY}}
    return [{"name": TOKEN_ENV, "valueFrom": ref}]


# --------------------------------------------------------------------- the operator's own token
_operator_token: str | None = None


def remember_operator_token(token: str | None) -> None:
    global _operator_token
    _operator_token = token


def operator_token() -> str | None:
    """The token the operator's admin client sends (None until minted, or with auth off)."""
    return _operator_token
