"""A second install on the same node, with ``auth.enabled=true`` (issue 12: internal identity).

Runs after the main suite's uninstall (e2e/conftest.py orders this module last) with a release of
its own in namespace ``magnetar-secure``: the chart makes the signing key, the operator mints the
token Secrets and mounts the key and each pod's own token, brokers authenticate and authorize
their clients, bookies admit only the internal roles. Checked as a user would: a client pod with
the token from the ``admin`` Secret produces and consumes, one without is refused with
AuthenticationError, ``magnetar-admin`` needs the token, and a bookie refuses a writer that sends
no token. Everything runs in the cluster (pods and ``kubectl exec``); the release is uninstalled
at the end.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.operator.harness import ROOT, condition

from e2e.cluster import FIGURES, Cluster, CommandFailed, pod_ready, wait_for
from e2e.release import Images, Release

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

NAMESPACE = "magnetar-secure"
TOPIC = "persistent://acme/orders/secure"
ADMIN_TOKEN_SECRET = "magnetar-token-admin"

#: The in-cluster client: produce and consume 100 messages, print one RESULT line (never raises).
CLIENT = """
import json, os, magnetar
token = os.environ.get("MAGNETAR_AUTH_TOKEN")
auth = magnetar.AuthenticationToken(token) if token else None
client = magnetar.Client(os.environ["URL"], authentication=auth, operation_timeout_seconds=20)
try:
    consumer = client.subscribe(os.environ["TOPIC"], "secure-e2e")
    producer = client.create_producer(os.environ["TOPIC"])
    sent = [f"m{i}" for i in range(100)]
    for body in sent:
        producer.send(body.encode())
    got = [consumer.receive(timeout_millis=20000).data().decode() for _ in sent]
    print("RESULT " + json.dumps({"ok": got == sent, "received": len(got)}))
except Exception as exc:
    print("RESULT " + json.dumps({"ok": False, "error": type(exc).__name__, "message": str(exc)}))
finally:
    client.close()
"""

#: A writer that sends no token to a bookie, then (as the broker, with its mounted token) a check
#: that the ledger it aimed at does not exist.
BOOKIE_WRITER = """
import asyncio, json, sys
from magnetar.bookie.client_security import BookieClientSecurity
from magnetar.bookie.tcp_client import TcpBookieClient
from magnetar.ledger.bookie_api import NO_ENTRY
from magnetar.protocol.checksum import crc32c
from magnetar.security.credentials import token_supplier

async def main(host):
    out = {}
    stranger = TcpBookieClient("b0", host, 3181)
    try:
        await stranger.add_entry(987654321, 0, b"x", crc32c(b"x"), NO_ENTRY)
        out["refused"] = None
    except Exception as exc:
        out["refused"] = [type(exc).__name__, str(exc)]
    finally:
        await stranger.close()
    own = BookieClientSecurity(credentials=token_supplier("token", "file:///etc/magnetar/auth/token/token"))
    broker = TcpBookieClient("b0", host, 3181, security=own)
    try:
        await broker.read_lac(987654321)
        out["after"] = "exists"
    except Exception as exc:
        out["after"] = type(exc).__name__
    finally:
        await broker.close()
    print("RESULT " + json.dumps(out))

asyncio.run(main(sys.argv[1]))
"""


def result(output: str) -> dict[str, Any]:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, output
    return dict(json.loads(lines[-1].removeprefix("RESULT ")))


@pytest.fixture(scope="module")
def secure(cluster: Cluster, images: Images) -> Iterator[Release]:
    rel = Release(cluster, images, namespace=NAMESPACE)
    started = time.monotonic()
    rel.helm_upgrade("auth.enabled=true", install=True)
    rel.wait_ready(bookies=3, brokers=2)
    FIGURES["secure helm install to Ready (s)"] = round(time.monotonic() - started, 1)
    yield rel


def admin_token(rel: Release) -> str:
    secret = rel.cluster.get("secret", ADMIN_TOKEN_SECRET, rel.namespace)
    return base64.b64decode(secret["data"]["token"]).decode()


def run_client(rel: Release, name: str, with_token: bool) -> dict[str, Any]:
    """A client pod (the server image's Python); with the token from the admin Secret as env."""
    env: list[dict[str, Any]] = [{"name": "URL", "value": rel.service_url}, {"name": "TOPIC", "value": TOPIC}]
    if with_token:
        ref = {"secretKeyRef": {"name": ADMIN_TOKEN_SECRET, "key": "token"}}
        env.append({"name": "MAGNETAR_AUTH_TOKEN", "valueFrom": ref})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": rel.namespace, "labels": {"magnetar.dev/e2e": "secure"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10000},
            "containers": [
                {
                    "name": "client",
                    "image": rel.image,
                    "imagePullPolicy": "Never" if rel.cluster.pods_reachable else "IfNotPresent",
                    "command": ["python", "-c", CLIENT],
                    "env": env,
                }
            ],
        },
    }
    rel.cluster.apply(pod)

    def finished() -> str | None:
        phase = ((rel.cluster.get("pod", name, rel.namespace) or {}).get("status") or {}).get("phase")
        return phase if phase in {"Succeeded", "Failed"} else None

    wait_for(f"client pod {name} to finish", finished, 180, every=1)
    return result(rel.cluster.kubectl("logs", "-n", rel.namespace, name))


