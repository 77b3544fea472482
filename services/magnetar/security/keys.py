"""Token keys: reading them from Pulsar-style key URLs, making new ones, decoding them for PyJWT.

Pulsar names keys by URL (``tokenSecretKey=file:///path`` or ``data:;base64,...``), and its
``pulsar tokens`` tool writes them as raw bytes: a secret key is the HMAC key itself (32 random
bytes for HS256), a key pair is DER (PKCS#8 private key, X.509 SubjectPublicKeyInfo public key).
The same files work here both ways. PEM files are accepted too, because that is what most other
JWT tooling writes. A value that is neither a URL nor an existing file is read as base64, as
Pulsar's ``AuthTokenUtils.readKeyFromUrl`` does.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import urllib.parse
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

# The key-pair algorithms ``create-key-pair`` makes keys for (Pulsar's default is RS256).
RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
EC_CURVES: dict[str, ec.EllipticCurve] = {"ES256": ec.SECP256R1(), "ES384": ec.SECP384R1(), "ES512": ec.SECP521R1()}
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
# Secret key sizes Pulsar's ``Keys.secretKeyFor`` uses: the hash length.
_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}


class InvalidKey(ValueError):
    """A key URL that cannot be read or a key that cannot be decoded (the message says which)."""


def read_key(url: str) -> bytes:
    """The bytes a key URL names: ``file:///path``, ``data:[;base64],...``, a path, or base64."""
    if url.startswith("data:"):
        header, _, data = url[len("data:") :].partition(",")
        if header.endswith(";base64"):
            try:
                return base64.b64decode(data, validate=True)
            except binascii.Error as exc:
                raise InvalidKey(f"key data URL is not valid base64: {exc}") from None
        return urllib.parse.unquote_to_bytes(data)
    if url.startswith("file:"):
        path = Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))
        try:
            return path.read_bytes()
        except OSError as exc:
            raise InvalidKey(f"cannot read key file {path}: {exc.strerror}") from None
    path = Path(url)
    if path.is_file():
        return path.read_bytes()
    try:
        return base64.b64decode(url, validate=True)
    except binascii.Error:
        raise InvalidKey(f"key {url!r} is not a file:/data: URL, an existing file, or base64") from None


def new_secret_key(algorithm: str = "HS256") -> bytes:
    if algorithm not in _SECRET_BYTES:
        raise InvalidKey(f"a secret key is for {', '.join(HMAC_ALGORITHMS)}, not {algorithm}")
    return secrets.token_bytes(_SECRET_BYTES[algorithm])


def new_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private key as PKCS#8 DER, public key as SubjectPublicKeyInfo DER), as ``pulsar tokens``."""
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if algorithm in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in EC_CURVES:
        private = ec.generate_private_key(EC_CURVES[algorithm])
    else:
        raise InvalidKey(f"a key pair is for {', '.join(RSA_ALGORITHMS + tuple(EC_CURVES))}, not {algorithm}")
    der_private = private.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    der_public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der_private, der_public


def private_key(data: bytes) -> PrivateKeyTypes:
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidKey(f"not a private key (PKCS#8 DER or PEM): {exc}") from None


def public_key(data: bytes) -> PublicKeyTypes:
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except (ValueError, TypeError) as exc:
        raise InvalidKey(f"not a public key (X.509 DER or PEM): {exc}") from None
