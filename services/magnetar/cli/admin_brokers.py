"""``magnetar-admin brokers`` and ``clusters``: pulsar-admin's verbs, flags and output.

- ``brokers list [cluster]`` prints the live brokers' ids one a line; ``leader-broker`` and
  ``get-runtime-config`` print JSON; ``healthcheck`` prints ``ok`` (and fails in one line when the
  broker does not answer), as pulsar-admin's.
- ``broker-stats load-report`` prints this broker's load report (Pulsar's LocalBrokerData JSON);
  ``broker-stats load-balancer`` (Magnetar's) the bundles' owners and the leader's recent moves.
- ``clusters list [-c]`` prints the cluster names one a line (``-c`` marks the broker's own with
  ``(*)``); ``get`` prints the ``ClusterData`` JSON; ``create`` and ``update`` take
  pulsar-admin's ``--url``, ``--url-secure``, ``--broker-url``, ``--broker-url-secure`` and the
  rest of its ``ClusterData`` options; ``delete [-a]`` removes a record (``-a`` first deletes every
  tenant's namespaces, topics and the tenants, as pulsar-admin's ``--all``).
"""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable
from typing import Any

from magnetar.cli.admin_http import PlainText, request_raw

Request = Callable[..., Any]

GROUPS = ("brokers", "clusters", "broker-stats")

# pulsar-admin's ClusterData options: flag -> (dest, ClusterData field, type).
_CLUSTER_FIELDS: tuple[tuple[str, str, str, Any], ...] = (
    ("--url", "cluster_url", "serviceUrl", str),
    ("--url-secure", "cluster_url_secure", "serviceUrlTls", str),
    ("--broker-url", "cluster_broker_url", "brokerServiceUrl", str),
    ("--broker-url-secure", "cluster_broker_url_secure", "brokerServiceUrlTls", str),
    ("--proxy-url", "cluster_proxy_url", "proxyServiceUrl", str),
    # not ``--auth-plugin``: that is magnetar-admin's own credentials, before the group
    ("--auth-parameters", "cluster_auth_parameters", "authenticationParameters", str),
    ("--proxy-protocol", "cluster_proxy_protocol", "proxyProtocol", str),
    ("--tls-trust-certs-filepath", "cluster_tls_trust_certs", "brokerClientTrustCertsFilePath", str),
    ("--tls-key-filepath", "cluster_tls_key", "brokerClientKeyFilePath", str),
    ("--tls-certs-filepath", "cluster_tls_certs", "brokerClientCertificateFilePath", str),
    ("--listener-name", "cluster_listener_name", "listenerName", str),
)
_CLUSTER_SWITCHES: tuple[tuple[str, str, str], ...] = (
    ("--tls-enable", "cluster_tls_enable", "brokerClientTlsEnabled"),
    ("--tls-allow-insecure", "cluster_tls_allow_insecure", "tlsAllowInsecureConnection"),
)


def add_broker_and_cluster_verbs(groups: Any) -> None:
    """Register the ``brokers`` and ``clusters`` groups on ``magnetar-admin``'s group subparsers."""
    b = groups.add_parser("brokers", help="the live brokers of the cluster").add_subparsers(
        dest="action", required=True
    )
    b.add_parser("list", help="the live brokers' ids").add_argument("cluster", nargs="?", default=None)
    b.add_parser("leader-broker", help="the leader broker")
    sp = b.add_parser("healthcheck", help="ok when the broker answers")
    sp.add_argument("-tv", "--topic-version", choices=["V1", "V2"], default=None, help="accepted, as pulsar-admin's")
    b.add_parser("get-runtime-config", help="the broker's settings by broker.conf name")

    s = groups.add_parser("broker-stats", help="the load manager's figures").add_subparsers(
        dest="action", required=True
    )
    s.add_parser("load-report", help="this broker's load report (LocalBrokerData)")
    s.add_parser("load-balancer", help="bundle owners and the leader's recent moves, with their reasons")

    c = groups.add_parser("clusters", help="cluster records (ClusterData)").add_subparsers(dest="action", required=True)
    sp = c.add_parser("list", help="the clusters' names")
    sp.add_argument("-c", "--current", action="store_true", help="mark the broker's own cluster with (*)")
    c.add_parser("get", help="a cluster's ClusterData").add_argument("cluster")
    for verb in ("create", "update"):
        sp = c.add_parser(verb, help=f"{verb} a cluster's record (superuser)")
        sp.add_argument("cluster")
        for flag, dest, _field, kind in _CLUSTER_FIELDS:
            sp.add_argument(flag, dest=dest, type=kind, default=None)
        sp.add_argument("--auth-plugin", dest="cluster_auth_plugin", default=None, help=argparse.SUPPRESS)
        for flag, dest, _field in _CLUSTER_SWITCHES:
            sp.add_argument(flag, dest=dest, action="store_true", default=None)
    sp = c.add_parser("delete", help="delete a cluster's record (superuser)")
    sp.add_argument("cluster")
    sp.add_argument("-a", "--all", dest="delete_all", action="store_true", help="delete every tenant's data first")


