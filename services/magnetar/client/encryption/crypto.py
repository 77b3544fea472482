"""End-to-end encryption of message payloads, as Pulsar's (``CryptoKeyReader``, ``EncryptionContext``).

Why here, in the client: the point of end-to-end encryption is that only producers and consumers
holding the keys ever see message content. Brokers, bookies, compaction and Spark jobs handle the
ciphertext as opaque bytes (WIRE.md R114-R117); this module is the only place that encrypts or
decrypts.

Scheme (envelope encryption, Pulsar's shape with our own primitives):

- a producer seals each entry payload (its batch, after compression) with AES-256-GCM under a
  *data key* and a fresh 12-byte nonce; the data key is random, and renewed every
  ``DATA_KEY_REFRESH_SECONDS`` (Pulsar's 4 hours) and whenever the key reader hands out a different
  public key (asked every ``KEY_CHECK_SECONDS``; ``Encryptor.refresh``);
- the data key is wrapped with every named public key: RSA keys with RSA-OAEP (SHA-256), EC keys
  with an ECIES-style wrap (ephemeral ECDH on the key's curve, HKDF-SHA256, AES-256-GCM);
- the entry meta names the keys (``ek``: ``[name, wrapped data key, key metadata]`` each), carries
  the nonce (``ep``) and the algorithm (``ea``); ``crc`` covers the ciphertext, so the broker's
  checksum check still works without the keys;
- a consumer unwraps the data key with its private key (cached per wrapped key, so a data key
  costs one private-key operation however many entries it sealed) and opens the payload. Entries
  sealed under older data keys open as well: each entry names its own.

A consumer that cannot decrypt an entry does what its ``ConsumerCryptoFailureAction`` says
(``consumer`` calls ``open_entry`` and acts on ``None``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from magnetar.protocol.checksum import crc32c
from magnetar.protocol.compression import CompressionType
from magnetar.protocol.entry import META_ENCRYPTION_KEYS, EntryMeta
from magnetar.protocol.errors import CryptoError

__all__ = [
    "ALGORITHM",
    "DATA_KEY_REFRESH_SECONDS",
    "META_ENCRYPTION_ALGORITHM",
    "META_ENCRYPTION_KEYS",
    "META_ENCRYPTION_PARAM",
    "CryptoKeyReader",
    "Decryptor",
    "EncryptionContext",
    "EncryptionKey",
    "Encryptor",
    "encryption_context_of",
    "is_encrypted",
]

log = logging.getLogger(__name__)

# Entry meta keys (WIRE.md R114).
META_ENCRYPTION_PARAM: Final = "ep"
META_ENCRYPTION_ALGORITHM: Final = "ea"
# Set by the consumer only, never on the wire: the entry could not be decrypted (CONSUME action),
# and its batch size as sent (the consumer then hands it out as one unbatched message).
META_DECRYPTION_FAILED: Final = "_df"
META_SENT_BATCH_SIZE: Final = "_bs"

ALGORITHM: Final = "AES-256-GCM"
DATA_KEY_REFRESH_SECONDS: Final = 4 * 3600.0
# How often a producer asks its key reader whether a public key changed (a new data key if so).
KEY_CHECK_SECONDS: Final = 60.0
_NONCE = 12
_DATA_KEY = 32
_WRAPPED_DATA_KEY = _DATA_KEY + 16  # AES-GCM ciphertext of the data key, with its tag
_HKDF_INFO = b"magnetar e2e data key"


def is_encrypted(meta: EntryMeta | dict[str, Any]) -> bool:
    """Whether a stored or pushed entry's payload is encrypted (its meta names keys)."""
    return META_ENCRYPTION_KEYS in meta


