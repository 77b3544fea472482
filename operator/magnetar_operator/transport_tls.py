"""TLS for broker and bookie pods from one certificate Secret (chart ``tls.*``).

With ``tls.enabled`` the chart names a Secret in the release namespace (``tls.existingSecret``,
cert-manager's shape: ``kubernetes.io/tls`` with ``tls.crt``, ``tls.key`` and ``ca.crt``) and the
operator (MAGNETAR_TLS_SECRET) mounts it read-only at ``TLS_DIR`` in every broker and bookie pod.
Brokers then open the TLS ports beside the plaintext ones (Pulsar's ``brokerServicePortTls`` 6651
and ``webServicePortTls`` 8443, on their Services too), and reach the bookies with TLS
(``bookkeeperTLSTrustCertsFilePath``); bookies speak only TLS on their port (``tlsEnabled``,
registered as such) and trust the CA for autorecovery's copies. The plaintext broker ports stay,
for the operator's admin client, the probes and broker-to-broker calls inside the cluster.

Host names: clients check the certificate against the names they dial, so it must carry the
broker Service (``<fullname>-broker.<ns>.svc``), the brokers' and bookies' pod names
(``*.<fullname>-broker-headless.<ns>.svc``, ``*.<fullname>-bookie.<ns>.svc``, the addresses they
advertise), and those of any BookieEnsemble or isolated broker set in other namespaces.
A BookieEnsemble or isolated Tenant in another namespace gets a copy of the Secret there
(``ensure_copy``), since a pod mounts only Secrets of its own namespace. A Spark application's
namespace gets the CA alone (``<secret>-ca``), mounted in its driver and executors, whose
``MAGNETAR_TLS_TRUST_CERTS_FILE`` points the jobs at it to read the TLS bookies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .identity import LABELS, SecretStore

TLS_DIR = "/etc/magnetar/tls"
CERT, KEY, CA = "tls.crt", "tls.key", "ca.crt"
BINARY_PORT_TLS = 6651
HTTP_PORT_TLS = 8443
#: jobs/credentials.py's TLS_TRUST_ENV (the operator does not import the server package).
SPARK_TRUST_ENV = "MAGNETAR_TLS_TRUST_CERTS_FILE"


@dataclass(frozen=True)
class TlsSettings:
    """The operator's MAGNETAR_TLS_SECRET: empty, TLS is off."""

    secret: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.secret)


def _path(name: str) -> str:
    return f"{TLS_DIR}/{name}"


def broker_config(tls: TlsSettings) -> dict[str, Any]:
    """broker.conf keys for TLS (the user's ``broker.config`` still wins over these)."""
    if not tls.enabled:
        return {}
    return {
        "brokerServicePortTls": BINARY_PORT_TLS,
        "webServicePortTls": HTTP_PORT_TLS,
        "tlsCertificateFilePath": _path(CERT),
        "tlsKeyFilePath": _path(KEY),
        "tlsTrustCertsFilePath": _path(CA),
        "bookkeeperTLSTrustCertsFilePath": _path(CA),
    }


def bookie_config(tls: TlsSettings) -> dict[str, Any]:
    """Bookie settings: TLS only on the bookie port; autorecovery trusts the CA."""
    if not tls.enabled:
        return {}
    return {
        "tlsEnabled": "true",
        "tlsCertificateFilePath": _path(CERT),
        "tlsKeyFilePath": _path(KEY),
        "bookkeeperTLSTrustCertsFilePath": _path(CA),
    }


def broker_ports(tls: TlsSettings) -> list[tuple[str, int]]:
    """The brokers' TLS ports (name, port), for the container and the Services."""
    return [("binary-tls", BINARY_PORT_TLS), ("https", HTTP_PORT_TLS)] if tls.enabled else []


def add_mount(pod_spec: dict[str, Any], container: dict[str, Any], tls: TlsSettings) -> None:
    """Mount the certificate Secret at ``TLS_DIR`` (nothing with TLS off)."""
    if not tls.enabled:
        return
    pod_spec.setdefault("volumes", []).append(
        {"name": "tls", "secret": {"secretName": tls.secret, "defaultMode": 0o444}}
    )
    container.setdefault("volumeMounts", []).append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})


def ca_secret(tls: TlsSettings) -> str:
    """The CA-only copy a Spark application mounts (never the brokers' private key)."""
    return f"{tls.secret}-ca"


def spark_env(tls: TlsSettings) -> list[dict[str, Any]]:
    """Where a Spark driver and its executors find the CA (jobs/credentials.py reads it)."""
    return [{"name": SPARK_TRUST_ENV, "value": _path(CA)}] if tls.enabled else []


def spark_secrets(tls: TlsSettings) -> list[dict[str, Any]]:
    """The SparkApplication ``driver``/``executor`` ``secrets`` entry mounting the CA copy."""
    return [{"name": ca_secret(tls), "path": TLS_DIR, "secretType": "Generic"}] if tls.enabled else []


def ensure_copy(
    kube: SecretStore, source_namespace: str, namespace: str, tls: TlsSettings, *, ca_only: bool = False
) -> None:
    """A copy of the certificate Secret in ``namespace`` (the certificate, key and CA; with
    ``ca_only`` the CA alone, as ``ca_secret``, for Spark applications), replaced when the source
    changed (cert-manager renews it in place)."""
    if not tls.enabled or (namespace == source_namespace and not ca_only):
        return
    source = kube.get("v1", "Secret", tls.secret, source_namespace)
    if source is None:
        raise LookupError(f"Secret {source_namespace}/{tls.secret} (tls.existingSecret) not found")
    keys = (CA,) if ca_only else (CERT, KEY, CA)
    name = ca_secret(tls) if ca_only else tls.secret
    data = {k: v for k, v in (source.get("data") or {}).items() if k in keys}
    current = kube.get("v1", "Secret", name, namespace)
    if current is not None and (current.get("data") or {}) == data:
        return
    if current is not None:
        kube.delete("v1", "Secret", name, namespace)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
            "data": dict(data),
        }
    )
