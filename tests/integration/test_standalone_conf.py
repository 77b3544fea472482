"""A standalone started from a Pulsar-format ``standalone.conf`` with TLS, the token, TLS-certificate
and Basic authentication providers, authorization and an anonymous role, as the client libraries'
own test harnesses start Pulsar's: each kind of client produces and consumes over TLS, and a client
without credentials gets exactly the anonymous role's grants.

The file is written here in Pulsar's properties format with Pulsar's key names, including keys
Magnetar has no use for (ZooKeeper, the load balancer), which are reported once and ignored; the
test's flags choose free ports over the file's 6650/6651/8080/8443 (flags win over the file).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.security.certs import Pki, make_pki
from tests.support.standalone import StandaloneProcess, run_standalone

import magnetar
from magnetar.security.tokens import create_token

PROVIDERS = ",".join(
    f"org.apache.pulsar.broker.authentication.{name}"
    for name in ("AuthenticationProviderTls", "AuthenticationProviderToken", "AuthenticationProviderBasic")
)
BASIC_USER, BASIC_PASSWORD = "basic-user", "basic-password"
TOKEN_ROLE, ANONYMOUS = "token-user", "anonymous"


def standalone_conf(pki: Pki, secret_key: Path, htpasswd: Path) -> str:
    """A standalone.conf in Pulsar's shape: general settings, TLS, authentication, managed ledger."""
    return f"""#
# Pulsar standalone settings, as a Pulsar operator writes them.
#

### --- General broker settings --- ###
zookeeperServers=
configurationStoreServers=
brokerServicePort=6650
brokerServicePortTls=6651
webServicePort=8080
webServicePortTls=8443
bindAddress=127.0.0.1
advertisedAddress=localhost
clusterName=standalone
brokerShutdownTimeoutMs=3000
isSchemaValidationEnforced=false
backlogQuotaCheckIntervalInSeconds=60
messageExpiryCheckIntervalInMinutes=5
maxUnackedMessagesPerConsumer=50000

### --- TLS and authentication --- ###
tlsEnabled=true
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
tlsTrustCertsFilePath={pki.ca_cert}
tlsAllowInsecureConnection=false

anonymousUserRole={ANONYMOUS}
authenticationEnabled=true
authenticationProviders={PROVIDERS}
authorizationEnabled=true
tokenSecretKey=file://{secret_key}
basicAuthConf={htpasswd}
superUserRoles=localhost,superUser,admin

brokerClientAuthenticationPlugin=
brokerClientAuthenticationParameters=

### --- Managed ledger and load balancer --- ###
managedLedgerDefaultEnsembleSize=1
managedLedgerDefaultWriteQuorum=1
managedLedgerDefaultAckQuorum=1
managedLedgerMaxEntriesPerLedger=50000
managedLedgerMinLedgerRolloverTimeMinutes=10
loadManagerClassName=org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl
"""


@dataclass
class Setup:
    sa: StandaloneProcess
    pki: Pki
    secret: bytes

    def admin(self, method: str, path: str, body: object = None) -> None:
        token = create_token("HS256", self.secret, "admin")
        req = urllib.request.Request(
            self.sa.admin_url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status in (200, 204), resp.status

    def namespace(self, *granted: str) -> str:
        ns = f"public/conf-{uuid.uuid4().hex[:6]}"
        self.admin("PUT", f"/admin/v2/namespaces/{ns}")
        for role in granted:
            self.admin("POST", f"/admin/v2/namespaces/{ns}/permissions/{role}", ["produce", "consume"])
        return ns


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    base = tmp_path_factory.mktemp("standalone-conf")
    pki = make_pki(base)
    secret = secrets.token_bytes(32)
    (base / "secret.key").write_bytes(secret)
    apr1 = subprocess.run(
        ["openssl", "passwd", "-apr1", BASIC_PASSWORD], capture_output=True, text=True, check=True
    ).stdout.strip()
    (base / ".htpasswd").write_text(f"{BASIC_USER}:{apr1}\n")
    conf = base / "standalone.conf"
    conf.write_text(standalone_conf(pki, base / "secret.key", base / ".htpasswd"))
    (base / "sa").mkdir()
    tls_ports = ["--broker-service-port-tls", "0", "--web-service-port-tls", "0"]
    with run_standalone(base / "sa", "--config", str(conf), *tls_ports) as sa:
        assert sa.service_url_tls.startswith("magnetar+ssl://localhost:"), sa.log_tail()
        yield Setup(sa, pki, secret)


def _round_trip(setup: Setup, topic: str, auth: magnetar.Authentication | None) -> bytes:
    client = magnetar.Client(
        setup.sa.service_url_tls,
        authentication=auth,
        tls_trust_certs_file_path=str(setup.pki.ca_cert),
        operation_timeout_seconds=10,
    )
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"from standalone.conf")
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        return msg.data()
    finally:
        client.close()


def test_unused_pulsar_keys_are_reported_once(setup: Setup) -> None:
    log = setup.sa.log_path.read_text()
    lines = [line for line in log.splitlines() if "does not use" in line]
    assert len(lines) == 1, log
    for key in ("zookeeperServers", "loadManagerClassName", "tlsEnabled", "managedLedgerDefaultAckQuorum"):
        assert key in lines[0]
    for key in ("anonymousUserRole", "basicAuthConf", "tokenSecretKey", "clusterName", "authenticationProviders"):
        assert key not in lines[0]


def test_a_tls_and_token_client_produces_and_consumes(setup: Setup) -> None:
    ns = setup.namespace(TOKEN_ROLE)
    token = create_token("HS256", setup.secret, TOKEN_ROLE)
    assert _round_trip(setup, f"persistent://{ns}/token", magnetar.AuthenticationToken(token)) == (
        b"from standalone.conf"
    )


def test_a_tls_certificate_client_produces_and_consumes(setup: Setup) -> None:
    ns = setup.namespace("test-client")  # the client certificate's CN
    auth = magnetar.AuthenticationTLS(str(setup.pki.client_cert), str(setup.pki.client_key))
    assert _round_trip(setup, f"persistent://{ns}/tls", auth) == b"from standalone.conf"


def test_a_basic_client_produces_and_consumes(setup: Setup) -> None:
    ns = setup.namespace(BASIC_USER)
    auth = magnetar.AuthenticationBasic(BASIC_USER, BASIC_PASSWORD)
    assert _round_trip(setup, f"persistent://{ns}/basic", auth) == b"from standalone.conf"


def test_an_anonymous_client_gets_the_anonymous_roles_grants_only(setup: Setup) -> None:
    granted = setup.namespace(ANONYMOUS)
    assert _round_trip(setup, f"persistent://{granted}/anon", None) == b"from standalone.conf"
    other = setup.namespace(TOKEN_ROLE)
    with pytest.raises(magnetar.AuthorizationError):
        _round_trip(setup, f"persistent://{other}/anon", None)
