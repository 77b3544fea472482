"""Throwaway TLS material for the security tests, made with ``cryptography`` (no openssl CLI).

``make_pki(dir)`` writes a CA, a server certificate for the name ``localhost`` (deliberately not
for the address ``127.0.0.1``, so dialling the address shows a host name mismatch) signed by it,
a client certificate (for mTLS, CN ``test-client``) signed by it, two more client certificates
for the TLS authentication provider's roles (CN ``admin`` and CN ``intruder``), and a second,
unrelated CA with a server certificate and a client certificate (CN ``test-client``) of its own,
so a test can show a client trusting the wrong CA, or a certificate from the wrong CA, refused. Keys are
EC P-256: quick to make (a test module makes a fresh set) and accepted by every TLS 1.2/1.3 stack.
Nothing here is secret or long-lived: certificates are valid for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files ``make_pki`` wrote."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca_cert: Path
    other_server_cert: Path
    other_server_key: Path
    admin_cert: Path
    admin_key: Path
    intruder_cert: Path
    intruder_key: Path
    other_client_cert: Path
    other_client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    dns: list[str],
    ips: list[str],
    usage: x509.ObjectIdentifier,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: Path) -> Pki:
    """Write a fresh CA, server, client and other-CA set of PEM files under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _ca("magnetar-test-ca")
    server_cert, server_key = _leaf(
        ca_cert, ca_key, "localhost", dns=["localhost"], ips=[], usage=ExtendedKeyUsageOID.SERVER_AUTH
    )
    client_cert, client_key = _leaf(
        ca_cert, ca_key, "test-client", dns=[], ips=[], usage=ExtendedKeyUsageOID.CLIENT_AUTH
    )
    other_ca_cert, other_ca_key = _ca("some-other-ca")
    other_cert, other_key = _leaf(
        other_ca_cert,
        other_ca_key,
        "localhost",
        dns=["localhost"],
        ips=["127.0.0.1"],
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
    )
    client = ExtendedKeyUsageOID.CLIENT_AUTH
    admin_cert, admin_key = _leaf(ca_cert, ca_key, "admin", dns=[], ips=[], usage=client)
    intruder_cert, intruder_key = _leaf(ca_cert, ca_key, "intruder", dns=[], ips=[], usage=client)
    other_client_cert, other_client_key = _leaf(
        other_ca_cert, other_ca_key, "test-client", dns=[], ips=[], usage=client
    )
    d = directory
    return Pki(
        ca_cert=_write_cert(ca_cert, d / "ca.cert.pem"),
        server_cert=_write_cert(server_cert, d / "server.cert.pem"),
        server_key=_write_key(server_key, d / "server.key.pem"),
        client_cert=_write_cert(client_cert, d / "client.cert.pem"),
        client_key=_write_key(client_key, d / "client.key.pem"),
        other_ca_cert=_write_cert(other_ca_cert, d / "other-ca.cert.pem"),
        other_server_cert=_write_cert(other_cert, d / "other-server.cert.pem"),
        other_server_key=_write_key(other_key, d / "other-server.key.pem"),
        admin_cert=_write_cert(admin_cert, d / "admin.cert.pem"),
        admin_key=_write_key(admin_key, d / "admin.key.pem"),
        intruder_cert=_write_cert(intruder_cert, d / "intruder.cert.pem"),
        intruder_key=_write_key(intruder_key, d / "intruder.key.pem"),
        other_client_cert=_write_cert(other_client_cert, d / "other-client.cert.pem"),
        other_client_key=_write_key(other_client_key, d / "other-client.key.pem"),
    )
