"""Fuzz the JSON bodies and query parameters of every POST/PUT route of the broker's admin API.

Why: the admin API takes JSON from operators' scripts and from the operator; a body of the wrong
shape must be refused as the caller's mistake (4xx with a JSON reason), never crash a handler
(500) or the broker. Each input is one request to a route of the table below (every POST and PUT
route the broker registers: admin.py, non_persistent_admin.py, permissions_admin.py,
isolation_admin.py, clusters_admin.py, schema_admin.py, trim_admin.py, compaction/admin.py), with
path parameters that are usually real (public/default, a real topic and subscription) and
sometimes garbage, a body that is a mutation of a valid one, any JSON value, or not JSON at all,
and random query parameters. Requests run on keep-alive connections, several at once.
Properties: no status >= 500 except 503 (retryable, e.g. no broker for an isolation group); every
4xx carries a JSON body; the broker stays alive and healthy; its log shows no traceback.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.parse
from collections import Counter
from typing import Any

import aiohttp
import pytest
from tests.fuzz.conftest import Figures, fuzz_examples, fuzz_timeout, log_problems
from tests.fuzz.values import any_int, any_text, any_value
from tests.support.standalone import StandaloneProcess, admin_call

pytestmark = [pytest.mark.fuzz, pytest.mark.timeout(fuzz_timeout())]

WORKERS = 8
T = "/admin/v2/persistent/{tenant}/{ns}/{topic}"
SUB = T + "/subscription/{sub}"
NS = "/admin/v2/namespaces/{tenant}/{ns}"
POLICIES = [
    "persistence", "retention", "messageTTL", "backlogQuota", "backlogQuotaMap", "deduplication",
    "deduplicationEnabled", "deduplicationSnapshotInterval", "maxProducersPerTopic", "maxConsumersPerTopic",
    "maxProducers", "maxConsumers", "compactionThreshold", "schemaCompatibilityStrategy",
    "schemaValidationEnforced", "isAllowAutoUpdateSchema", "publishRate", "dispatchRate",
    "subscriptionDispatchRate", "replicatorDispatchRate", "nope",
]  # fmt: skip
MSG_ID = {"ledgerId": 0, "entryId": 0, "partitionIndex": -1}
SCHEMA = {"type": "STRING", "schema": "", "properties": {}}
REQUEST_DEADLINE = 60.0  # an admin request unanswered this long is a failure
# (method, path template, a valid body or None)
ROUTES: list[tuple[str, str, Any]] = [
    ("PUT", "/admin/v2/tenants/{tenant}", {"adminRoles": ["r"], "allowedClusters": ["standalone"]}),
    ("POST", "/admin/v2/tenants/{tenant}", {"adminRoles": ["r"], "allowedClusters": ["standalone"]}),
    ("PUT", NS, None),
    ("POST", NS + "/{policy}", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 10}),
    ("PUT", T, None),
    ("PUT", T + "/partitions", 2),
    ("POST", T + "/partitions", 3),
    ("PUT", T + "/unload", None),
    ("PUT", SUB, MSG_ID),
    ("POST", SUB + "/resetcursor/{n}", None),
    ("POST", SUB + "/resetcursor", MSG_ID),
    ("POST", SUB + "/skip/{n}", None),
    ("POST", SUB + "/skip_all", None),
    ("POST", SUB + "/expireMessages/{n}", None),
    ("POST", T + "/all_subscription/expireMessages/{n}", None),
    ("POST", T + "/{policy}", 10),
    ("PUT", T + "/compaction", None),
    ("POST", T + "/trim", None),
    ("PUT", "/admin/v2/non-persistent/{tenant}/{ns}/{topic}", None),
    ("PUT", "/admin/v2/non-persistent/{tenant}/{ns}/{topic}/partitions", 2),
    ("POST", "/admin/v2/non-persistent/{tenant}/{ns}/{topic}/subscription/{sub}/skip/{n}", None),
    ("POST", NS + "/permissions/{role}", ["produce", "consume"]),
    ("POST", NS + "/permissions/subscription/{sub}", ["r"]),
    ("POST", NS + "/subscriptionAuthMode", "Prefix"),
    ("POST", T + "/permissions/{role}", ["produce"]),
    ("POST", "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies/{policy}", {
        "namespaces": ["public/default"], "primary": ["127.0.0.1.*"], "secondary": [],
        "auto_failover_policy": {
            "policy_type": "min_available", "parameters": {"min_limit": "1", "usage_threshold": "80"},
        },
    }),
    ("PUT", "/admin/v2/clusters/{cluster}", {"serviceUrl": "http://127.0.0.1:1"}),
    ("POST", "/admin/v2/clusters/{cluster}", {"serviceUrl": "http://127.0.0.1:1"}),
    ("POST", "/admin/v2/schemas/{tenant}/{ns}/{topic}/schema", SCHEMA),
    ("POST", "/admin/v2/schemas/{tenant}/{ns}/{topic}/compatibility", SCHEMA),
    ("POST", "/admin/v2/schemas/{tenant}/{ns}/{topic}/version", SCHEMA),
    ("PUT", NS + "/schemaCompatibilityStrategy", "FULL"),
    ("PUT", T + "/schemaCompatibilityStrategy", "FULL"),
]  # fmt: skip
QUERY_KEYS = ["force", "authoritative", "isPersistent", "backlogQuotaType", "applied", "isGlobal", "x", "partition"]


def _json_safe(value: Any) -> Any:
    """``value`` with bytes turned to text (JSON has no bytes)."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {str(_json_safe(k)): _json_safe(v) for k, v in value.items()}
    return value


