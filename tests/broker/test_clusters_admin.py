"""``GET|PUT|POST /admin/v2/clusters/{cluster}`` on a real standalone (Pulsar's ``pulsar-admin clusters``)."""

from __future__ import annotations

import uuid

from tests.support.standalone import StandaloneProcess, admin_call


def test_own_cluster_has_a_record_of_this_brokers_addresses(standalone: StandaloneProcess) -> None:
    status, clusters = admin_call(standalone, "GET", "/admin/v2/clusters")
    assert status == 200
    status, data = admin_call(standalone, "GET", f"/admin/v2/clusters/{clusters[0]}")
    assert status == 200
    assert data["brokerServiceUrl"] == standalone.service_url
    assert data["serviceUrl"] == standalone.admin_url


def test_put_creates_get_reads_post_replaces(standalone: StandaloneProcess) -> None:
    name = f"c-{uuid.uuid4().hex[:8]}"
    path = f"/admin/v2/clusters/{name}"
    assert admin_call(standalone, "GET", path)[0] == 404
    assert admin_call(standalone, "POST", path, {"serviceUrl": "http://x:8080"})[0] == 404
    record = {"serviceUrl": "http://other:8080", "brokerServiceUrl": "pulsar://other:6650"}
    assert admin_call(standalone, "PUT", path, record)[0] == 204
    assert admin_call(standalone, "GET", path) == (200, record)
    status, body = admin_call(standalone, "PUT", path, record)
    assert status == 409
    assert "already exists" in body["reason"]
    changed = {**record, "brokerServiceUrl": "pulsar://other:6651"}
    assert admin_call(standalone, "POST", path, changed)[0] == 204
    assert admin_call(standalone, "GET", path) == (200, changed)


def test_bad_cluster_data_is_refused(standalone: StandaloneProcess) -> None:
    path = f"/admin/v2/clusters/c-{uuid.uuid4().hex[:8]}"
    status, body = admin_call(standalone, "PUT", path, {"serviceUrl": "no-scheme"})
    assert status == 400
    assert "serviceUrl" in body["reason"]
    assert admin_call(standalone, "PUT", path, [1, 2])[0] == 400
    assert admin_call(standalone, "GET", path)[0] == 404
