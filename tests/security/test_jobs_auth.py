"""The Spark jobs' read path with their own token (jobs/credentials.py), without a Spark session.

A cluster whose brokers and bookies have authentication on (bookies admit only ``broker``,
``bookie`` and ``jobs``): a job's planning (admin API) and range reads (bookies, jobs/ledger_reads.py)
succeed with the ``jobs`` token from ``MAGNETAR_AUTH_TOKEN`` or from the source options, and fail
closed without it — the admin API with 401, the bookies with ``AuthenticationError`` on every
replica. Spark itself is not started: these are the exact calls a Spark task makes.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki
from tests.support.cluster import LocalCluster
from tests.support.etcd import etcd_binary

import magnetar
from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.jobs.admin_client import AdminClient, AdminError
from magnetar.jobs.credentials import TLS_TRUST_ENV, TOKEN_ENV, TOKEN_FILE_ENV, JobCredentials
from magnetar.jobs.ledger_reads import EntryUnreadableError, RangeReader
from magnetar.jobs.topic_plan import LedgerRange, plan_reads
from magnetar.security import keys
from magnetar.security.tokens import create_token

pytestmark = pytest.mark.skipif(etcd_binary() is None, reason="needs the etcd binary")

SECRET = keys.new_secret_key()
TOPIC = "persistent://public/default/jobs-auth"
COUNT = 8


def _token(role: str) -> str:
    return create_token("HS256", SECRET, role)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    key = ["--authentication-enabled", "--token-secret-key", "data:;base64," + base64.b64encode(SECRET).decode()]
    with LocalCluster(
        tmp_path_factory.mktemp("jobs-auth"),
        bookies=2,
        brokers=1,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        bookie_args=[*key, "--super-user-roles", "broker,bookie,jobs"],
        broker_args=[*key, "--bookkeeper-client-authentication-parameters", f"token:{_token('broker')}"],
    ) as c:
        with magnetar.Client(c.service_url, authentication=magnetar.AuthenticationToken(_token("app"))) as client:
            producer = client.create_producer(TOPIC)
            for i in range(COUNT):
                producer.send(f"row {i}".encode())
        yield c


def _ranges(admin: AdminClient) -> list[LedgerRange]:
    return plan_reads(admin, [TOPIC]).ranges


def _read_all(rng: LedgerRange, security: BookieClientSecurity | None = None) -> list[bytes]:
    async def run() -> list[bytes]:
        reader = RangeReader(rng, security=security)
        try:
            return [e.payload for lo, hi in reader.windows() for e in await reader.read_window(lo, hi)]
        finally:
            await reader.close()

    return asyncio.run(run())


def test_environment_token_plans_and_reads(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, _token("jobs"))
    ranges = _ranges(AdminClient(cluster.admin_urls[0]))
    assert sum(r.entries for r in ranges) >= 1
    payloads = [p for r in ranges for p in _read_all(r)]
    assert len(payloads) == sum(r.entries for r in ranges)


def test_token_file_from_the_environment_and_options(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.token"
    path.write_text(_token("jobs"))
    monkeypatch.setenv(TOKEN_FILE_ENV, str(path))
    assert JobCredentials().admin_params() == f"file://{path}"
    monkeypatch.delenv(TOKEN_FILE_ENV)
    options = JobCredentials.from_options({"pulsar.client.authParams": f"file://{path}"})
    ranges = _ranges(AdminClient(cluster.admin_urls[0], token=options.admin_params()))
    assert _read_all(ranges[0], options.bookie_security())


def test_without_a_token_the_job_is_refused_everywhere(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    with pytest.raises(AdminError) as err:
        _ranges(AdminClient(cluster.admin_urls[0]))
    assert err.value.status == 401
    assert err.value.reason == "Authentication required: send Authorization: Bearer <token>"
    monkeypatch.setenv(TOKEN_ENV, _token("jobs"))
    rng = _ranges(AdminClient(cluster.admin_urls[0]))[0]
    with pytest.raises(EntryUnreadableError) as refused:
        _read_all(rng, BookieClientSecurity())  # no credentials towards the bookies
    assert "AuthenticationError: Authentication required: the first frame to this bookie must be bk_auth" in str(
        refused.value
    )


def test_a_role_the_bookies_do_not_admit_cannot_read(cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, _token("jobs"))
    rng = _ranges(AdminClient(cluster.admin_urls[0]))[0]
    with pytest.raises(EntryUnreadableError) as refused:
        _read_all(rng, JobCredentials("token", f"token:{_token('app')}").bookie_security())
    assert "Role 'app' may not use this bookie (not in the bookie's superUserRoles)" in str(refused.value)


def test_magnetar_jobs_auth_flags_reach_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``magnetar-jobs --auth-params`` is handed to driver and executors through the environment."""
    from magnetar.cli.jobs import _export_credentials

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    _export_credentials("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token:abc.def.ghi")
    assert JobCredentials().admin_params() == "token:abc.def.ghi"
    monkeypatch.delenv(TOKEN_ENV)
    _export_credentials("token", "file:///var/run/secrets/jobs/token")
    assert JobCredentials().admin_params() == "file:///var/run/secrets/jobs/token"
    with pytest.raises(SystemExit, match="--auth-plugin 'oauth2' is not supported"):
        _export_credentials("oauth2", "{}")


