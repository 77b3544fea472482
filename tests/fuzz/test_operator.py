"""Fuzz the operator's handling of specs, in process: Tenant, Namespace, Topic, BookieEnsemble.

Why: the operator turns every spec a user applies into broker calls and Kubernetes objects; a spec
it cannot honour must end as its own clear rejection (``InvalidSpec``, or its ``InvalidSchema``
subclass, which ``reconciling.run`` turns into a condition and a kopf.PermanentError), never as an
unhandled exception that kopf retries forever with a traceback.

Specs are generated from each CRD's ``openAPIV3Schema`` (crds/*.yaml: types, enums, minimums and
maximums, patterns, required fields), because the API server refuses anything else before the
operator sees it; within that, every value is random (edge integers, empty and odd strings, JSON
and non-JSON schema definitions, maps of any size). Each spec goes through every pure function
the reconcilers call on it: ``policies.validate``/``desired`` (both levels), ``topic_schema``
``validate``/``payload``, ``topics.full_name``/``check_partitions``, ``namespaces.broker_name``,
``tenants.tenant_info``/``isolated_set``/``isolation_policy.policy_data``, and
``bookies.build_bookie_children`` with ``plan_scale_down``. Property: each returns, or raises
``InvalidSpec``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.fuzz.conftest import Figures, fuzz_examples, fuzz_timeout
from tests.fuzz.values import EDGE_INTS, any_text

from magnetar_operator import bookie_ensembles, bookies, isolation_policy, namespaces, policies, tenants, topic_schema
from magnetar_operator import topics as topic_specs
from magnetar_operator.policies import InvalidSpec

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]

CRDS = Path(__file__).resolve().parents[2] / "crds"
NAME_CHARS = "abcXYZ019_.=:-"


def spec_schema(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load((CRDS / f"magnetar.dev_{kind}.yaml").read_text())
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _string(rng: random.Random, schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return str(rng.choice(schema["enum"]))
    pattern = schema.get("pattern")
    limit = min(int(schema.get("maxLength", 300)), 300)
    for _ in range(20):
        if pattern and "/" in pattern:
            text = _name(rng) + "/" + _name(rng)
        elif pattern:
            text = _name(rng)
        else:
            text = (
                any_text(rng)
                if rng.random() < 0.5
                else rng.choice(["", "{}", "[]", '"string"', '{"type": "record"}', "x"])
            )
        text = text[:limit]
        if len(text) >= int(schema.get("minLength", 0)) and (not pattern or re.search(pattern, text)):
            return text
    return "a/b" if pattern and "/" in pattern else "a"


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(NAME_CHARS) for _ in range(rng.randrange(1, 12)))


def _integer(rng: random.Random, schema: dict[str, Any]) -> int:
    low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1)
    candidates = [v for v in [*EDGE_INTS, low, high, low + 1, high - 1] if low <= v <= high]
    if rng.random() < 0.6 and candidates:
        return int(rng.choice(candidates))
    return rng.randint(int(max(low, -(10**6))), int(min(high, 10**6)) if high >= max(low, -(10**6)) else int(high))


def generate(rng: random.Random, schema: dict[str, Any], depth: int = 0) -> Any:
    """A random value the schema accepts (the subset of OpenAPI v3 the CRDs use)."""
    kind = schema.get("type")
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if kind == "object" or "properties" in schema:
        props: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        out = {k: generate(rng, v, depth + 1) for k, v in props.items() if k in required or rng.random() < 0.5}
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-preserve-unknown-fields") or extra:
            sub = extra if isinstance(extra, dict) else {"type": rng.choice(["string", "integer", "boolean"])}
            for _ in range(rng.randrange(0, 3)):
                out.setdefault(_name(rng), generate(rng, sub, depth + 1))
        return out
    if kind == "array":
        items = schema.get("items", {"type": "string"})
        return [generate(rng, items, depth + 1) for _ in range(rng.randrange(0, 4))]
    if kind == "integer":
        return _integer(rng, schema)
    if kind == "number":
        return rng.choice([0, 0.5, -1.0, 1e300, 3])
    if kind == "boolean":
        return rng.random() < 0.5
    if schema.get("x-kubernetes-int-or-string"):
        return rng.choice([_integer(rng, {"minimum": 0}), _string(rng, {})])
    return _string(rng, schema)


def run_tenant(rng: random.Random, spec: dict[str, Any]) -> None:
    meta = {"name": _name(rng).lower() or "t", "namespace": "magnetar"}
    tenants.tenant_name(spec, meta)
    tenants.same_info(tenants.tenant_info(spec), {})
    bs = tenants.isolated_set(spec, meta)
    if bs is not None:
        isolation_policy.policy_data(tenants.tenant_name(spec, meta), bs)


def run_namespace(rng: random.Random, spec: dict[str, Any]) -> None:
    namespaces.broker_name(spec)
    policies.validate(spec)
    for name, policy in policies.desired(spec, level="namespace").items():
        policies.matches(policy.body, policy.body)
        policies.endpoint_of(name, level="namespace")
    policies.backlog_type(spec)


def run_topic(rng: random.Random, spec: dict[str, Any]) -> None:
    topic_specs.full_name(spec)
    policies.validate(spec)
    policies.desired(spec, level="topic")
    topic_schema.validate(spec)
    topic_schema.payload(spec)
    topic_specs.check_partitions(int(spec.get("partitions", 0)), rng.choice([0, 1, 5, 4096]), rng.random() < 0.3)


def run_bookies(rng: random.Random, spec: dict[str, Any]) -> None:
    children = bookies.build_bookie_children(
        spec, "bk", "magnetar", pdb_api_version=rng.choice(["policy/v1", "policy/v1beta1"]), replicas=None
    )
    assert children, "a bookie ensemble without children"
    bookie_ensembles.plan_scale_down("bk", "magnetar", int(spec["replicas"]), rng.choice([None, 0, 1, 3, 100]))


TARGETS = {"tenants": run_tenant, "namespaces": run_namespace, "topics": run_topic, "bookieensembles": run_bookies}


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_operator_specs(kind: str, figures: Figures) -> None:
    rng = random.Random(f"{figures.seed}-{kind}")
    schema = spec_schema(kind)
    run = TARGETS[kind]
    rejected = 0
    for _ in range(fuzz_examples()):
        spec = generate(rng, schema)
        try:
            run(rng, spec)
        except InvalidSpec:
            rejected += 1
        except Exception as exc:
            pytest.fail(f"{kind}: {type(exc).__name__}: {exc} for the spec {spec!r:.1500}")
        figures.inputs += 1
    figures.bump("rejected", rejected)