class CryptoKeyReader:
    """Pulsar's default key reader: PEM key files, the same files whatever the key name.

    ``public_key_path`` is needed by producers (``encryption_key``), ``private_key_path`` by
    consumers and readers; pass ``""`` for the one a side does not use. The keys may be RSA or EC
    (any curve ``cryptography`` supports), in PKCS#8/SubjectPublicKeyInfo or the traditional PEM
    forms. Subclasses may override ``public_key`` / ``private_key`` to pick a file per key name
    (a Magnetar addition: Pulsar's Python reader takes only the two paths).
    """

    def __init__(self, public_key_path: str, private_key_path: str) -> None:
        if not isinstance(public_key_path, str):
            raise ValueError("Argument public_key_path is expected to be of type 'str'")
        if not isinstance(private_key_path, str):
            raise ValueError("Argument private_key_path is expected to be of type 'str'")
        self.public_key_path = public_key_path
        self.private_key_path = private_key_path

    def public_key(self, key_name: str, metadata: dict[str, str]) -> bytes:
        """The PEM bytes of the public key named ``key_name`` (the file's content)."""
        return _read(self.public_key_path, "public", key_name)

    def private_key(self, key_name: str, metadata: dict[str, str]) -> bytes:
        """The PEM bytes of the private key named ``key_name`` (the file's content)."""
        return _read(self.private_key_path, "private", key_name)


def _read(path: str, kind: str, key_name: str) -> bytes:
    if not path:
        raise CryptoError(f"no {kind} key file configured for encryption key {key_name!r}")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise CryptoError(f"cannot read the {kind} key file for encryption key {key_name!r}: {exc}") from exc


class EncryptionKey:
    """One key named in a message's encryption context: its name, wrapped data key and metadata."""

    __slots__ = ("_key", "_metadata", "_value")

    def __init__(self, key: str, value: bytes, metadata: dict[str, str]) -> None:
        self._key = key
        self._value = value
        self._metadata = metadata

    @property
    def key(self) -> str:
        """The key's name (what the producer's ``encryption_key`` said)."""
        return self._key

    @property
    def value(self) -> bytes:
        """The data key, wrapped with this public key."""
        return self._value

    @property
    def metadata(self) -> dict[str, str]:
        return dict(self._metadata)

    def __repr__(self) -> str:
        return f"EncryptionKey(key={self._key!r}, value={len(self._value)} bytes, metadata={self._metadata!r})"

    __str__ = __repr__


class EncryptionContext:
    """What a message's entry says about its encryption, as ``pulsar.EncryptionContext``.

    Given for every message of an encrypted entry (``Message.encryption_context()``), decrypted or
    not: an application that received the payload still encrypted (``CONSUME``) can decrypt it
    with these keys and parameters.
    """

    __slots__ = ("_algorithm", "_batch_size", "_compression", "_failed", "_keys", "_param", "_usize")

    def __init__(self, meta: EntryMeta | dict[str, Any], decryption_failed: bool = False) -> None:
        self._keys = [EncryptionKey(str(k[0]), bytes(k[1]), dict(k[2] or {})) for k in meta[META_ENCRYPTION_KEYS]]
        self._param = bytes(meta.get(META_ENCRYPTION_PARAM, b""))
        algorithm = str(meta.get(META_ENCRYPTION_ALGORITHM, ALGORITHM))
        # Pulsar's metadata names an algorithm only when it is not the default suite, and its
        # ``algorithm()`` is then "": programs that compare it to "" must see the same here.
        self._algorithm = "" if algorithm == ALGORITHM else algorithm
        self._compression = CompressionType(int(meta.get("comp", 0)))
        self._usize = int(meta.get("usize", 0)) if self._compression != CompressionType.NONE else 0
        sent: Any = meta.get(META_SENT_BATCH_SIZE)
        self._batch_size = int(sent) if sent is not None else int(meta.get("n", 1)) if meta.get("b", True) else -1
        self._failed = decryption_failed

    def keys(self) -> list[EncryptionKey]:
        return list(self._keys)

    def param(self) -> bytes:
        """The AES-GCM nonce of the entry."""
        return self._param

    def algorithm(self) -> str:
        """The entry's algorithm, or "" for the default suite (``ALGORITHM``), as Pulsar's."""
        return self._algorithm

    def compression_type(self) -> CompressionType:
        return self._compression

    def uncompressed_message_size(self) -> int:
        """The entry payload's size before compression, or 0 without compression (Pulsar's rule)."""
        return self._usize

    def batch_size(self) -> int:
        """Messages in the entry, or -1 when it was not batched."""
        return self._batch_size

    def is_decryption_failed(self) -> bool:
        return self._failed

    def __repr__(self) -> str:
        return (
            f"EncryptionContext(keys={[k.key for k in self._keys]}, algorithm={self._algorithm!r}, "
            f"compression_type={self._compression}, batch_size={self._batch_size}, "
            f"decryption_failed={self._failed})"
        )

    __str__ = __repr__


