"""The shared broker pool: the operator keeps its StatefulSet and Services as configured.

Why a loop and not a custom resource: the pool is part of the installation, sized from the Helm
chart's values (which reach the operator as MAGNETAR_BROKER_* variables), not something users
create. A background task applies it at startup and then every drift interval, so a deleted
StatefulSet or a hand-edited replica count comes back. Restarts are the StatefulSet's
RollingUpdate: one broker at a time, gated on the readiness probe (DESIGN.md section 6).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from .brokers import BrokerSet, build_broker_children
from .config import SETTINGS, Settings
from .kube import Kube


def pool_set(settings: Settings) -> BrokerSet:
    return BrokerSet(
        name=settings.broker_pool_name,
        namespace=settings.broker_namespace,
        replicas=settings.broker_replicas,
        image=settings.broker_image,
        config=settings.broker_config,
        resources=settings.broker_resources,
        image_pull_policy=settings.image_pull_policy,
    )


def apply_pool(kube: Kube, settings: Settings) -> list[str]:
    """Apply every child of the pool once; return what changed, e.g. ["StatefulSet/x created"]."""
    children = build_broker_children(pool_set(settings), pdb_api_version=kube.pdb_api_version())
    changes = []
    for child in children:
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
        except Exception as exc:  # keep the loop alive through API hiccups; say what happened
            logger.warning(f"broker pool {SETTINGS.broker_pool_name}: apply failed, will retry: {exc!r}")
        await asyncio.sleep(SETTINGS.reconcile_interval)
