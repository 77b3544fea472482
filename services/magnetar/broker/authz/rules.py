"""Which role may call which admin REST route: one table, Pulsar's operation classes (R74).

Each route, by method and aiohttp route pattern, names a ``Rule``: who is asked and the
operation's name in Pulsar's refusal message.

- ``SUPERUSER``: cluster-wide things (tenants' creation, change, deletion and listing; bookies;
  namespace isolation policies; a cluster's record). A route missing from this table is superuser-only too, so a
  new route can never be open by omission; test_authorization_routes.py walks the router of a
  running broker and fails for any route not listed here, so none stays unclassified.
- ``TENANT``: a tenant's admins (``adminRoles``) or a superuser: the tenant's namespaces, its
  policies and grants, creating, deleting, unloading, compacting and trimming its topics, topic
  policies (Pulsar's TenantOperation / NamespaceOperation / PolicyOperation checks and the
  topic operations that need admin access: TERMINATE, COMPACT, UNLOAD, ...).
- ``LOOKUP``: a ``produce`` or ``consume`` grant (Pulsar's LOOKUP, GET_STATS, GET_METADATA).
- ``CONSUME``: a ``consume`` grant, with the namespace's subscription rules when the route names
  a subscription (SUBSCRIBE, UNSUBSCRIBE, SKIP, EXPIRE_MESSAGES, PEEK_MESSAGES, RESET_CURSOR,
  GET_SUBSCRIPTIONS).
- ``NAMESPACE_READ``: a namespace-level ``produce`` or ``consume`` grant (GET_TOPICS: the topic
  lists of a namespace).
- ``OPEN``: the probes, ``/metrics`` and the cluster list (``GET /admin/v2/clusters``, which
  Pulsar answers for any authenticated role); authentication already decides on them.

Tenant admins and superusers pass every rule but ``SUPERUSER`` for their tenant. A route both
topic domains (``persistent``, ``non-persistent``) have has the same rule in both.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    OPEN = "open"
    SUPERUSER = "superuser"
    TENANT = "tenant"
    NAMESPACE_READ = "namespace-read"
    LOOKUP = "lookup"
    CONSUME = "consume"


@dataclass(frozen=True, slots=True)
class Rule:
    kind: Kind
    operation: str  # Pulsar's operation name, for the refusal message


SUPERUSER_ONLY = Rule(Kind.SUPERUSER, "SUPERUSER")

_NS = "/admin/v2/namespaces/{tenant}/{ns}"
_ISOLATION = "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies"

RULES: dict[tuple[str, str], Rule] = {
    ("GET", "/admin/v2/brokers/health"): Rule(Kind.OPEN, "HEALTH"),
    ("GET", "/ready"): Rule(Kind.OPEN, "READY"),
    ("GET", "/metrics"): Rule(Kind.OPEN, "METRICS"),
    # tenants
    ("GET", "/admin/v2/tenants"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/tenants/{tenant}"): Rule(Kind.TENANT, "GET_TENANT"),
    ("PUT", "/admin/v2/tenants/{tenant}"): SUPERUSER_ONLY,
    ("POST", "/admin/v2/tenants/{tenant}"): SUPERUSER_ONLY,
    ("DELETE", "/admin/v2/tenants/{tenant}"): SUPERUSER_ONLY,
    # namespaces, their policies and their grants
    ("GET", "/admin/v2/namespaces/{tenant}"): Rule(Kind.TENANT, "LIST_NAMESPACES"),
    ("GET", _NS): Rule(Kind.TENANT, "GET_POLICIES"),
    ("PUT", _NS): Rule(Kind.TENANT, "CREATE_NAMESPACE"),
    ("DELETE", _NS): Rule(Kind.TENANT, "DELETE_NAMESPACE"),
    ("GET", _NS + "/{policy}"): Rule(Kind.TENANT, "READ_POLICY"),
    ("POST", _NS + "/{policy}"): Rule(Kind.TENANT, "WRITE_POLICY"),
    ("DELETE", _NS + "/{policy}"): Rule(Kind.TENANT, "WRITE_POLICY"),
    ("GET", _NS + "/permissions"): Rule(Kind.TENANT, "GET_PERMISSION"),
    ("POST", _NS + "/permissions/{role}"): Rule(Kind.TENANT, "GRANT_PERMISSION"),
    ("DELETE", _NS + "/permissions/{role}"): Rule(Kind.TENANT, "REVOKE_PERMISSION"),
    ("GET", _NS + "/permissions/subscription"): Rule(Kind.TENANT, "GET_PERMISSION"),
    ("POST", _NS + "/permissions/subscription/{subscription}"): Rule(Kind.TENANT, "GRANT_PERMISSION"),
    ("DELETE", _NS + "/permissions/{subscription}/{role}"): Rule(Kind.TENANT, "REVOKE_PERMISSION"),
    ("GET", _NS + "/subscriptionAuthMode"): Rule(Kind.TENANT, "READ_POLICY"),
    # bundles (broker/admin/bundles.py): Pulsar's BUNDLE policy read and UNLOAD are the tenant's;
    # a split is a superuser's
    ("GET", _NS + "/bundles"): Rule(Kind.TENANT, "READ_POLICY"),
    ("PUT", _NS + "/unload"): Rule(Kind.TENANT, "UNLOAD"),
    ("PUT", _NS + "/{bundle}/unload"): Rule(Kind.TENANT, "UNLOAD"),
    ("PUT", _NS + "/{bundle}/split"): SUPERUSER_ONLY,
    ("POST", _NS + "/subscriptionAuthMode"): Rule(Kind.TENANT, "WRITE_POLICY"),
    # schema policies (broker/admin/schemas.py): Pulsar's PUT, and GETs that answer the defaults
    ("PUT", _NS + "/schemaCompatibilityStrategy"): Rule(Kind.TENANT, "WRITE_POLICY"),
    ("GET", _NS + "/schemaCompatibilityStrategy"): Rule(Kind.TENANT, "READ_POLICY"),
    ("GET", _NS + "/schemaValidationEnforced"): Rule(Kind.TENANT, "READ_POLICY"),
    ("GET", _NS + "/isAllowAutoUpdateSchema"): Rule(Kind.TENANT, "READ_POLICY"),
    # clusters: Pulsar's ClustersBase.getClusters checks no role (any authenticated caller);
    # its namespace isolation policy routes are superuser-only (broker/admin/isolation.py)
    ("GET", "/admin/v2/clusters"): Rule(Kind.OPEN, "LIST_CLUSTERS"),
    # a cluster's record (R113): Pulsar's cluster operations (GET_CLUSTER, CREATE_CLUSTER,
    # UPDATE_CLUSTER) are a superuser's
    ("GET", "/admin/v2/clusters/{cluster}"): SUPERUSER_ONLY,
    ("PUT", "/admin/v2/clusters/{cluster}"): SUPERUSER_ONLY,
    ("POST", "/admin/v2/clusters/{cluster}"): SUPERUSER_ONLY,
    ("DELETE", "/admin/v2/clusters/{cluster}"): SUPERUSER_ONLY,
    # brokers (broker/admin/brokers.py): Pulsar's BrokersBase checks a superuser
    ("GET", "/admin/v2/brokers"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/brokers/{cluster}"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/brokers/leaderBroker"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/brokers/configuration/runtime"): SUPERUSER_ONLY,
    # broker-stats (broker/admin/broker_stats.py): Pulsar's BrokerStatsBase checks a superuser
    ("GET", "/admin/v2/broker-stats/load-report"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/broker-stats/load-balancer"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces"): SUPERUSER_ONLY,
    ("POST", "/admin/v2/brokers/shutdown"): SUPERUSER_ONLY,
    ("GET", _ISOLATION): SUPERUSER_ONLY,
    ("GET", _ISOLATION + "/brokers"): SUPERUSER_ONLY,
    ("GET", _ISOLATION + "/brokers/{broker}"): SUPERUSER_ONLY,
    ("GET", _ISOLATION + "/{policy}"): SUPERUSER_ONLY,
    ("POST", _ISOLATION + "/{policy}"): SUPERUSER_ONLY,
    ("DELETE", _ISOLATION + "/{policy}"): SUPERUSER_ONLY,
    # bookies (broker/admin/bookies.py): cluster-wide, as Pulsar's BookiesBase (superuser)
    ("GET", "/admin/v2/bookies"): SUPERUSER_ONLY,
    ("GET", "/admin/v2/bookies/underreplicated"): SUPERUSER_ONLY,
    ("POST", "/admin/v2/bookies/{bookie}/decommission"): SUPERUSER_ONLY,
    ("DELETE", "/admin/v2/bookies/{bookie}"): SUPERUSER_ONLY,
}

# Topic routes, by method and the pattern after ``/admin/v2/{domain}/{tenant}/{ns}``: those of
# both domains, then those only one domain has (admin/non_persistent.py registers its own set).
_TOPIC_ROUTES: dict[tuple[str, str], Rule] = {
    ("GET", ""): Rule(Kind.NAMESPACE_READ, "GET_TOPICS"),
    ("GET", "/partitioned"): Rule(Kind.NAMESPACE_READ, "GET_TOPICS"),
    ("PUT", "/{topic}"): Rule(Kind.TENANT, "CREATE_TOPIC"),
    ("DELETE", "/{topic}"): Rule(Kind.TENANT, "DELETE_TOPIC"),
    ("GET", "/{topic}/partitions"): Rule(Kind.LOOKUP, "GET_METADATA"),
    ("PUT", "/{topic}/partitions"): Rule(Kind.TENANT, "CREATE_TOPIC"),
    ("POST", "/{topic}/partitions"): Rule(Kind.TENANT, "UPDATE_METADATA"),
    ("DELETE", "/{topic}/partitions"): Rule(Kind.TENANT, "DELETE_TOPIC"),
    ("GET", "/{topic}/stats"): Rule(Kind.LOOKUP, "GET_STATS"),
    ("GET", "/{topic}/partitioned-stats"): Rule(Kind.LOOKUP, "GET_STATS"),
    ("GET", "/{topic}/internalStats"): Rule(Kind.LOOKUP, "GET_STATS"),
    ("GET", "/{topic}/subscriptions"): Rule(Kind.CONSUME, "GET_SUBSCRIPTIONS"),
    ("GET", "/{topic}/permissions"): Rule(Kind.TENANT, "GET_PERMISSION"),
    ("POST", "/{topic}/permissions/{role}"): Rule(Kind.TENANT, "GRANT_PERMISSION"),
    ("DELETE", "/{topic}/permissions/{role}"): Rule(Kind.TENANT, "REVOKE_PERMISSION"),
    ("POST", "/{topic}/subscription/{sub}/resetcursor/{timestamp}"): Rule(Kind.CONSUME, "RESET_CURSOR"),
    ("POST", "/{topic}/subscription/{sub}/resetcursor"): Rule(Kind.CONSUME, "RESET_CURSOR"),
    ("POST", "/{topic}/subscription/{sub}/skip/{count}"): Rule(Kind.CONSUME, "SKIP"),
    ("POST", "/{topic}/subscription/{sub}/skip_all"): Rule(Kind.CONSUME, "SKIP"),
    ("POST", "/{topic}/subscription/{sub}/expireMessages/{seconds}"): Rule(Kind.CONSUME, "EXPIRE_MESSAGES"),
    ("POST", "/{topic}/all_subscription/expireMessages/{seconds}"): Rule(Kind.CONSUME, "EXPIRE_MESSAGES"),
    ("GET", "/{topic}/subscription/{sub}/position/{position}"): Rule(Kind.CONSUME, "PEEK_MESSAGES"),
}
_PERSISTENT_ONLY: dict[tuple[str, str], Rule] = {
    ("PUT", "/{topic}/unload"): Rule(Kind.TENANT, "UNLOAD"),
    ("PUT", "/{topic}/compaction"): Rule(Kind.TENANT, "COMPACT"),
    ("GET", "/{topic}/compaction"): Rule(Kind.TENANT, "COMPACT"),
    ("POST", "/{topic}/trim"): Rule(Kind.TENANT, "TRIM_TOPIC"),
    ("PUT", "/{topic}/subscription/{sub}"): Rule(Kind.CONSUME, "SUBSCRIBE"),
    ("DELETE", "/{topic}/subscription/{sub}"): Rule(Kind.CONSUME, "UNSUBSCRIBE"),
    ("GET", "/{topic}/{policy}"): Rule(Kind.TENANT, "READ_TOPIC_POLICY"),
    ("POST", "/{topic}/{policy}"): Rule(Kind.TENANT, "WRITE_TOPIC_POLICY"),
    ("PUT", "/{topic}/schemaCompatibilityStrategy"): Rule(Kind.TENANT, "WRITE_TOPIC_POLICY"),
    ("DELETE", "/{topic}/{policy}"): Rule(Kind.TENANT, "WRITE_TOPIC_POLICY"),
}
_NON_PERSISTENT_ONLY: dict[tuple[str, str], Rule] = {
    ("GET", "/{topic}/lastMessageId"): Rule(Kind.CONSUME, "PEEK_MESSAGES"),
}
for _domain, _only in (("persistent", _PERSISTENT_ONLY), ("non-persistent", _NON_PERSISTENT_ONLY)):
    RULES[("GET", f"/lookup/v2/topic/{_domain}/{{tenant}}/{{ns}}/{{topic}}")] = Rule(Kind.LOOKUP, "LOOKUP")
    for (_method, _suffix), _rule in {**_TOPIC_ROUTES, **_only}.items():
        RULES[(_method, f"/admin/v2/{_domain}/{{tenant}}/{{ns}}{_suffix}")] = _rule


# The schema registry (broker/admin/schemas.py), Pulsar's SchemasResource: reading and testing a
# schema need a produce or consume grant (as the binary get_schema, R121); changing it is an admin's.
_SCHEMAS = "/admin/v2/schemas/{tenant}/{ns}/{topic}"
RULES.update(
    {
        ("GET", _SCHEMAS + "/schema"): Rule(Kind.LOOKUP, "GET_SCHEMA"),
        ("GET", _SCHEMAS + "/schema/{version}"): Rule(Kind.LOOKUP, "GET_SCHEMA"),
        ("GET", _SCHEMAS + "/schemas"): Rule(Kind.LOOKUP, "GET_SCHEMA"),
        ("POST", _SCHEMAS + "/compatibility"): Rule(Kind.LOOKUP, "GET_SCHEMA"),
        ("POST", _SCHEMAS + "/version"): Rule(Kind.LOOKUP, "GET_SCHEMA"),
        ("POST", _SCHEMAS + "/schema"): Rule(Kind.TENANT, "PRODUCE"),
        ("DELETE", _SCHEMAS + "/schema"): Rule(Kind.TENANT, "DELETE_SCHEMA"),
    }
)


def rule_for(method: str, pattern: str | None) -> Rule:
    """The rule of a route (``pattern`` as registered with aiohttp); superuser-only if unknown.
    HEAD is answered by GET routes, so it follows GET's rule."""
    if pattern is None:
        return SUPERUSER_ONLY
    return RULES.get(("GET" if method == "HEAD" else method, pattern), SUPERUSER_ONLY)
