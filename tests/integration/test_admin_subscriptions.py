"""The subscription verbs of the admin API (Pulsar's paths) and of ``magnetar-admin``: reset
cursor (by time and by message id), skip, clear backlog, expire, peek; on a real standalone, and
forwarded to the owning broker in a two-broker cluster."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from tests.protocol.wire import Wire, next_message, open_consumer, open_producer, publish, session
from tests.support.cluster import LocalCluster, two_broker_cluster
from tests.support.standalone import StandaloneProcess
from tests.support.standalone import admin_call as call

from magnetar.cli.admin import main as admin_main
from magnetar.protocol import commands as c
from magnetar.protocol.batch import encode_batch, make_record

HOUR_MS = 3600 * 1000


def send(wire: Wire, seq: int, *records: list[Any], publish_time: int | None = None, batched: bool = True) -> Any:
    """Publish one entry of ``records`` (producer id 1); returns its receipt."""
    meta, payload = encode_batch(list(records), producer_name="admin-tests", first_sequence_id=seq, batched=batched)
    if publish_time is not None:
        meta["pt"] = publish_time
    wire.send(c.send(1, seq, meta, payload))
    receipt = wire.next(lambda f: f.get("t") in (c.SEND_RECEIPT, c.SEND_ERROR) and f.get("seq") == seq)
    assert receipt["t"] == c.SEND_RECEIPT, receipt
    return receipt


def rec(payload: bytes, seq: int, **properties: str) -> list[Any]:
    return make_record(payload, properties or None, None, 0, seq)


def sub_path(topic: str, sub: str) -> str:
    return f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/subscription/{sub}"


def backlog(sa: StandaloneProcess, topic: str, sub: str) -> int:
    status, body = call(sa, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    assert status == 200, body
    value: int = body["subscriptions"][sub]["msgBacklog"]
    return value


def post(sa: StandaloneProcess, path: str, body: Any = None) -> None:
    status, reply = call(sa, "POST", path, body)
    assert status == 204, f"POST {path}: {status} {reply}"


def peek(admin_url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(admin_url + path, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {}, exc.read()


def test_reset_cursor_by_time_and_by_message_id(standalone: StandaloneProcess, topic: str) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        entries = [send(wire, i, rec(b"m%d" % i, i), publish_time=1000 * (i + 1)) for i in range(4)]
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        wire.send(c.flow(1, 100))
        delivered = [next_message(wire, 1) for _ in entries]
        assert wire.request(c.ack(1, c.ACK_INDIVIDUAL, [[m["ledger"], m["entry"]] for m in delivered]))["t"] == (
            c.ACK_RESPONSE
        )
        assert backlog(standalone, topic, "s") == 0
        post(standalone, sub_path(topic, "s") + "/resetcursor/2500")
        assert backlog(standalone, topic, "s") == 2
        assert next_message(wire, 1)["entry"] == entries[2]["entry"]  # the connected consumer gets them again
        second = entries[1]
        post(
            standalone,
            sub_path(topic, "s") + "/resetcursor",
            {"ledgerId": second["ledger"], "entryId": second["entry"]},
        )
        assert backlog(standalone, topic, "s") == 3
        body = {"ledgerId": second["ledger"], "entryId": second["entry"], "isExcluded": True}
        post(standalone, sub_path(topic, "s") + "/resetcursor", body)
        assert backlog(standalone, topic, "s") == 2
        post(standalone, sub_path(topic, "s") + "/resetcursor", {"ledgerId": -1, "entryId": -1})
        assert backlog(standalone, topic, "s") == 4
    status, reply = call(standalone, "POST", sub_path(topic, "nope") + "/resetcursor/0")
    assert status == 404 and reply["reason"] == f"Subscription nope not found for topic {topic}"
    status, reply = call(standalone, "POST", sub_path(topic, "s") + "/resetcursor", {"entryId": 1})
    assert status == 400


def test_skip_expire_and_clear_backlog(standalone: StandaloneProcess, topic: str) -> None:
    now = int(time.time() * 1000)
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        send(wire, 0, rec(b"a", 0), rec(b"b", 1), rec(b"c", 2), publish_time=now - 2 * HOUR_MS)
        send(wire, 3, rec(b"d", 3), publish_time=now - 2 * HOUR_MS)
        send(wire, 4, rec(b"e", 4), publish_time=now)
        send(wire, 5, rec(b"f", 5), publish_time=now)
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
        open_consumer(wire, topic, "other", 2, initial_position="Earliest")
    assert backlog(standalone, topic, "s") == 6
    post(standalone, sub_path(topic, "s") + "/skip/2")  # two messages of the first batch
    assert backlog(standalone, topic, "s") == 4
    post(standalone, sub_path(topic, "s") + "/skip/1")  # the rest of that batch
    assert backlog(standalone, topic, "s") == 3
    post(standalone, sub_path(topic, "s") + "/expireMessages/3600")  # d is two hours old
    assert backlog(standalone, topic, "s") == 2
    post(standalone, sub_path(topic, "s") + "/skip_all")
    assert backlog(standalone, topic, "s") == 0
    base = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}"
    post(standalone, base + "/all_subscription/expireMessages/3600")
    assert (backlog(standalone, topic, "other"), backlog(standalone, topic, "s")) == (2, 0)
    status, reply = call(standalone, "POST", sub_path(topic, "nope") + "/skip_all")
    assert status == 404 and "Subscription nope not found" in reply["reason"]
    status, _ = call(standalone, "POST", sub_path(topic + "-missing", "s") + "/skip/1")
    assert status == 404


def test_peek_returns_the_nth_unacknowledged_message_with_pulsar_headers(
    standalone: StandaloneProcess, topic: str
) -> None:
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        first = send(wire, 0, rec(b"a", 0, color="red"), rec(b"b", 1), rec(b"c", 2), publish_time=1_700_000_000_123)
        plain = send(wire, 3, make_record(b"d", {"k": "v"}, "key-9", 1_600_000_000_000, 3), batched=False)
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
    status, headers, body = peek(standalone.admin_url, sub_path(topic, "s") + "/position/1")
    assert status == 200 and body == b"a"
    assert headers["x-pulsar-message-id"] == f"{first['ledger']}:{first['entry']}"
    assert headers["x-pulsar-batch-index"] == "0"
    assert headers["x-pulsar-publish-time"] == "2023-11-14T22:13:20.123Z"
    assert headers["x-pulsar-property-color"] == "red" and json.loads(headers["x-pulsar-property"]) == {"color": "red"}
    assert headers["x-pulsar-producer-name"] == "admin-tests" and headers["x-pulsar-sequence-id"] == "0"
    post(standalone, sub_path(topic, "s") + "/skip/1")  # acknowledges index 0 of the batch
    assert peek(standalone.admin_url, sub_path(topic, "s") + "/position/1")[2] == b"b"
    status, headers, body = peek(standalone.admin_url, sub_path(topic, "s") + "/position/3")
    assert (status, body) == (200, b"d")
    assert headers["x-pulsar-message-id"] == f"{plain['ledger']}:{plain['entry']}"
    assert "x-pulsar-batch-index" not in headers
    assert headers["x-pulsar-partition-key"] == "key-9" and headers["x-pulsar-property-k"] == "v"
    assert headers["x-pulsar-event-time"] == "2020-09-13T12:26:40.000Z"
    assert peek(standalone.admin_url, sub_path(topic, "s") + "/position/4")[0] == 404


def test_peek_returns_a_chunk_of_a_chunked_message_raw(standalone: StandaloneProcess, topic: str) -> None:
    """A chunk (WIRE.md R41a) is a slice of the whole message's payload that no record decodes on
    its own: peek returns it raw, one chunk per position, as Pulsar does."""
    import magnetar

    with magnetar.Client(standalone.service_url) as client:
        client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest).close()
        producer = client.create_producer(topic, chunking_enabled=True)
        msg_id = producer.send(bytes(range(256)) * (6 * 1024 * 4))  # 6 MiB: two chunks
    assert msg_id.first_chunk is not None
    first = peek(standalone.admin_url, sub_path(topic, "s") + "/position/1")
    assert first[0] == 200 and len(first[2]) > 1024 * 1024
    assert first[1]["x-pulsar-message-id"] == "{}:{}".format(*msg_id.first_chunk)
    last = peek(standalone.admin_url, sub_path(topic, "s") + "/position/2")
    assert last[0] == 200 and last[1]["x-pulsar-message-id"] == f"{msg_id.ledger_id()}:{msg_id.entry_id()}"
    assert peek(standalone.admin_url, sub_path(topic, "s") + "/position/3")[0] == 404


def test_partitioned_topics_take_the_verbs_pulsar_allows(standalone: StandaloneProcess, topic: str) -> None:
    path = topic.removeprefix("persistent://")
    assert call(standalone, "PUT", f"/admin/v2/persistent/{path}/partitions", 2)[0] == 204
    with session(standalone.service_url) as wire:
        for i in range(2):
            open_producer(wire, f"{topic}-partition-{i}", 1 + i)
            assert publish(wire, 1 + i, 0, b"x%d" % i)["t"] == c.SEND_RECEIPT
            open_consumer(wire, f"{topic}-partition-{i}", "s", 10 + i, initial_position="Earliest")
    post(standalone, sub_path(topic, "s") + "/skip_all")  # every partition
    assert [backlog(standalone, f"{topic}-partition-{i}", "s") for i in range(2)] == [0, 0]
    post(standalone, sub_path(topic, "s") + "/resetcursor/0")
    assert [backlog(standalone, f"{topic}-partition-{i}", "s") for i in range(2)] == [1, 1]
    assert call(standalone, "GET", f"/admin/v2/persistent/{path}/subscriptions") == (200, ["s"])  # every partition's
    assert call(standalone, "POST", sub_path(topic, "s") + "/skip/1")[0] == 405
    assert peek(standalone.admin_url, sub_path(topic, "s") + "/position/1")[0] == 405


def test_admin_cli_subscription_verbs(
    standalone: StandaloneProcess, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = int(time.time() * 1000)
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        old = send(wire, 0, rec(b"old", 0, source="cli"), publish_time=now - 2 * HOUR_MS, batched=False)
        send(wire, 1, rec(b"n1", 1), rec(b"n2", 2), publish_time=now)
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")
    url = ["--admin-url", standalone.admin_url]
    capsys.readouterr()
    assert admin_main([*url, "topics", "peek-messages", topic, "-s", "s", "-n", "5"]) == 0
    out = capsys.readouterr().out
    assert f"Message ID: {old['ledger']}:{old['entry']}" in out
    assert f"Publish time: {now - 2 * HOUR_MS}" in out and '"source": "cli"' in out
    assert out.count("Batch Message ID:") == 2 and "|old" in out and "|n2" in out
    assert admin_main([*url, "topics", "expire-messages", topic, "-s", "s", "-t", "1h"]) == 0
    assert backlog(standalone, topic, "s") == 2
    assert admin_main([*url, "topics", "skip", topic, "-s", "s", "-n", "1"]) == 0
    assert backlog(standalone, topic, "s") == 1
    assert admin_main([*url, "topics", "clear-backlog", topic, "-s", "s"]) == 0
    assert backlog(standalone, topic, "s") == 0
    assert admin_main([*url, "topics", "reset-cursor", topic, "-s", "s", "-t", "3h"]) == 0
    assert backlog(standalone, topic, "s") == 3
    assert admin_main([*url, "topics", "reset-cursor", topic, "-s", "s", "-m", "latest"]) == 0
    assert backlog(standalone, topic, "s") == 0
    assert (
        admin_main([*url, "topics", "reset-cursor", topic, "-s", "s", "-m", f"{old['ledger']}:{old['entry']}", "-e"])
        == 0
    )
    assert backlog(standalone, topic, "s") == 2
    assert admin_main([*url, "topics", "expire-messages-all-subscriptions", topic, "-t", "30m"]) == 0
    assert backlog(standalone, topic, "s") == 2  # the rest is recent
    capsys.readouterr()
    assert admin_main([*url, "topics", "skip", topic, "-s", "nope", "-n", "1"]) == 1
    assert "Subscription nope not found" in capsys.readouterr().err


def test_admin_cli_create_subscription_stats_internal_and_unsubscribe(
    standalone: StandaloneProcess, topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """pulsar-admin's ``create-subscription`` (latest by default, or ``-m earliest``),
    ``stats-internal [-m]`` (the cursors, and each ledger's ensembles with ``-m``) and
    ``unsubscribe``."""
    with session(standalone.service_url) as wire:
        open_producer(wire, topic)
        send(wire, 0, rec(b"a", 0), rec(b"b", 1))
    url = ["--admin-url", standalone.admin_url]
    assert admin_main([*url, "topics", "create-subscription", topic, "-s", "late"]) == 0
    assert admin_main([*url, "topics", "create-subscription", topic, "-s", "early", "-m", "earliest"]) == 0
    assert backlog(standalone, topic, "late") == 0
    assert backlog(standalone, topic, "early") == 2
    capsys.readouterr()
    assert admin_main([*url, "topics", "subscriptions", topic]) == 0
    assert capsys.readouterr().out.split() == ["early", "late"]  # one per line, as pulsar-admin
    assert admin_main([*url, "topics", "create-subscription", topic, "-s", "early"]) == 1
    assert "already exists" in capsys.readouterr().err
    assert admin_main([*url, "topics", "stats-internal", topic]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert set(stats["cursors"]) == {"late", "early"}
    assert "metadata" not in stats["ledgers"][-1]
    assert admin_main([*url, "topics", "stats-internal", topic, "-m"]) == 0
    ledger = json.loads(capsys.readouterr().out)["ledgers"][-1]
    assert ledger["metadata"]["ensembles"][0]["bookies"], ledger
    assert admin_main([*url, "topics", "unsubscribe", topic, "-s", "late"]) == 0
    status, body = call(standalone, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    assert status == 200 and set(body["subscriptions"]) == {"early"}, body
    assert admin_main([*url, "topics", "subscriptions", topic]) == 0
    assert capsys.readouterr().out.split() == ["early"]
    assert admin_main([*url, "topics", "subscriptions", topic + "-missing"]) == 1
    assert "does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from two_broker_cluster(tmp_path_factory, "admin-subscriptions")


def _http(url: str, method: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {}, exc.read()


def test_subscription_verbs_are_forwarded_to_the_owner(cluster: LocalCluster, topic: str) -> None:
    path = topic.removeprefix("persistent://")
    lookup = cluster.admin_get(f"/lookup/v2/topic/persistent/{path}")
    owner_admin = lookup["httpUrl"].rstrip("/")
    other_admin = next(u for u in cluster.admin_urls if u != owner_admin)
    with session(lookup["brokerUrl"]) as wire:
        open_producer(wire, topic)
        entry = send(wire, 0, rec(b"a", 0), rec(b"b", 1), publish_time=1000)
        send(wire, 2, rec(b"c", 2), publish_time=2000)
        open_consumer(wire, topic, "s", 1, initial_position="Earliest")

    def owner_backlog() -> int:
        value: int = cluster.topic_stats(topic, broker=cluster.admin_urls.index(owner_admin))["subscriptions"]["s"][
            "msgBacklog"
        ]
        return value

    assert owner_backlog() == 3
    status, _, names = _http(f"{other_admin}/admin/v2/persistent/{path}/subscriptions", "GET")
    assert (status, json.loads(names)) == (200, ["s"])
    sub = f"/admin/v2/persistent/{path}/subscription/s"
    assert _http(other_admin + sub + "/skip/1", "POST")[0] == 204
    assert owner_backlog() == 2
    status, headers, body = _http(other_admin + sub + "/position/1", "GET")
    assert (status, body) == (200, b"b")
    assert headers["x-pulsar-message-id"] == f"{entry['ledger']}:{entry['entry']}"
    assert headers["x-pulsar-batch-index"] == "1"
    assert _http(other_admin + sub + "/resetcursor/1500", "POST")[0] == 204
    assert owner_backlog() == 1
    assert _http(other_admin + sub + "/resetcursor", "POST", {"ledgerId": -1, "entryId": -1})[0] == 204
    assert owner_backlog() == 3
    assert _http(other_admin + sub + "/skip_all", "POST")[0] == 204
    assert owner_backlog() == 0
    status, _, reply = _http(other_admin + f"/admin/v2/persistent/{path}/subscription/nope/skip_all", "POST")
    assert status == 404 and b"Subscription nope not found" in reply
