"""Kopf handlers that turn a Topic's `spec.export` and a Namespace's or Tenant's
`spec.retentionSweep` into a SparkApplication (run once) or a ScheduledSparkApplication (on a
schedule), and a Topic's or Namespace's `spec.streamingExport` into a long-running one with its
checkpoint claim (spark_streaming.py), owned by the resource; and the background loop of the `job`
submitter and the status mirroring (with the streaming queries' lag, asked of the brokers there
because the admin client is asynchronous).

Why handlers of their own beside topics.py / namespaces.py / tenants.py: the Spark applications
do not depend on the broker calls of those handlers, and their failures must not turn the
resource's Ready condition False; they report in their own condition (Exported /
RetentionSwept). One limit comes from kopf, which handles a resource's causes one at a time: while
the creation of a resource is still being retried (its namespace missing on the brokers, say), a
later change of its spec, spec.export included, waits behind it.

A one-off application is created once per spec: the hash of what it was made from is kept in
status.<section>.specHash, so a completed export that a user deletes is not run again until
spec.export changes; changing it replaces the application (a new run).
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, cast
from urllib.parse import quote

import kopf
from kubernetes.client.exceptions import ApiException

from . import conditions, identity, identity_sync, namespaces, runtime, tenants, topics, transport_tls
from . import spark_streaming as streaming
from .admin import AdminError, NotFound
from .conditions import Condition
from .config import SETTINGS
from .manifests import MANAGED_BY
from .spark_apps import (
    API_VERSION,
    APP,
    EXPORT_KIND,
    LABEL_JOB,
    SCHEDULED,
    SPEC_HASH,
    SWEEP_KIND,
    InvalidSparkSpec,
    JobKind,
    app_name,
    build_application,
    export_arguments,
    sweep_arguments,
)
from .spark_config import SPARK
from .spark_kube import SparkKube, spark_kube
from .spark_status import mirror_pass
from .spark_streaming import STREAM_KIND
from .spark_submitter import submit_pass

_tasks: list[asyncio.Task[None]] = []


def _ours(obj: Mapping[str, Any] | None, owner_uid: str) -> bool:
    if obj is None:
        return False
    meta = obj["metadata"]
    managed = (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == MANAGED_BY
    return managed and any(r.get("uid") == owner_uid for r in meta.get("ownerReferences") or [])


def ensure_application(
    kube: SparkKube, owner: Mapping[str, Any], desired: Mapping[str, Any], previous: Mapping[str, Any]
) -> bool:
    """Create, replace or patch the application; True when something was written."""
    meta = desired["metadata"]
    name, namespace, kind = meta["name"], meta["namespace"], desired["kind"]
    uid = owner["metadata"]["uid"]
    other = SCHEDULED if kind == APP else APP
    if _ours(kube.get_object(API_VERSION, other, name, namespace), uid):
        kube.delete_object(API_VERSION, other, name, namespace)  # schedule added or removed
    live = kube.get_object(API_VERSION, kind, name, namespace)
    want = meta["annotations"][SPEC_HASH]
    if live is None:
        if kind == APP and previous.get("specHash") == want and previous.get("application") == name:
            return False  # this spec ran already; its application was deleted since
        kube.create_object(desired)
        return True
    if ((live["metadata"].get("annotations") or {}).get(SPEC_HASH)) == want:
        return False
    if (
        not _ours(live, uid)
        and (live["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") != MANAGED_BY
    ):
        raise InvalidSparkSpec(f"{kind} {namespace}/{name} exists and was not made by the magnetar operator")
    if kind == APP:
        kube.delete_object(API_VERSION, kind, name, namespace)
        try:
            kube.create_object(desired)
        except ApiException as exc:
            if exc.status == 409:  # the old run is still being deleted (a finalizer): retry
                raise kopf.TemporaryError(f"waiting for the previous {kind} {name} to be deleted", delay=2) from exc
            raise
    else:
        patch = {"metadata": {"annotations": dict(meta["annotations"])}, "spec": dict(desired["spec"])}
        kube.patch_object(API_VERSION, kind, name, namespace, patch)
    return True


def remove_applications(kube: SparkKube, owner: Mapping[str, Any], job: str) -> bool:
    meta = owner["metadata"]
    name = app_name(meta["name"], job)
    removed = False
    for kind in (APP, SCHEDULED):
        if _ours(kube.get_object(API_VERSION, kind, name, meta["namespace"]), meta["uid"]):
            removed = kube.delete_object(API_VERSION, kind, name, meta["namespace"]) or removed
    return removed


def _write(
    patch_status: MutableMapping[str, Any], status: Mapping[str, Any], cond: Condition, kind: JobKind, **fields: Any
) -> None:
    """Merge onto conditions another handler of this pass may already have put into the patch."""
    base = patch_status.get("conditions") or status.get("conditions")
    patch_status["conditions"] = conditions.merge(base, [cond], generation=None)
    patch_status[kind.section] = fields


async def reconcile(
    body: Mapping[str, Any], patch: kopf.Patch, kind: JobKind, arguments: Callable[[Mapping[str, Any]], list[str]]
) -> None:
    status = body.get("status") or {}
    section = (body.get("spec") or {}).get(kind.section)
    kube = spark_kube()
    if section is None:
        removed = await asyncio.to_thread(remove_applications, kube, body, kind.job)
        old = conditions.find(status.get("conditions"), kind.condition)
        if old is not None or removed:
            base = patch.status.get("conditions") or status.get("conditions") or []
            patch.status["conditions"] = [c for c in base if c.get("type") != kind.condition]
            patch.status[kind.section] = None
        return
    previous = status.get(kind.section) or {}
    try:
        # With auth on, driver and executors get the jobs token (identity.py) from a Secret there,
        # with TLS on the CA (transport_tls.py); both are part of the spec hash, so an application
        # made before either was on is replaced.
        env = identity.spark_env(SETTINGS.auth) + transport_tls.spark_env(SETTINGS.tls)
        secrets = transport_tls.spark_secrets(SETTINGS.tls)
        desired = build_application(body, kind, arguments(section), section, SPARK, env, secrets)
    except InvalidSparkSpec as exc:
        _write(patch.status, status, Condition(kind.condition, False, "InvalidSpec", str(exc)), kind)
        kopf.warn(cast(kopf.Body, body), reason="InvalidSpec", message=str(exc))
        return
    name = desired["metadata"]["name"]
    await identity_sync.ensure_jobs_token(desired["metadata"]["namespace"])
    try:
        wrote = await asyncio.to_thread(ensure_application, kube, body, desired, previous)
    except InvalidSparkSpec as exc:
        _write(patch.status, status, Condition(kind.condition, False, "InvalidSpec", str(exc)), kind)
        return
    except ApiException as exc:
        if exc.status == 404:
            message = (
                f"cannot create {desired['kind']} {name}: the spark-operator CRDs ({API_VERSION}) are not installed"
            )
            _write(patch.status, status, Condition(kind.condition, False, "Failed", message), kind)
            raise kopf.TemporaryError(message, delay=max(SETTINGS.retry_delay, 30)) from exc
        message = f"the API server refused {desired['kind']} {name}: {exc.reason}: {exc.body}"
        _write(patch.status, status, Condition(kind.condition, False, "Failed", message[:2000]), kind)
        raise kopf.PermanentError(message) from exc
    old = conditions.find(status.get("conditions"), kind.condition)
    if not wrote and old is not None and old.get("reason") != "InvalidSpec":
        return
    spec = desired["spec"]
    if desired["kind"] == SCHEDULED:
        cond = Condition(kind.condition, None, "Scheduled", f"{SCHEDULED} {name} runs on schedule {spec['schedule']!r}")
    else:
        cond = Condition(kind.condition, None, "Submitted", f"{APP} {name} created ({SPARK.submitter} submitter)")
    _write(
        patch.status,
        status,
        cond,
        kind,
        application=name,
        specHash=desired["metadata"]["annotations"][SPEC_HASH],
        state=None,
        resultOf=None,
    )


async def reconcile_streaming(body: Mapping[str, Any], patch: kopf.Patch, scope: str, value: str) -> None:
    """spec.streamingExport: the long-running application and its checkpoint claim
    (spark_streaming.py); removing the block deletes the application, and the claim the operator
    made when it was marked deleteClaim."""
    kind = STREAM_KIND
    status = body.get("status") or {}
    spec = body.get("spec") or {}
    section = spec.get(kind.section)
    kube = spark_kube()
    meta = body["metadata"]
    if section is None:
        removed = await asyncio.to_thread(remove_applications, kube, body, kind.job)
        old = conditions.find(status.get("conditions"), kind.condition)
        if status.get(kind.section) or old is not None:  # it ran here: its claim may be to delete
            removed = await asyncio.to_thread(_remove_claim, kube, body) or removed
        if old is not None or removed or status.get(kind.section):
            base = patch.status.get("conditions") or status.get("conditions") or []
            patch.status["conditions"] = [c for c in base if c.get("type") != kind.condition]
            patch.status[kind.section] = None
        return
    try:
        streaming.validate(section, spec)
        arguments = streaming.streaming_arguments(SETTINGS.admin_url, scope, value, section)
        env = identity.spark_env(SETTINGS.auth) + transport_tls.spark_env(SETTINGS.tls)
        secrets = transport_tls.spark_secrets(SETTINGS.tls)
        desired = build_application(body, kind, arguments, section, SPARK, env, secrets)
    except InvalidSparkSpec as exc:
        _write(patch.status, status, Condition(kind.condition, False, "InvalidSpec", str(exc)), kind)
        kopf.warn(cast(kopf.Body, body), reason="InvalidSpec", message=str(exc))
        return
    streaming.make_long_running(desired, meta["name"], section)
    name = desired["metadata"]["name"]
    await identity_sync.ensure_jobs_token(desired["metadata"]["namespace"])
    claim = streaming.build_claim(body, section)
    try:
        if claim is not None:
            await asyncio.to_thread(kube.ensure_claim, claim)
        wrote = await asyncio.to_thread(ensure_application, kube, body, desired, {})
    except InvalidSparkSpec as exc:
        _write(patch.status, status, Condition(kind.condition, False, "InvalidSpec", str(exc)), kind)
        return
    except ApiException as exc:
        message = f"cannot create the streaming export {name}: {exc.reason}: {exc.body}"
        if exc.status == 404:
            message = f"cannot create {APP} {name}: the spark-operator CRDs ({API_VERSION}) are not installed"
        _write(patch.status, status, Condition(kind.condition, False, "Failed", message[:2000]), kind)
        raise kopf.TemporaryError(message, delay=max(SETTINGS.retry_delay, 30)) from exc
    old = conditions.find(status.get("conditions"), kind.condition)
    if not wrote and old is not None and old.get("reason") != "InvalidSpec":
        return
    cond = Condition(kind.condition, None, "Submitted", f"{APP} {name} created ({SPARK.submitter} submitter)")
    _write(
        patch.status,
        status,
        cond,
        kind,
        application=name,
        specHash=desired["metadata"]["annotations"][SPEC_HASH],
        checkpointClaim=streaming.claim_name(meta["name"], section),
        state=None,
    )


def _remove_claim(kube: SparkKube, owner: Mapping[str, Any]) -> bool:
    """Delete the operator-made checkpoint claim if it is marked deleteClaim (never a user's)."""
    meta = owner["metadata"]
    name = streaming.claim_name(meta["name"], {})
    claim = kube.get_claim(name, meta["namespace"])
    if not _ours(claim, meta["uid"]) or claim is None:
        return False
    if (claim["metadata"].get("annotations") or {}).get(streaming.DELETE_CLAIM) != "true":
        return False
    return kube.delete_claim(name, meta["namespace"])


async def streaming_lags(kube: SparkKube) -> dict[tuple[str, str], int | None]:
    """The entries each streaming application's progress subscription has yet to pass, from the
    broker's internal stats (None while the subscription does not exist yet, or when the broker
    cannot answer)."""
    lags: dict[tuple[str, str], int | None] = {}
    apps = await asyncio.to_thread(kube.list_objects, API_VERSION, APP, f"{LABEL_JOB}={streaming.STREAM}")
    for app in apps:
        key = (str(app["metadata"]["namespace"]), str(app["metadata"]["name"]))
        scope = streaming.scope_of((app.get("spec") or {}).get("arguments") or [])
        if scope is None:
            continue
        try:
            lags[key] = streaming.entries_behind(await _internal_stats(scope[0], scope[1]), scope[2])
        except AdminError:
            lags[key] = None
    return lags


async def _internal_stats(scope: str, value: str) -> list[dict[str, Any]]:
    """Internal stats (ledgers and cursors) of every partition of a topic, or of every topic of a namespace."""
    admin = runtime.admin()
    if scope == "--namespace":
        tenant, _, local = value.partition("/")
        names = await admin.list_topics(tenant, local)
    else:
        tenant, local, topic = value.removeprefix("persistent://").split("/", 2)
        partitions = await admin.get_partitions(tenant, local, topic)
        names = [f"{value}-partition-{i}" for i in range(partitions)] if partitions else [value]
    out = []
    for name in names:
        path = name.removeprefix("persistent://")
        try:
            found = await admin.request(
                "GET", "persistent/" + "/".join(quote(p, safe="") for p in path.split("/")) + "/internalStats"
            )
        except NotFound:
            continue  # a partition or topic not created yet
        if isinstance(found, dict):
            out.append(found)
    return out


def _export_args(body: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], list[str]]:
    return lambda section: export_arguments(SETTINGS.admin_url, topics.full_name(body["spec"]), section)


