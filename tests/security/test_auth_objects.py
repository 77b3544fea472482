"""pulsar-client's authentication objects (client/net/auth.py) at use, against a real standalone:
``Authentication(name, params)`` with a plugin that is not built in, and a token supplier that
raises. Both fail the first operation at once with ``AuthenticationError`` naming the cause (the
unknown plugin is also the ``ConnectError`` pulsar-client raises then), with no retries.
"""

from __future__ import annotations

import time

import pytest
from tests.support.standalone import StandaloneProcess

import magnetar


def test_an_unknown_plugin_is_created_and_fails_at_use(standalone: StandaloneProcess) -> None:
    auth = magnetar.Authentication("someoldjunk.so", "blah")  # created, as in pulsar-client
    client = magnetar.Client(standalone.service_url, authentication=auth)
    try:
        started = time.monotonic()
        with pytest.raises(magnetar.AuthenticationError, match=r"'someoldjunk\.so' could not be loaded") as caught:
            client.create_producer("persistent://public/default/auth-junk")
        assert isinstance(caught.value, magnetar.ConnectError)
        assert time.monotonic() - started < 5
    finally:
        client.close()


def test_authentication_checks_its_argument_types() -> None:
    with pytest.raises(ValueError):
        magnetar.Authentication(5, "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        magnetar.AuthenticationBasic("user", None)
    with pytest.raises(ValueError, match="No password"):
        magnetar.Authentication("basic", '{"username": "u"}')


def test_a_token_supplier_that_raises_is_an_authentication_error(standalone: StandaloneProcess) -> None:
    def supplier() -> str:
        raise RuntimeError("the secret store is down")

    client = magnetar.Client(standalone.service_url, authentication=magnetar.AuthenticationToken(supplier))
    try:
        with pytest.raises(magnetar.AuthenticationError, match="the secret store is down"):
            client.create_producer("persistent://public/default/auth-supplier-raises")
    finally:
        client.close()
