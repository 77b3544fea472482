"""Pulsar's ``anonymousUserRole`` (broker/auth/providers.py) against a real standalone with
authentication and authorization on: a client without credentials gets that role and exactly its
grants, on the binary protocol, an ``http://`` service URL and the admin API; credentials that are
presented are still checked.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from tests.security.test_authorization_rest import Secured, start_secured

import magnetar

ANONYMOUS = "anonymous"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    yield from start_secured(tmp_path_factory.mktemp("anonymous-role"), "--anonymous-user-role", ANONYMOUS)


def _round_trip(url: str, topic: str, authentication: magnetar.Authentication | None = None) -> bytes:
    client = magnetar.Client(url, authentication=authentication, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"anon")
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        return msg.data()
    finally:
        client.close()


def _topic(ns: str) -> str:
    return f"persistent://{ns}/anon-{uuid.uuid4().hex[:8]}"


def test_a_client_without_credentials_gets_the_anonymous_roles_grants(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/{ANONYMOUS}", ["produce", "consume"])
    assert _round_trip(secured.sa.service_url, _topic(ns)) == b"anon"
    assert _round_trip(secured.sa.admin_url, _topic(ns)) == b"anon"  # HTTP lookup as anonymous too


def test_without_a_grant_the_anonymous_role_is_refused_by_authorization(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_b)
    client = magnetar.Client(secured.sa.service_url, operation_timeout_seconds=10)
    try:
        with pytest.raises(magnetar.AuthorizationError):
            client.create_producer(_topic(ns))
    finally:
        client.close()
    client = magnetar.Client(secured.sa.admin_url, operation_timeout_seconds=10)  # the admin API's 401, as Pulsar's
    try:
        with pytest.raises(magnetar.PulsarException, match="Unauthorized to validateTopicOperation"):
            client.create_producer(_topic(ns))
    finally:
        client.close()


def test_the_admin_api_treats_a_request_without_credentials_as_the_anonymous_role(secured: Secured) -> None:
    assert secured.call(None, "GET", "/admin/v2/tenants") == (
        401,
        {"reason": "This operation requires super-user access"},  # authorization's answer, not authentication's
    )
    ns = secured.namespace(secured.tenant_a)
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/{ANONYMOUS}", ["produce", "consume"])
    status, topics = secured.call(None, "GET", f"/admin/v2/persistent/{ns}")
    assert (status, topics) == (200, [])


def test_presented_credentials_are_still_checked(secured: Secured) -> None:
    ns = secured.namespace(secured.tenant_a)
    secured.ok("POST", f"/admin/v2/namespaces/{ns}/permissions/{ANONYMOUS}", ["produce", "consume"])
    client = magnetar.Client(secured.sa.service_url, authentication=magnetar.AuthenticationToken("not.a.jwt"))
    try:
        with pytest.raises(magnetar.AuthenticationError):
            client.create_producer(_topic(ns))
    finally:
        client.close()
