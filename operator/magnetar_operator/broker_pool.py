"""The shared broker pool: the operator keeps its StatefulSet and Services as configured.

Why a loop and not a custom resource: the pool is part of the installation, sized from the Helm
chart's values (which reach the operator as MAGNETAR_BROKER_* variables), not something users
create. A background task applies it at startup and then every drift interval, so a deleted
StatefulSet or a hand-edited replica count comes back. Restarts are the StatefulSet's
RollingUpdate: one broker at a time, gated on the readiness probe (DESIGN.md section 6).

Who sizes the pool: the replica count from the chart, unless the chart's brokers.autoscaling is
on (MAGNETAR_BROKER_AUTOSCALING). Then a HorizontalPodAutoscaler owns spec.replicas, and the
operator writes it only when it creates the StatefulSet; patching it back every interval would
undo each of the autoscaler's decisions.

Who removes the pool: nothing in Kubernetes owns it unless we say so, and `helm uninstall` only
deletes what the chart rendered — the operator's Deployment, not the StatefulSet the operator
made. So when MAGNETAR_OPERATOR_DEPLOYMENT names that Deployment, every child of the pool carries
an owner reference to it (not a controller reference: the Deployment does not manage them) and
the garbage collector removes the pool with the operator. The Deployment is read on every apply,
so a reinstalled operator (a new uid) re-adopts the pool. While that Deployment is missing or
being deleted the pool is left alone, neither created nor patched: an operator pod still
terminating after `helm uninstall` must not recreate, without an owner, what the garbage
collector just removed. Owner references cannot cross namespaces: the Deployment is looked up in
the pool's namespace, which is the operator's own unless MAGNETAR_BROKER_NAMESPACE says otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from .brokers import BrokerSet, build_broker_children
from .config import SETTINGS, Settings
from .kube import Kube
from .manifests import owner_reference


class OwnerMissing(Exception):
    """MAGNETAR_OPERATOR_DEPLOYMENT names a Deployment that is not (or no longer) there."""


def pool_set(settings: Settings) -> BrokerSet:
    return BrokerSet(
        name=settings.broker_pool_name,
        namespace=settings.broker_namespace,
        replicas=settings.broker_replicas,
        image=settings.broker_image,
        config=settings.broker_config,
        resources=settings.broker_resources,
        image_pull_policy=settings.image_pull_policy,
        pod_security_context=settings.pod_security_context,
        auth=settings.auth,
        tls=settings.tls,
        termination_grace=settings.broker_termination_grace,
    )


def pool_children(settings: Settings, *, pdb_api_version: str, owner: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The pool's children, each with a plain (non-controller) owner reference to `owner` if given."""
    children = build_broker_children(pool_set(settings), pdb_api_version=pdb_api_version)
    if owner is not None:
        for child in children:
            child["metadata"]["ownerReferences"] = [owner_reference(owner, controller=False)]
    return children


def apply_pool(kube: Kube, settings: Settings) -> list[str]:
    """Apply every child of the pool once; return what changed, e.g. ["StatefulSet/x created"].

    Raises OwnerMissing, applying nothing, when the named operator Deployment is missing or being
    deleted."""
    owner = None
    if settings.operator_deployment:
        namespace, name = settings.broker_namespace, settings.operator_deployment
        owner = kube.get("apps/v1", "Deployment", name, namespace)
        if owner is None or owner["metadata"].get("deletionTimestamp"):
            state = "not found" if owner is None else "being deleted"
            raise OwnerMissing(
                f"Deployment {namespace}/{name} (MAGNETAR_OPERATOR_DEPLOYMENT) {state}: "
                "the pool, which it owns, is left alone"
            )
    children = pool_children(settings, pdb_api_version=kube.pdb_api_version(), owner=owner)
    changes = []
    for child in children:
        if settings.broker_autoscaling and child["kind"] == "StatefulSet":
            live = kube.get("apps/v1", "StatefulSet", child["metadata"]["name"], child["metadata"]["namespace"])
            if live is not None:  # the autoscaler's count stands
                del child["spec"]["replicas"]
        outcome = kube.apply(child)
        if outcome != "unchanged":
            changes.append(f"{child['kind']}/{child['metadata']['name']} {outcome}")
    return changes


async def keep_pool(get_kube: Callable[[], Kube], logger: Any) -> None:
    """Apply the pool now and after every interval until cancelled; errors are logged, retried."""
    while True:
        try:
            changes = await asyncio.to_thread(apply_pool, get_kube(), SETTINGS)
            if changes:
                logger.info(f"broker pool {SETTINGS.broker_pool_name}: {', '.join(changes)}")
        except asyncio.CancelledError:
            raise
        except OwnerMissing as exc:
            logger.warning(f"broker pool {SETTINGS.broker_pool_name}: {exc}")
        except Exception as exc:  # keep the loop alive through API hiccups; say what happened
            logger.warning(f"broker pool {SETTINGS.broker_pool_name}: apply failed, will retry: {exc!r}")
        await asyncio.sleep(SETTINGS.reconcile_interval)