def _mutate(rng: random.Random, value: Any) -> Any:
    """The valid body with one part replaced, dropped or added, at any depth."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        out = dict(value)
        key = rng.choice(list(out))
        r = rng.random()
        if r < 0.3:
            del out[key]
        elif r < 0.8:
            out[key] = _mutate(rng, out[key]) if rng.random() < 0.5 else _json_safe(any_value(rng))
        else:
            out[any_text(rng)] = _json_safe(any_value(rng))
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        out_list = list(value)
        out_list[rng.randrange(len(out_list))] = _json_safe(any_value(rng))
        return out_list
    if isinstance(value, int) and not isinstance(value, bool) and rng.random() < 0.7:
        return any_int(rng)
    return _json_safe(any_value(rng))


# Partition counts the fuzzer lets the broker accept. Every accepted count up to the broker's
# MAX_PARTITIONS (10,000) is valid, but each later subscription call on that topic then runs on
# every partition: a long run that made a topic of hundreds of partitions fell from about 4,000 to
# a few inputs per second, spending its time loading partitions rather than trying inputs. Counts
# above the cap still go through (refused), and so do all the malformed ones.
FEW_PARTITIONS = 16


def _few_partitions(body: bytes | None) -> bytes | None:
    """``body`` with an accepted partition count above ``FEW_PARTITIONS`` folded into 1..16."""
    try:
        n = json.loads(body) if body is not None else None
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return body
    if isinstance(n, int) and not isinstance(n, bool) and FEW_PARTITIONS < n <= 10_000:
        return json.dumps(n % FEW_PARTITIONS + 1).encode()
    return body


class Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def segment(self, real: str) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.85:
            return real
        if r < 0.95:  # (at most 1000 characters: a request line past 8 KiB is refused by the HTTP parser)
            return urllib.parse.quote((any_text(rng) or "x")[:1000], safe="")
        return str(any_int(rng))

    def request(self) -> tuple[str, str, bytes | None, dict[str, str]]:
        rng = self.rng
        method, template, valid = rng.choice(ROUTES)
        path = template.format(
            tenant=self.segment("public"),
            ns=self.segment(rng.choice(["default", "fuzz"])),
            topic=self.segment(rng.choice(["a", "b", "p"])),
            sub=self.segment(rng.choice(["s", "s2"])),
            policy=self.segment(rng.choice(POLICIES)) if "{policy}" in template else "",
            role=self.segment("role"),
            cluster=self.segment("standalone"),
            n=self.segment(str(rng.choice([0, 1, 5, 1_700_000_000_000]))) if rng.random() < 0.6 else str(any_int(rng)),
        )
        r = rng.random()
        body: bytes | None
        if r < 0.35:
            body = json.dumps(_mutate(rng, valid) if valid is not None else _json_safe(any_value(rng))).encode()
        elif r < 0.5:
            body = json.dumps(valid).encode() if valid is not None else None
        elif r < 0.75:
            body = json.dumps(_json_safe(any_value(rng))).encode()
        elif r < 0.85:
            body = None
        else:
            body = rng.choice(
                [b"{", b"nul", b"[1,", b"\xff\xfe", b'{"a": NaN}', b"1e999", b"-", b"[" * 5000 + b"]" * 5000]
            )
        if template.endswith("/partitions"):
            body = _few_partitions(body)
        query = {}
        for _ in range(rng.choice([0, 0, 1, 2])):
            query[rng.choice(QUERY_KEYS)] = rng.choice(
                ["true", "false", "", "1", "-1", "x" * 50, "destination_storage"]
            )
        return method, path, body, query


def test_admin_bodies(fuzz_standalone: StandaloneProcess, figures: Figures) -> None:
    sa = fuzz_standalone
    admin_call(sa, "PUT", "/admin/v2/namespaces/public/fuzz")
    log_offset = sa.log_path.stat().st_size
    total = fuzz_examples()
    rng = random.Random(figures.seed)
    statuses: Counter[int] = Counter()
    failures: list[str] = []

    async def worker(gen: Generator, session: aiohttp.ClientSession) -> None:
        while figures.inputs < total:
            method, path, body, query = gen.request()
            figures.inputs += 1
            headers = {"Content-Type": "application/json"}
            what = f"{method} {path} {query} body={body!r:.300}"
            try:
                async with asyncio.timeout(REQUEST_DEADLINE):
                    resp = await session.request(method, sa.admin_url + path, data=body, params=query, headers=headers)
                    raw = await resp.read()
            except TimeoutError:
                failures.append(f"{what} -> no answer in {REQUEST_DEADLINE}s")
                print("FUZZ admin: unanswered:", failures[-1])
                continue
            statuses[resp.status] += 1
            bad = resp.status >= 500 and resp.status != 503
            if 400 <= resp.status < 500:
                try:
                    json.loads(raw)
                except ValueError:
                    bad = True
            if bad and len(failures) < 20:
                failures.append(f"{what} -> {resp.status} {raw!r:.300}")
            if figures.inputs % 500 == 0:
                assert sa.proc is not None and sa.proc.poll() is None, "the broker died"

    async def main() -> None:
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(worker(Generator(random.Random(rng.random())), session) for _ in range(WORKERS)))
            async with session.get(sa.admin_url + "/admin/v2/brokers/health") as resp:
                assert resp.status == 200, "the broker is not healthy after the fuzzing"

    asyncio.run(main())
    print("FUZZ admin statuses:", dict(sorted(statuses.items())))
    figures.extra.update({f"http_{k}": v for k, v in statuses.items()})
    assert not failures, "server errors or non-JSON refusals:\n" + "\n".join(failures)
    problems = log_problems(sa.log_path, log_offset)
    assert not problems, f"unexpected exceptions in the broker log: {problems[:10]}"
