"""The kopf side of internal identity (identity.py): mint the tokens at start-up, copy Secrets.

At start-up, with ``auth.enabled`` (MAGNETAR_AUTH_ENABLED), the operator mints the missing token
Secrets in its own namespace and keeps its own token for its admin client. A BookieEnsemble in
another namespace gets copies of the signing key and the ``bookie`` token there (on create and on
resume), so does an isolated Tenant's namespace (the key and the ``broker`` token, for its broker
set), and a Spark application's namespace gets the ``jobs`` token (``ensure_jobs_token``,
called before the application is written). A missing key Secret stops nothing: it is logged, and
a pod that mounts it stays Pending until it exists, which ``kubectl describe`` names. The TLS
certificate Secret (chart ``tls.*``, transport_tls.py) is copied the same way, into the namespaces
of BookieEnsembles and isolated Tenants.
"""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

from . import identity, runtime, transport_tls
from .config import GROUP, SETTINGS, VERSION


@kopf.on.startup()
async def mint_tokens(logger: Any, **_: Any) -> None:
    if not SETTINGS.auth_enabled:
        return
    try:
        tokens = await asyncio.to_thread(
            identity.ensure_tokens, runtime.kube(), SETTINGS.broker_namespace, SETTINGS.auth
        )
    except identity.IdentityError as exc:
        logger.error(f"internal identity: {exc}; brokers and bookies with auth on will refuse the operator")
        return
    identity.remember_operator_token(tokens["operator"])
    logger.info(f"internal identity: token Secrets ready for {', '.join(sorted(tokens))}")


@kopf.on.resume(GROUP, VERSION, "bookieensembles", id="identity-secrets")
@kopf.on.create(GROUP, VERSION, "bookieensembles", id="identity-secrets")
async def bookie_secrets(namespace: str | None, **_: Any) -> None:
    if namespace:
        await _identity_copy(namespace, "bookie", with_key=True)
        await _tls_copy(namespace)


async def _identity_copy(namespace: str, role: str, *, with_key: bool) -> None:
    """``role``'s token Secret (and the signing key, ``with_key``) in ``namespace`` (auth on only)."""
    if SETTINGS.auth_enabled:
        await asyncio.to_thread(
            identity.ensure_copies,
            runtime.kube(),
            SETTINGS.broker_namespace,
            namespace,
            SETTINGS.auth,
            role,
            with_key=with_key,
        )


async def _tls_copy(namespace: str, *, ca_only: bool = False) -> None:
    """The TLS certificate Secret (transport_tls.py; its CA alone, ``ca_only``) in a namespace
    whose pods mount it (TLS on only)."""
    if SETTINGS.tls.enabled:
        await asyncio.to_thread(
            transport_tls.ensure_copy,
            runtime.kube(),
            SETTINGS.broker_namespace,
            namespace,
            SETTINGS.tls,
            ca_only=ca_only,
        )


@kopf.on.resume(GROUP, VERSION, "tenants", id="identity-secrets")
@kopf.on.create(GROUP, VERSION, "tenants", id="identity-secrets")
@kopf.on.update(GROUP, VERSION, "tenants", id="identity-secrets", field="spec.isolation")
async def isolated_broker_secrets(spec: Any, namespace: str | None, **_: Any) -> None:
    """An isolated Tenant's broker set runs in the Tenant's namespace: its pods mount the key and
    the ``broker`` token there (tenants.py builds the set with identity.add_mounts)."""
    if not namespace or not ((spec or {}).get("isolation") or {}).get("enabled"):
        return
    await _identity_copy(namespace, "broker", with_key=True)
    await _tls_copy(namespace)


async def ensure_jobs_token(namespace: str) -> None:
    """The ``jobs`` token Secret in a Spark application's namespace (auth on only), and the CA
    copy its pods mount (TLS on only)."""
    await _tls_copy(namespace, ca_only=True)
    await _identity_copy(namespace, "jobs", with_key=False)