# ---------------------------------------------------------------------- TLS bookies
TLS_TOPIC = "persistent://public/default/jobs-tls"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("jobs-pki"))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalCluster]:
    """Bookies that speak only TLS (and want a token), as tests/security/test_bookie_tls.py runs them."""
    key = ["--authentication-enabled", "--token-secret-key", "data:;base64," + base64.b64encode(SECRET).decode()]
    trust = ["--bookkeeper-tls-trust-certs-file-path", str(pki.ca_cert)]
    bookie_args = [*key, "--super-user-roles", "broker,bookie,jobs", "--tls-enabled"]
    bookie_args += ["--tls-certificate-file-path", str(pki.server_cert), "--tls-key-file-path", str(pki.server_key)]
    bookie_args += ["--advertised-address", "localhost", *trust]
    bookie_args += ["--bookkeeper-client-authentication-parameters", f"token:{_token('bookie')}"]
    broker_args = ["--bookkeeper-client-authentication-parameters", f"token:{_token('broker')}", *trust]
    with LocalCluster(
        tmp_path_factory.mktemp("jobs-tls"),
        bookies=2,
        brokers=1,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        bookie_args=bookie_args,
        broker_args=broker_args,
    ) as c:
        with magnetar.Client(c.service_url) as client:
            producer = client.create_producer(TLS_TOPIC)
            for i in range(COUNT):
                producer.send(f"tls row {i}".encode())
        yield c


def _tls_ranges(cluster: LocalCluster) -> list[LedgerRange]:
    return plan_reads(AdminClient(cluster.admin_urls[0]), [TLS_TOPIC]).ranges


def test_the_bookie_list_says_which_bookies_speak_tls(tls_cluster: LocalCluster) -> None:
    bookies = AdminClient(tls_cluster.admin_urls[0]).get("bookies")
    assert len(bookies) == 2 and all(b["tls"] is True for b in bookies), bookies
    ranges = _tls_ranges(tls_cluster)
    assert ranges and all(set(r.tls_bookies) == set(r.bookies) for r in ranges)


def test_a_job_trusting_the_ca_reads_tls_bookies(tls_cluster: LocalCluster, pki: Pki) -> None:
    for options in (
        {"authParams": f"token:{_token('jobs')}", "tlsTrustCertsFilePath": str(pki.ca_cert)},
        {
            "pulsar.client.authParams": f"token:{_token('jobs')}",
            "pulsar.client.tlsTrustCertsFilePath": str(pki.ca_cert),
        },
    ):
        credentials = JobCredentials.from_options(options)
        assert credentials.tls_trust_certs_file_path == str(pki.ca_cert)
        ranges = plan_reads(
            AdminClient(tls_cluster.admin_urls[0], token=credentials.admin_params()), [TLS_TOPIC]
        ).ranges
        payloads = [p for r in ranges for p in _read_all(r, credentials.bookie_security())]
        assert len(payloads) == COUNT
        assert all(f"tls row {i}".encode() in payloads[i] for i in range(COUNT))


def test_a_job_without_the_ca_is_refused_by_name_and_with_another_ca_fails_the_handshake(
    tls_cluster: LocalCluster, tmp_path: Path
) -> None:
    rng = _tls_ranges(tls_cluster)[0]
    with pytest.raises(EntryUnreadableError) as refused:
        _read_all(rng, JobCredentials("token", f"token:{_token('jobs')}").bookie_security())
    assert "accepts only TLS; set tlsTrustCertsFilePath to reach it" in str(refused.value)
    other = make_pki(tmp_path / "other")
    with pytest.raises(EntryUnreadableError) as mistrusted:
        _read_all(rng, JobCredentials("token", f"token:{_token('jobs')}", str(other.ca_cert)).bookie_security())
    assert "TLS handshake with bookie" in str(mistrusted.value) and "certificate verify failed" in str(mistrusted.value)


def test_magnetar_jobs_tls_flag_reaches_the_environment(monkeypatch: pytest.MonkeyPatch, pki: Pki) -> None:
    """``magnetar-jobs --tls-trust-cert-path`` is handed on as ``MAGNETAR_TLS_TRUST_CERTS_FILE``."""
    from magnetar.cli.jobs import _export_trust, parse_args

    monkeypatch.setenv(TLS_TRUST_ENV, "")
    args = parse_args(["export", "--admin-url", "https://x:8443", "--topic", "t", "--target", "/tmp/x",
                       "--tls-trust-cert-path", str(pki.ca_cert)])  # fmt: skip
    _export_trust(args.tls_trust_cert_path)
    assert os.environ[TLS_TRUST_ENV] == str(pki.ca_cert)
    assert JobCredentials().resolved().tls_trust_certs_file_path == str(pki.ca_cert)
    assert JobCredentials().bookie_security().ssl_context is not None
    assert AdminClient("https://x:8443")._ssl is not None  # an https admin URL trusts it too
