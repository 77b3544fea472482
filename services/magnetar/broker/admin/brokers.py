"""``/admin/v2/brokers...``: the live brokers of the cluster, the leader, and a broker's settings
(``pulsar-admin brokers``).

- ``GET /admin/v2/brokers`` and ``GET /admin/v2/brokers/{cluster}``: the ids of the live brokers
  (``host:port``; the standalone's one broker is ``standalone``), as Pulsar's active-broker list;
  another cluster answers 404, as for a cluster that does not exist;
- ``GET /admin/v2/brokers/leaderBroker``: Pulsar's ``LeaderBroker`` (``brokerId``, ``serviceUrl``):
  the load manager's leader, elected through the metadata store (broker/cluster/leader.py), the
  same answer from every broker;
- ``GET /admin/v2/brokers/configuration/runtime``: this broker's settings under Pulsar's
  broker.conf names, every value a string, as Pulsar's ``getRuntimeConfigurations``. Settings
  that hold a credential (a key's data, the parameters of a client plugin) are left out, so the
  answer can be shown and shared.

``GET /admin/v2/brokers/health`` (admin/health.py) is registered before these, so ``health`` is
never taken for a cluster name. All of them are a superuser's, as in Pulsar (authz/rules.py).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.protocol.errors import NotFound

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

__all__ = ["add_broker_routes", "runtime_configuration"]

# Settings whose broker.conf name is not the camelCase of the field's name.
_PULSAR_NAMES = {
    "host": "bindAddress",
    "port": "brokerServicePort",
    "web_port": "webServicePort",
    "default_ensemble_size": "managedLedgerDefaultEnsembleSize",
    "default_write_quorum": "managedLedgerDefaultWriteQuorum",
    "default_ack_quorum": "managedLedgerDefaultAckQuorum",
    "message_expiry_check_interval_minutes": "messageExpiryCheckIntervalInMinutes",
    "retention_check_interval_seconds": "retentionCheckIntervalInSeconds",
    "backlog_quota_check_interval_seconds": "backlogQuotaCheckIntervalInSeconds",
    "compaction_monitor_interval": "brokerServiceCompactionMonitorIntervalInSeconds",
    "compaction_threshold": "brokerServiceCompactionThresholdInBytes",
    "bookkeeper_tls_trust_certs_file_path": "bookkeeperTLSTrustCertsFilePath",
    "bookkeeper_tls_certificate_file_path": "bookkeeperTLSCertificateFilePath",
    "bookkeeper_tls_key_file_path": "bookkeeperTLSKeyFilePath",
    "bookkeeper_tls_client_authentication": "bookkeeperTLSClientAuthentication",
    "max_message_size": "maxMessageSize",
}
# Settings that hold a credential, never answered.
_SECRET = frozenset(
    {"token_secret_key", "broker_client_authentication_parameters", "bookkeeper_client_authentication_parameters"}
)


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(v) for v in value)
    return str(value)


def runtime_configuration(service: BrokerService) -> dict[str, str]:
    """The broker's settings by broker.conf name, as strings (module docstring)."""
    config = service.config
    out: dict[str, str] = {"clusterName": service.cluster}
    for f in dataclasses.fields(config):
        if f.name in _SECRET:
            continue
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for inner in dataclasses.fields(value):
                # The load balancer's fields carry their broker.conf key; the managed ledger's are
                # its camelCase names after managedLedger.
                key = inner.metadata.get("key") or "managedLedger" + _camel("_" + inner.name)
                out[key] = _text(getattr(value, inner.name))
            continue
        if isinstance(value, dict):
            value = ",".join(f"{k}:{v}" for k, v in value.items())
        out[_PULSAR_NAMES.get(f.name) or _camel(f.name)] = _text(value)
    return dict(sorted(out.items()))


def add_broker_routes(app: web.Application, service: BrokerService) -> None:
    """Register the broker routes; ``leaderBroker`` and ``configuration/runtime`` before ``{cluster}``."""
    r = app.router

    async def live_brokers() -> list[dict[str, str]]:
        if service.ownership is None:  # standalone: the one broker
            return [{"id": service.broker_id, "web_url": service.web_url or service.web_url_tls or ""}]
        return sorted(
            (
                {"id": b.broker_id, "web_url": b.web_url or b.web_url_tls or ""}
                for b in await service.ownership.live_brokers()
            ),
            key=lambda b: b["id"],
        )

    async def list_brokers(request: web.Request) -> web.StreamResponse:
        cluster = request.match_info.get("cluster")
        if cluster is not None and cluster != service.cluster:
            raise NotFound(f"Cluster {cluster} does not exist (this broker's cluster is {service.cluster})")
        return web.json_response([b["id"] for b in await live_brokers()])

    async def leader_broker(_request: web.Request) -> web.StreamResponse:
        manager = service.load_manager
        leader = await manager.election.leader() if manager is not None else None
        if leader is None:
            raise NotFound("no load-manager leader is elected (loadBalancerEnabled=false, or an election is under way)")
        return web.json_response(leader.to_doc())

    async def runtime(_request: web.Request) -> web.StreamResponse:
        return web.json_response(runtime_configuration(service))

    r.add_get("/admin/v2/brokers", list_brokers)
    r.add_get("/admin/v2/brokers/leaderBroker", leader_broker)
    r.add_get("/admin/v2/brokers/configuration/runtime", runtime)
    r.add_get("/admin/v2/brokers/{cluster}", list_brokers)