def _cluster_data(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for _flag, dest, field, _kind in _CLUSTER_FIELDS:
        if getattr(args, dest) is not None:
            body[field] = getattr(args, dest)
    if args.cluster_auth_plugin is not None:
        body["authenticationPlugin"] = args.cluster_auth_plugin
    for _flag, dest, field in _CLUSTER_SWITCHES:
        if getattr(args, dest):
            body[field] = True
    return body


def _cluster(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _delete_everything(url: str, request: Request) -> None:
    """pulsar-admin's ``clusters delete --all``: every tenant's topics and namespaces, then the tenants."""
    for tenant in request(url, "GET", "/admin/v2/tenants") or []:
        for namespace in request(url, "GET", f"/admin/v2/namespaces/{tenant}") or []:
            for topic in request(url, "GET", f"/admin/v2/persistent/{namespace}/partitioned") or []:
                request(url, "DELETE", f"/admin/v2/{topic.replace('://', '/')}/partitions?force=true")
            for topic in request(url, "GET", f"/admin/v2/persistent/{namespace}") or []:
                request(url, "DELETE", f"/admin/v2/{topic.replace('://', '/')}?force=true")
            request(url, "DELETE", f"/admin/v2/namespaces/{namespace}?force=true")
        request(url, "DELETE", f"/admin/v2/tenants/{tenant}?force=true")


def run_broker_or_cluster_verb(url: str, args: argparse.Namespace, request: Request) -> Any:
    """Run one ``brokers`` or ``clusters`` verb; what it prints (a list prints one item a line)."""
    g, a = args.group, args.action
    if g == "broker-stats":
        return request(url, "GET", f"/admin/v2/broker-stats/{a}")
    if g == "brokers":
        if a == "list":
            return request(url, "GET", "/admin/v2/brokers" + (f"/{_cluster(args.cluster)}" if args.cluster else ""))
        if a == "leader-broker":
            return request(url, "GET", "/admin/v2/brokers/leaderBroker")
        if a == "get-runtime-config":
            return request(url, "GET", "/admin/v2/brokers/configuration/runtime")
        if a == "healthcheck":
            _, body = request_raw(url, "GET", "/admin/v2/brokers/health")
            return PlainText(body.decode(errors="replace").strip() or "ok")
    if a == "list":
        clusters = list(request(url, "GET", "/admin/v2/clusters") or [])
        if not args.current:
            return clusters
        own = request(url, "GET", "/admin/v2/brokers/configuration/runtime").get("clusterName")
        return [f"{c}(*)" if c == own else c for c in clusters]
    path = f"/admin/v2/clusters/{_cluster(args.cluster)}"
    if a == "get":
        return request(url, "GET", path)
    if a == "create":
        return request(url, "PUT", path, _cluster_data(args))
    if a == "update":
        return request(url, "POST", path, _cluster_data(args))
    if a == "delete":
        if args.delete_all:
            _delete_everything(url, request)
        return request(url, "DELETE", path)
    raise SystemExit(f"unknown command {g} {a}")