def encryption_context_of(meta: EntryMeta | dict[str, Any] | None) -> EncryptionContext | None:
    """The ``EncryptionContext`` of an entry's messages, or None when the entry is not encrypted."""
    if meta is None or META_ENCRYPTION_KEYS not in meta:
        return None
    return EncryptionContext(meta, bool(meta.get(META_DECRYPTION_FAILED, False)))


# ---------------------------------------------------------------- key wrapping


def _load_public(pem: bytes, name: str) -> rsa.RSAPublicKey | ec.EllipticCurvePublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise CryptoError(f"encryption key {name!r}: not a PEM public key: {exc}") from exc
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise CryptoError(f"encryption key {name!r}: only RSA and EC public keys are supported")
    return key


def _load_private(pem: bytes, name: str) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CryptoError(f"encryption key {name!r}: not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise CryptoError(f"encryption key {name!r}: only RSA and EC private keys are supported")
    return key


def _oaep() -> padding.OAEP:
    return padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


def _kek(shared: bytes, ephemeral_point: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=_DATA_KEY, salt=ephemeral_point, info=_HKDF_INFO).derive(shared)


def wrap_data_key(public: rsa.RSAPublicKey | ec.EllipticCurvePublicKey, data_key: bytes) -> bytes:
    """The data key wrapped for ``public``: RSA-OAEP, or ephemeral point + nonce + AES-GCM (EC)."""
    if isinstance(public, rsa.RSAPublicKey):
        return public.encrypt(data_key, _oaep())
    ephemeral = ec.generate_private_key(public.curve)
    point = ephemeral.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    nonce = os.urandom(_NONCE)
    wrapped = AESGCM(_kek(ephemeral.exchange(ec.ECDH(), public), point)).encrypt(nonce, data_key, None)
    return point + nonce + wrapped


def unwrap_data_key(private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, value: bytes) -> bytes:
    """The data key from its wrapped form (``wrap_data_key``); raises on a wrong key."""
    if isinstance(private, rsa.RSAPrivateKey):
        return private.decrypt(value, _oaep())
    split = len(value) - _NONCE - _WRAPPED_DATA_KEY
    if split <= 0:
        raise ValueError("wrapped data key too short")
    point, nonce, wrapped = value[:split], value[split : split + _NONCE], value[split + _NONCE :]
    peer = ec.EllipticCurvePublicKey.from_encoded_point(private.curve, point)
    return AESGCM(_kek(private.exchange(ec.ECDH(), peer), point)).decrypt(nonce, wrapped, None)


# ---------------------------------------------------------------- producer side


class Encryptor:
    """A producer's sealer: one data key at a time, wrapped with each of ``key_names``' public keys.

    Thread-safe (a partitioned producer's partitions share one). Creating it loads the public keys
    at once, so a bad key file fails ``create_producer`` with ``CryptoError`` rather than the first
    send.
    """

    def __init__(
        self,
        key_names: list[str],
        reader: CryptoKeyReader,
        refresh_seconds: float = DATA_KEY_REFRESH_SECONDS,
        key_check_seconds: float = KEY_CHECK_SECONDS,
    ) -> None:
        if not key_names or not all(isinstance(n, str) and n for n in key_names):
            raise ValueError("encryption_key must be a non-empty string")
        if reader is None or not callable(getattr(reader, "public_key", None)):
            raise ValueError("encryption_key needs a crypto_key_reader (a CryptoKeyReader)")
        self.key_names = list(key_names)
        self.reader = reader
        self.refresh_seconds = refresh_seconds
        self.key_check_seconds = key_check_seconds
        self._checked_at = 0.0
        self._retry_at = 0.0  # after a failed renewal, when to ask the key reader again
        self._lock = threading.Lock()
        self._pems: list[bytes] = []
        self._data_key = b""
        self._aead: AESGCM | None = None
        self._wrapped: list[list[Any]] = []
        self._renewed_at = 0.0
        self.refresh()

    def refresh(self) -> None:
        """Read the public keys again and start a new data key (also done every ``refresh_seconds``)."""
        pems = [self.reader.public_key(name, {}) for name in self.key_names]
        publics = [_load_public(pem, name) for pem, name in zip(pems, self.key_names, strict=True)]
        data_key = AESGCM.generate_key(bit_length=256)
        wrapped = [[name, wrap_data_key(pub, data_key), {}] for name, pub in zip(self.key_names, publics, strict=True)]
        with self._lock:
            self._pems = pems
            self._data_key = data_key
            self._aead = AESGCM(data_key)
            self._wrapped = wrapped
            self._renewed_at = self._checked_at = time.monotonic()

    def _keys_changed(self) -> bool:
        with self._lock:
            self._checked_at = time.monotonic()
            pems = self._pems
        return [self.reader.public_key(name, {}) for name in self.key_names] != pems

    def _current(self) -> tuple[AESGCM, list[list[Any]]]:
        """The data key to seal with, renewed when due. A key reader that fails then (a key file
        being replaced, say) is logged and the current data key kept, as Pulsar's producer does;
        it is asked again at the next key check."""
        now = time.monotonic()
        refresh_due = now - self._renewed_at >= self.refresh_seconds
        if (refresh_due or now - self._checked_at >= self.key_check_seconds) and now >= self._retry_at:
            try:
                if refresh_due or self._keys_changed():
                    self.refresh()
            except Exception as exc:
                self._retry_at = now + self.key_check_seconds
                log.warning("keeping the current data key: cannot read the public keys %s: %s", self.key_names, exc)
        with self._lock:
            assert self._aead is not None
            return self._aead, self._wrapped

    def seal(self, meta: EntryMeta, payload: bytes) -> bytes:
        """Encrypt one entry payload; names the keys in ``meta`` and sets its ``crc`` to the ciphertext's."""
        aead, wrapped = self._current()
        nonce = os.urandom(_NONCE)
        sealed = aead.encrypt(nonce, payload, None)
        m: dict[str, Any] = meta  # type: ignore[assignment]
        m[META_ENCRYPTION_KEYS] = wrapped
        m[META_ENCRYPTION_PARAM] = nonce
        m[META_ENCRYPTION_ALGORITHM] = ALGORITHM
        meta["crc"] = crc32c(sealed)
        return sealed


# ---------------------------------------------------------------- consumer side


class Decryptor:
    """A consumer's opener: unwraps data keys with the reader's private keys, caching them."""

    _CACHE_LIMIT = 1024

    def __init__(self, reader: CryptoKeyReader | None) -> None:
        self.reader = reader
        self._privates: dict[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey] = {}
        self._data_keys: dict[bytes, AESGCM] = {}

    def _private(self, name: str, metadata: dict[str, str]) -> rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey:
        key = self._privates.get(name)
        if key is None:
            assert self.reader is not None
            key = _load_private(self.reader.private_key(name, metadata), name)
            self._privates[name] = key
        return key

    def open(self, meta: EntryMeta | dict[str, Any], payload: bytes) -> bytes:
        """The entry's (compressed) plaintext payload; ``CryptoError`` when it cannot be decrypted.

        The caller has checked ``crc`` (it covers the ciphertext).
        """
        if self.reader is None:
            raise CryptoError("the message is encrypted and no crypto_key_reader was given")
        if meta.get(META_ENCRYPTION_ALGORITHM, ALGORITHM) != ALGORITHM:
            raise CryptoError(f"unknown encryption algorithm {meta.get(META_ENCRYPTION_ALGORITHM)!r}")
        nonce = bytes(meta.get(META_ENCRYPTION_PARAM, b""))
        problems: list[str] = []
        for name, value, metadata in meta[META_ENCRYPTION_KEYS]:
            value = bytes(value)
            aead = self._data_keys.get(value)
            if aead is None:
                try:
                    aead = AESGCM(unwrap_data_key(self._private(str(name), dict(metadata or {})), value))
                except CryptoError as exc:
                    problems.append(str(exc))
                    continue
                except Exception as exc:  # wrong private key for this wrap, malformed value
                    problems.append(f"key {name!r}: cannot unwrap the data key ({type(exc).__name__})")
                    continue
                if len(self._data_keys) >= self._CACHE_LIMIT:
                    self._data_keys.pop(next(iter(self._data_keys)))
                self._data_keys[value] = aead
            try:
                return aead.decrypt(nonce, payload, None)
            except InvalidTag:
                problems.append(f"key {name!r}: the payload does not authenticate")
        raise CryptoError("cannot decrypt the message: " + ("; ".join(problems) or "it names no keys"))