def admin_get(rel: Release, path: str, token: str) -> Any:
    """GET on a broker's admin API from inside its pod, with ``token``."""
    url, headers = f"http://127.0.0.1:8080{path}", {"Authorization": f"Bearer {token}"}
    code = (
        f"import urllib.request as u; r = u.Request({url!r}, headers={headers!r}); "
        "print(u.urlopen(r, timeout=20).read().decode())"
    )
    return json.loads(exec_broker(rel, "python", "-c", code))


def exec_broker(rel: Release, *command: str, check: bool = True) -> str:
    return rel.cluster.kubectl("exec", "-n", rel.namespace, f"{rel.name}-broker-0", "--", *command, check=check)


# ---------------------------------------------------------------------------------------------- tests
def test_secure_install_reaches_ready_with_a_token_secret_per_role(secure: Release) -> None:
    cluster = secure.cluster
    for role in ("broker", "bookie", "operator", "jobs", "admin"):
        secret = cluster.get("secret", f"magnetar-token-{role}", secure.namespace)
        assert secret["data"]["token"], role
    for pod in secure.broker_pods() + secure.bookie_pods():
        assert pod_ready(pod)
        secrets = {v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v}
        assert "magnetar-auth-key" in secrets, pod["metadata"]["name"]
    # The examples are made on the brokers through the operator's own token.
    for example in ("tenant", "namespace", "topic"):
        cluster.kubectl("apply", "-n", secure.namespace, "-f", str(ROOT / "examples" / f"{example}.yaml"))
    for kind in ("tenant", "namespace", "topic"):

        def ready(k: str = kind) -> bool:
            items = cluster.get(f"{k}s.magnetar.dev", namespace=secure.namespace)["items"]
            return bool(items) and all(condition(i).get("status") == "True" for i in items)

        wait_for(f"the example {kind} Ready", ready, 120, every=2)


def test_client_with_the_token_produces_and_consumes_and_without_it_is_refused(secure: Release) -> None:
    assert run_client(secure, "client-token", with_token=True) == {"ok": True, "received": 100}
    refused = run_client(secure, "client-no-token", with_token=False)
    assert refused["ok"] is False and refused["error"] == "AuthenticationError", refused
    # Nothing the refused client did reached the topic: still only the 100 messages of the first.
    stats = admin_get(secure, "/admin/v2/persistent/acme/orders/secure/stats", admin_token(secure))
    assert stats["msgInCounter"] == 100 and set(stats["subscriptions"]) == {"secure-e2e"}, stats
    secure.cluster.kubectl("delete", "pod", "-n", secure.namespace, "-l", "magnetar.dev/e2e=secure", "--wait=false")


def test_magnetar_admin_needs_the_admin_token(secure: Release) -> None:
    admin = ["magnetar-admin", "--admin-url", "http://127.0.0.1:8080"]
    token = ["--auth-plugin", "token", "--auth-params", f"token:{admin_token(secure)}"]
    tenants = exec_broker(secure, *admin, *token, "tenants", "list")
    assert "acme" in tenants.split()
    with pytest.raises(CommandFailed) as refused:
        exec_broker(secure, *admin, "tenants", "list")
    assert "401" in str(refused.value) or "Authentication required" in str(refused.value), str(refused.value)


def test_a_bookie_refuses_a_writer_without_a_token(secure: Release) -> None:
    host = f"{secure.name}-bookie-0.{secure.name}-bookie.{secure.namespace}.svc"
    out = result(exec_broker(secure, "python", "-c", BOOKIE_WRITER, host))
    assert out["refused"] == [
        "AuthenticationError",
        "Authentication required: the first frame to this bookie must be bk_auth",
    ], out
    assert out["after"] == "NoSuchLedger", out  # nothing was stored


def test_secure_release_uninstalls(secure: Release) -> None:
    cluster = secure.cluster
    for example in ("topic", "namespace", "tenant"):
        cluster.kubectl(
            "delete", "-n", secure.namespace, "-f", str(ROOT / "examples" / f"{example}.yaml"), "--wait=true",
            timeout=180,
        )  # fmt: skip
    cluster.helm("uninstall", secure.name, "-n", secure.namespace, "--wait", "--timeout", "5m")
    wait_for("every pod of the secure release gone", lambda: not cluster.pods(secure.namespace, ""), 300, every=2)
