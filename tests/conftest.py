"""Fixtures shared by every test package. Add fixtures here; do not change existing ones."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from tests.support.etcd import EtcdProcess, etcd_binary, run_etcd


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """One real etcd for the whole session (tests keep apart by key prefix). Without an etcd
    binary the tests that need it skip locally, but fail in CI, where a skip would hide that the
    cluster store went untested."""
    if etcd_binary() is None:
        reason = "etcd is not installed (apt-get install etcd-server, or set MAGNETAR_ETCD=/path/to/etcd)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    with run_etcd(tmp_path_factory.mktemp("etcd")) as etcd:
        yield etcd
