"""Servers and the blocking client run on uvloop when it is installed, on asyncio's loop otherwise.

``magnetar/event_loop.py`` chooses; ``MAGNETAR_EVENT_LOOP`` overrides. With the ``fast`` extra
installed (as CI installs ``.[all]``) the rest of the suite runs on uvloop, so these tests also run
a real standalone and a blocking client on the standard library's loop, end to end, so that both
loops stay tested.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from tests.support.standalone import run_standalone

import magnetar
from magnetar import event_loop

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
KINDS = ["asyncio", pytest.param("uvloop", marks=pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop not installed"))]


def test_the_default_is_uvloop_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.chosen() == ("uvloop" if HAVE_UVLOOP else "asyncio")
    monkeypatch.setenv(event_loop.ENV, "asyncio")
    assert event_loop.chosen() == "asyncio"
    assert event_loop.run(_running_kind()) == "asyncio"


def test_an_unknown_choice_is_refused_with_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV, "trio")
    with pytest.raises(ValueError, match="MAGNETAR_EVENT_LOOP='trio': expected one of uvloop, asyncio"):
        event_loop.chosen()


async def _running_kind() -> str:
    import asyncio

    return event_loop.kind(asyncio.get_running_loop())


def _loaded_uvloop(pid: int) -> bool:
    """Whether process ``pid`` has uvloop's extension module mapped (it imported uvloop)."""
    return "uvloop/loop." in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_standalone_and_blocking_client_round_trip_on_each_loop(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(event_loop.ENV, kind)
    topic = f"persistent://public/default/loop-{kind}"
    with run_standalone(tmp_path) as sa:
        assert _loaded_uvloop(sa.proc.pid) == (kind == "uvloop")
        client = magnetar.Client(sa.service_url)
        try:
            assert event_loop.kind(client._lt.loop) == kind
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic, batching_enabled=False)
            sent = [f"m{i}".encode() for i in range(50)]
            for body in sent:
                producer.send(body)
            got = []
            for _ in sent:
                msg = consumer.receive(timeout_millis=10_000)
                got.append(msg.data())
                consumer.acknowledge(msg)
            assert got == sent
        finally:
            client.close()
