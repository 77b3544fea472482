"""pulsar-client's client-wide options on a real standalone: logger, statistics, lookup bound, argument checks.

A program written for pulsar-client passes ``logger=``, ``stats_interval_in_seconds=``,
``concurrent_lookup_requests=``... to ``Client``: they must be checked as pulsar-client checks them
(``ValueError`` naming the argument) and have their effect: the statistics lines appear at the
interval, in the logger the application chose.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess

import magnetar as pulsar
from magnetar.client import aio


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"io_threads": "2"}, "io_threads"),
        ({"io_threads": 0}, "io_threads"),
        ({"message_listener_threads": 1.5}, "message_listener_threads"),
        ({"concurrent_lookup_requests": 0}, "concurrent_lookup_requests"),
        ({"stats_interval_in_seconds": -1}, "stats_interval_in_seconds"),
        ({"listener_name": 3}, "listener_name"),
        ({"log_conf_file_path": 3}, "log_conf_file_path"),
    ],
)
def test_bad_client_options_raise_value_error(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        pulsar.Client("pulsar://127.0.0.1:1", **kwargs)  # type: ignore[arg-type]


def test_logger_argument_is_checked() -> None:
    with pytest.raises(ValueError, match="Logger is expected"):
        pulsar.Client("pulsar://127.0.0.1:1", logger="stdout")
    with pytest.raises(ValueError, match="log_level"):
        pulsar.ConsoleLogger("INFO")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="log_file"):
        pulsar.FileLogger(pulsar.LoggerLevel.Info, 3)  # type: ignore[arg-type]
    assert [level.value for level in pulsar.LoggerLevel] == [0, 1, 2, 3]
    assert pulsar.ConsoleLogger().log_level is pulsar.LoggerLevel.Info


def test_stats_lines_go_to_the_applications_logger(standalone: StandaloneProcess, topic: str) -> None:
    app_logger = logging.getLogger("my-app-pulsar")
    app_logger.setLevel(logging.INFO)
    app_logger.propagate = False
    collect = _Collect()
    app_logger.addHandler(collect)
    client = pulsar.Client(standalone.service_url, stats_interval_in_seconds=1, logger=app_logger)
    try:
        producer = client.create_producer(topic, producer_name="stats-producer")
        client.subscribe(topic, "stats-sub", consumer_name="stats-consumer")
        for i in range(3):
            producer.send(f"m{i}".encode())
        wait_for(
            "a producer stats line with the three acknowledged messages",
            lambda: any("stats-producer" in line and "num_msgs_acked_since_last=3" in line for line in collect.lines),
        )
        wait_for(
            "a consumer stats line", lambda: any("stats-sub" in ln and "stats-consumer" in ln for ln in collect.lines)
        )
    finally:
        client.close()
        app_logger.removeHandler(collect)
    # Closed: the client's logger is handed back to Python's logging configuration.
    assert logging.getLogger("magnetar.client").propagate is True
    assert not logging.getLogger("magnetar.client").handlers


def test_file_logger_writes_client_lines_to_the_file(standalone: StandaloneProcess, topic: str, tmp_path: Path) -> None:
    log_file = tmp_path / "client.log"
    client = pulsar.Client(
        standalone.service_url,
        stats_interval_in_seconds=1,
        logger=pulsar.FileLogger(pulsar.LoggerLevel.Debug, str(log_file)),
    )
    try:
        client.create_producer(topic, producer_name="file-logged")
        wait_for(
            "a stats line in the log file",
            lambda: log_file.exists() and "file-logged" in log_file.read_text(encoding="utf-8"),
        )
    finally:
        client.close()
    assert "Producer stats" in log_file.read_text(encoding="utf-8")


def test_no_stats_lines_when_disabled(standalone: StandaloneProcess, topic: str) -> None:
    async def main() -> int:
        async with aio.Client(standalone.service_url, stats_interval_in_seconds=0) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"x")
            stats = client._settings.stats
            assert stats is not None
            return stats.reports

    assert asyncio.run(asyncio.wait_for(main(), 60)) == 0


def test_concurrent_lookup_requests_bounds_lookups_in_flight(standalone: StandaloneProcess, topic: str) -> None:
    """With one lookup slot, concurrent lookups queue for it (and all succeed); the slot comes back."""

    async def main() -> tuple[bool, int, int]:
        async with aio.Client(standalone.service_url, concurrent_lookup_requests=1) as client:
            slots = client._lookup_slot()
            tasks = [asyncio.create_task(client.lookup(f"{topic}-{i}")) for i in range(8)]
            queued = False
            while not all(t.done() for t in tasks):
                assert slots._value >= 0
                queued = queued or bool(slots._waiters)
                await asyncio.sleep(0)
            conns = await asyncio.gather(*tasks)
            return queued, len({c.url for c in conns}), slots._value

    queued, brokers, value = asyncio.run(asyncio.wait_for(main(), 60))
    assert queued, "lookups beyond concurrent_lookup_requests should wait for a slot"
    assert brokers == 1
    assert value == 1


def test_message_listener_threads_size_the_listener_pool(standalone: StandaloneProcess) -> None:
    client = pulsar.Client(standalone.service_url, message_listener_threads=3)
    try:
        assert client._client.message_listener_threads == 3
        assert client._listeners.size == 3
    finally:
        client.close()