def _namespace_args(body: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], list[str]]:
    scope = namespaces.broker_name(body["spec"])
    return lambda section: sweep_arguments(SETTINGS.admin_url, "--namespace", scope, section)


def _tenant_args(body: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], list[str]]:
    tenant = tenants.tenant_name(body["spec"], body["metadata"])
    return lambda section: sweep_arguments(SETTINGS.admin_url, "--tenant", tenant, section)


@kopf.on.resume(*topics.RESOURCE)
@kopf.on.create(*topics.RESOURCE)
@kopf.on.update(*topics.RESOURCE, field="spec")
async def apply_topic_export(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    await reconcile(body, patch, EXPORT_KIND, _export_args(body))


@kopf.on.resume(*namespaces.RESOURCE)
@kopf.on.create(*namespaces.RESOURCE)
@kopf.on.update(*namespaces.RESOURCE, field="spec")
async def apply_namespace_sweep(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    await reconcile(body, patch, SWEEP_KIND, _namespace_args(body))


@kopf.on.resume(*tenants.RESOURCE)
@kopf.on.create(*tenants.RESOURCE)
@kopf.on.update(*tenants.RESOURCE, field="spec")
async def apply_tenant_sweep(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    await reconcile(body, patch, SWEEP_KIND, _tenant_args(body))


@kopf.on.resume(*topics.RESOURCE)
@kopf.on.create(*topics.RESOURCE)
@kopf.on.update(*topics.RESOURCE, field="spec")
async def apply_topic_streaming_export(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    await reconcile_streaming(body, patch, "--topic", topics.full_name(body["spec"]))


@kopf.on.resume(*namespaces.RESOURCE)
@kopf.on.create(*namespaces.RESOURCE)
@kopf.on.update(*namespaces.RESOURCE, field="spec")
async def apply_namespace_streaming_export(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    await reconcile_streaming(body, patch, "--namespace", namespaces.broker_name(body["spec"]))


async def keep_spark_applications(logger: Any) -> None:
    """The `job` submitter (in job mode) and the status mirroring, every SPARK.poll_interval."""
    pod_security_context = SETTINGS.pod_security_context
    while True:
        try:
            kube = spark_kube()
            if SPARK.job_mode:
                now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
                await asyncio.to_thread(submit_pass, kube, now, pod_security_context)
            lags = await streaming_lags(kube)
            await asyncio.to_thread(mirror_pass, kube, lags)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the API server may be away for a moment; try again next pass
            logger.warning(f"spark applications pass failed: {exc}")
        await asyncio.sleep(SPARK.poll_interval)


@kopf.on.startup()
async def start_spark_loop(logger: Any, **_: Any) -> None:
    logger.info(f"spark jobs: {SPARK.submitter} submitter, image {SPARK.image}, pass every {SPARK.poll_interval:g}s")
    _tasks.append(asyncio.create_task(keep_spark_applications(logger), name="spark-applications"))


@kopf.on.cleanup()
async def stop_spark_loop(**_: Any) -> None:
    for task in _tasks:
        task.cancel()
    await asyncio.gather(*_tasks, return_exceptions=True)
    _tasks.clear()
