"""Process-wide clients and kopf settings, set up once when the operator starts.

Why module state and not kopf's `memo`: one operator process talks to one broker admin URL and
one Kubernetes API, and typed accessors keep `mypy --strict` useful in the handlers. The startup
handler also moves kopf's bookkeeping into `magnetar.dev/*` annotations: the CRDs' status
schemas are structural, so kopf's default `status.kopf` progress field would be pruned.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from . import broker_pool
from .admin import AdminClient
from .config import FINALIZER, GROUP, SETTINGS
from .kube import Kube

_admin: AdminClient | None = None
_kube: Kube | None = None
_tasks: list[asyncio.Task[None]] = []


def admin() -> AdminClient:
    global _admin
    if _admin is None:
        _admin = AdminClient(SETTINGS.admin_url, timeout=SETTINGS.admin_timeout)
    return _admin


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube.connect()
    return _kube


def configure(settings: kopf.OperatorSettings) -> None:
    """Kopf settings the resources need; separate from the handler so tests can check them."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.connect_timeout = 10


@kopf.on.startup()
async def start_operator(settings: kopf.OperatorSettings, logger: Any, **_: Any) -> None:
    configure(settings)
    logger.info(
        f"magnetar operator: admin API {SETTINGS.admin_url}, drift timer every "
        f"{SETTINGS.reconcile_interval:g}s, broker pool managed: {SETTINGS.manage_broker_pool}"
    )
    if SETTINGS.manage_broker_pool:
        _tasks.append(asyncio.create_task(broker_pool.keep_pool(kube, logger), name="broker-pool"))


@kopf.on.cleanup()
async def stop_operator(**_: Any) -> None:
    for task in _tasks:
        task.cancel()
    await asyncio.gather(*_tasks, return_exceptions=True)
    _tasks.clear()
    if _admin is not None:
        await _admin.close()
