"""Path tricks in tenant, namespace, topic and subscription names (WIRE.md R92), on the binary
protocol and on the admin REST API, against a real standalone.

Names become metadata-store keys, so each refusal is checked twice: the exact error, and the
store's keys before and after (read straight from the standalone's LMDB files, read-only) are the
same. A positive control shows the key listing does see what a valid request creates.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest
from tests.protocol.wire import session
from tests.support.standalone import StandaloneProcess, admin_call, run_standalone

from magnetar.protocol import commands as c


@pytest.fixture(scope="module")
def sa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    with run_standalone(tmp_path_factory.mktemp("names")) as proc:
        yield proc


def metadata_keys(sa: StandaloneProcess) -> set[str]:
    """Every key of the standalone's embedded store (a second, read-only LMDB reader)."""
    env = lmdb.open(str(Path(sa.data_dir) / "metadata"), readonly=True, max_dbs=3, subdir=True, lock=True)
    try:
        kv = env.open_db(b"kv", create=False)
        with env.begin(db=kv) as txn:
            return {bytes(k).decode(errors="replace") for k in txn.cursor().iternext(keys=True, values=False)}
    finally:
        env.close()


LONG = "x" * 256
# (topic name as a client would send it, what it tries)
BAD_TOPICS = [
    ("persistent://public/default/..", "dot-dot topic"),
    ("persistent://public/default/.", "dot topic"),
    ("persistent://public/../t", "dot-dot namespace"),
    ("persistent://../default/t", "dot-dot tenant"),
    ("public/default/a%2Fb", "encoded slash"),
    ("public/default/a%00b", "encoded NUL"),
    ("public/default/a\x00b", "NUL"),
    ("public/default/a\n", "trailing newline"),
    ("public/default/" + LONG, "256-character topic"),
    ("public/" + LONG + "/t", "256-character namespace"),
    ("public//t", "empty namespace"),
    ("persistent://public/default/", "empty topic"),
    ("persistent://public/default/a/b", "extra path part"),
    ("public/default/caf\u00e9", "non-ASCII"),
    ("public/default/a\uff0fb", "fullwidth solidus"),
    ("public/default/a\u202eb", "right-to-left override"),
]


@pytest.mark.parametrize("topic,what", BAD_TOPICS, ids=[w for _, w in BAD_TOPICS])
def test_binary_lookup_producer_and_subscribe_refuse_the_name(sa: StandaloneProcess, topic: str, what: str) -> None:
    before = metadata_keys(sa)
    wire = session(sa.service_url)
    try:
        for cmd in (
            c.lookup(topic),
            c.partitioned_metadata(topic),
            c.producer(topic, 1),
            c.subscribe(topic, "s", 1, c.SUB_EXCLUSIVE),
        ):
            answer = wire.request(cmd)
            assert answer["t"] == c.ERROR and answer["code"] == "InvalidTopicName", (cmd["t"], answer)
            assert answer["message"].startswith("invalid ") or "must be 'topic'" in answer["message"], answer
        # The connection stays usable for a valid name.
        assert wire.request(c.lookup("persistent://public/default/fine"))["t"] == c.LOOKUP_RESPONSE
    finally:
        wire.close()
    assert metadata_keys(sa) - before <= {k for k in metadata_keys(sa) if k.endswith("/fine") or "ownership" in k}


@pytest.mark.parametrize("sub", ["..", ".", "a/b", "a\x00b", "a\nb", "s" * 1025, ""])
def test_binary_subscribe_refuses_a_subscription_name_trick(sa: StandaloneProcess, sub: str) -> None:
    topic = f"persistent://public/default/subs-{uuid.uuid4().hex[:8]}"
    wire = session(sa.service_url)
    try:
        before = metadata_keys(sa)
        answer = wire.request(c.subscribe(topic, sub, 1, c.SUB_EXCLUSIVE))
        assert answer["t"] == c.ERROR and answer["code"] == "InvalidCommand", answer
        assert answer["message"].startswith("subscription name must be 1-1024 printable characters"), answer
        assert metadata_keys(sa) == before
    finally:
        wire.close()


def _raw(sa: StandaloneProcess, method: str, raw_path: str) -> tuple[int, str]:
    """An admin call with the path sent exactly as written (no quoting or normalising)."""
    req = urllib.request.Request(sa.admin_url + raw_path, data=b"" if method == "PUT" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# (method, path as sent, what the broker must call it)
BAD_PATHS = [
    ("PUT", "/admin/v2/tenants/a%2Fb", "Tenant name is not valid: 'a/b'"),
    ("PUT", "/admin/v2/tenants/%2e%2e", "Tenant name is not valid: '..'"),
    ("PUT", "/admin/v2/tenants/a%00b", "Tenant name is not valid: 'a\\x00b'"),
    ("PUT", "/admin/v2/tenants/caf%C3%A9", "Tenant name is not valid: 'café'"),
    ("PUT", "/admin/v2/namespaces/public/%2e%2e", "Namespace name is not valid: '..'"),
    ("PUT", "/admin/v2/namespaces/public/a%2F..%2Fb", "Namespace name is not valid: 'a/../b'"),
    ("DELETE", "/admin/v2/namespaces/public/%2e%2e", "Namespace name is not valid: '..'"),
    ("PUT", "/admin/v2/persistent/public/default/%2e%2e", "Topic name is not valid: '..'"),
    ("PUT", "/admin/v2/persistent/public/default/a%2F..%2F..%2Fb", "Topic name is not valid: 'a/../../b'"),
    ("PUT", "/admin/v2/persistent/public/default/a%0Ab", "Topic name is not valid: 'a\\nb'"),
    ("PUT", "/admin/v2/persistent/public/default/" + "y" * 256, "Topic name is not valid: '" + "y" * 100 + "...'"),
    ("PUT", "/admin/v2/persistent/public/default/t/partitions/..", None),  # not a route: 404/405
    ("PUT", "/admin/v2/persistent/public/default/t/subscription/%2e%2e", "Subscription name is not valid: '..'"),
    ("PUT", "/admin/v2/non-persistent/public/default/%2e%2e", "Topic name is not valid: '..'"),
    ("GET", "/lookup/v2/topic/persistent/public/default/a%2Fb", "Topic name is not valid: 'a/b'"),
]


@pytest.mark.parametrize("method,path,reason", BAD_PATHS, ids=[p for _, p, _ in BAD_PATHS])
def test_admin_paths_refuse_the_name_with_412(
    sa: StandaloneProcess, method: str, path: str, reason: str | None
) -> None:
    before = metadata_keys(sa)
    status, body = _raw(sa, method, path)
    if reason is None:
        assert status in (404, 405), (status, body)
    else:
        assert status == 412, (status, body)
        assert json.loads(body) == {"reason": reason}
    assert metadata_keys(sa) == before


def test_the_key_listing_sees_what_a_valid_request_creates(sa: StandaloneProcess) -> None:
    """The control: without it, the 'nothing was stored' checks above could pass vacuously."""
    ns = f"ok-{uuid.uuid4().hex[:6]}"
    before = metadata_keys(sa)
    status, body = admin_call(sa, "PUT", f"/admin/v2/namespaces/public/{ns}")
    assert status in (200, 204), body
    assert f"/namespaces/public/{ns}" in metadata_keys(sa) - before
