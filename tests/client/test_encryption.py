"""End-to-end encryption: producers seal payloads, only consumers holding the private key open them.

Against a real standalone: RSA and EC key files as Pulsar's ``CryptoKeyReader`` reads them, every
``ConsumerCryptoFailureAction``, data key rotation, and the proof that matters most: the plaintext
bytes appear nowhere in the standalone's data directory (ledgers, journal, metadata), while an
unencrypted control message does.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from tests.support.polling import wait_for
from tests.support.standalone import StandaloneProcess

import magnetar
from magnetar import ConsumerCryptoFailureAction
from magnetar.client.encryption.crypto import CryptoKeyReader, Decryptor, Encryptor, encryption_context_of
from magnetar.protocol.batch import decode_batch, encode_batch
from magnetar.protocol.errors import CryptoError


def _write_pair(directory: Path, name: str, private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> tuple[str, str]:
    priv_path, pub_path = directory / f"{name}.pem", directory / f"{name}.pub"
    # RSA in the traditional "BEGIN RSA PRIVATE KEY" form, EC in PKCS#8: Pulsar's reader takes both.
    fmt = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if isinstance(private, rsa.RSAPrivateKey)
        else (serialization.PrivateFormat.PKCS8)
    )
    priv_path.write_bytes(private.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()))
    pub_path.write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return str(pub_path), str(priv_path)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """(public path, private path) of an RSA pair, a second RSA pair and an EC P-256 pair."""
    d = tmp_path_factory.mktemp("keys")
    return {
        "rsa": _write_pair(d, "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "rsa2": _write_pair(d, "rsa2", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "ec": _write_pair(d, "ec", ec.generate_private_key(ec.SECP256R1())),
    }


@pytest.fixture
def client(standalone: StandaloneProcess) -> Iterator[magnetar.Client]:
    c = magnetar.Client(standalone.service_url, operation_timeout_seconds=20)
    try:
        yield c
    finally:
        c.close()


def _marker() -> bytes:
    return f"plaintext-marker-{uuid.uuid4().hex}".encode()


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_a_consumer_with_the_private_key_reads_what_an_encrypting_producer_sent(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]], kind: str
) -> None:
    pub, priv = keys[kind]
    consumer = client.subscribe(topic, "s", crypto_key_reader=CryptoKeyReader("", priv))
    producer = client.create_producer(
        topic,
        encryption_key=f"{kind}-key",
        crypto_key_reader=CryptoKeyReader(pub, ""),
        compression_type=magnetar.CompressionType.LZ4,
        batching_max_publish_delay_ms=50,
    )
    sent = [(f"value-{i}".encode() * 20, {"i": str(i)}) for i in range(5)]
    for i, (payload, props) in enumerate(sent):
        producer.send_async(payload, lambda res, msg_id: None, properties=props, partition_key=f"k{i % 2}")
    producer.flush()
    got = [consumer.receive(timeout_millis=20000) for _ in sent]
    assert [(m.data(), m.properties()) for m in got] == sent
    ctx = got[0].encryption_context()
    assert ctx is not None
    assert [k.key for k in ctx.keys()] == [f"{kind}-key"]
    assert ctx.algorithm() == ""  # the default suite, as Pulsar's
    assert ctx.compression_type() == magnetar.CompressionType.LZ4
    assert ctx.uncompressed_message_size() > 0
    assert len(ctx.param()) == 12
    assert not ctx.is_decryption_failed()
    assert ctx.batch_size() >= 1  # batched
    for m in got:
        consumer.acknowledge(m)


def test_chunked_encrypted_messages_are_encrypted_whole_and_reassembled(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    pub, priv = keys["ec"]
    consumer = client.subscribe(topic, "s", crypto_key_reader=CryptoKeyReader(pub, priv))
    producer = client.create_producer(
        topic, chunking_enabled=True, encryption_key="ec-key", crypto_key_reader=CryptoKeyReader(pub, priv)
    )
    big = os.urandom(6 * 1024 * 1024)
    producer.send(big)
    msg = consumer.receive(timeout_millis=30000)
    assert msg.data() == big
    assert msg.encryption_context() is not None


def test_brokers_and_bookies_store_only_ciphertext(
    standalone: StandaloneProcess, client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    pub, priv = keys["rsa"]
    secret, control, secret_prop = _marker(), _marker(), _marker()
    encrypted = client.create_producer(
        topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, ""), batching_enabled=False
    )
    plain = client.create_producer(topic, batching_enabled=False)
    encrypted.send(secret, properties={"p": secret_prop.decode()})
    plain.send(control)
    consumer = client.subscribe(
        topic, "s", initial_position=magnetar.InitialPosition.Earliest, crypto_key_reader=CryptoKeyReader("", priv)
    )
    first = consumer.receive(timeout_millis=20000)
    assert (first.data(), first.properties()) == (secret, {"p": secret_prop.decode()})
    assert consumer.receive(timeout_millis=20000).data() == control

    def stored() -> bytes:
        blobs = []
        for path in standalone.data_dir.rglob("*"):
            if path.is_file():
                try:
                    blobs.append(path.read_bytes())
                except OSError:
                    continue
        return b"\0".join(blobs)

    # The control proves the scan sees what the bookie stored (written and acknowledged = on disk).
    data = wait_for(
        "the unencrypted control message on disk", lambda: (lambda b: b if control in b else None)(stored())
    )
    assert secret not in data
    assert secret_prop not in data


def _prepare(client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]) -> tuple[bytes, bytes]:
    """Create the subscription, then send one encrypted message followed by one plaintext one."""
    pub, _ = keys["rsa"]
    client.subscribe(topic, "s").close()
    secret, after = _marker(), _marker()
    client.create_producer(
        topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, ""), batching_enabled=False
    ).send(secret)
    client.create_producer(topic, batching_enabled=False).send(after)
    return secret, after


def test_fail_keeps_the_undecryptable_message_unacknowledged_for_a_consumer_with_the_key(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    secret, after = _prepare(client, topic, keys)
    # No key reader at all: FAIL (the default) holds the encrypted message back, delivers the next.
    failing = client.subscribe(topic, "s")
    nxt = failing.receive(timeout_millis=20000)
    assert nxt.data() == after
    failing.acknowledge(nxt)
    failing.close()
    # A consumer with the right key gets it on the same subscription: it was never acknowledged.
    _, priv = keys["rsa"]
    able = client.subscribe(topic, "s", crypto_key_reader=CryptoKeyReader("", priv))
    assert able.receive(timeout_millis=20000).data() == secret


def test_discard_acknowledges_the_undecryptable_message(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    _, after = _prepare(client, topic, keys)
    _, wrong_priv = keys["rsa2"]  # the wrong private key: unwrapping fails
    discarding = client.subscribe(
        topic,
        "s",
        crypto_key_reader=CryptoKeyReader("", wrong_priv),
        crypto_failure_action=ConsumerCryptoFailureAction.DISCARD,
    )
    nxt = discarding.receive(timeout_millis=20000)
    assert nxt.data() == after
    discarding.acknowledge(nxt)
    discarding.close()
    last = _marker()
    client.create_producer(topic, batching_enabled=False).send(last)
    _, priv = keys["rsa"]
    able = client.subscribe(topic, "s", crypto_key_reader=CryptoKeyReader("", priv))
    assert able.receive(timeout_millis=20000).data() == last  # the encrypted one is gone


def test_consume_delivers_the_ciphertext_with_what_it_takes_to_decrypt_it(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    secret, after = _prepare(client, topic, keys)
    consuming = client.subscribe(topic, "s", crypto_failure_action=ConsumerCryptoFailureAction.CONSUME)
    raw = consuming.receive(timeout_millis=20000)
    assert raw.data() != secret
    assert secret not in raw.data()
    ctx = raw.encryption_context()
    assert ctx is not None and ctx.is_decryption_failed()
    assert ctx.batch_size() == -1  # sent unbatched
    # The application can open it itself with the context's keys and nonce.
    _, priv = keys["rsa"]
    meta = {"ek": [[k.key, k.value, k.metadata] for k in ctx.keys()], "ep": ctx.param(), "crc": 0, "comp": 0}
    opened = Decryptor(CryptoKeyReader("", priv)).open(meta, raw.data())
    assert decode_batch(meta, opened, verify=False)[0][0] == secret  # type: ignore[arg-type]
    consuming.acknowledge(raw)
    assert consuming.receive(timeout_millis=20000).data() == after


def test_an_unreadable_public_key_fails_create_producer_with_crypto_error(
    client: magnetar.Client, topic: str, tmp_path: Path
) -> None:
    with pytest.raises(CryptoError):
        client.create_producer(topic, encryption_key="k", crypto_key_reader=CryptoKeyReader(str(tmp_path / "no"), ""))
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a key")
    with pytest.raises(CryptoError):
        client.create_producer(topic, encryption_key="k", crypto_key_reader=CryptoKeyReader(str(garbage), ""))
    with pytest.raises(ValueError):
        client.subscribe(topic, "s", crypto_key_reader="not a reader")


class _PerNameReader(CryptoKeyReader):
    """A reader that keeps one private key per key name: what a consumer needs across a key change."""

    def __init__(self, private_paths: dict[str, str]) -> None:
        super().__init__("", "")
        self.private_paths = private_paths

    def private_key(self, key_name: str, metadata: dict[str, str]) -> bytes:
        return Path(self.private_paths[key_name]).read_bytes()


def test_consumers_decrypt_across_data_key_rotation_and_key_pair_changes(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]], tmp_path: Path
) -> None:
    # Rotation in the encryptor: every refresh is a new data key, and a changed key file is picked up.
    (pub1, priv1), (pub2, priv2) = keys["rsa"], keys["rsa2"]
    live = tmp_path / "live.pub"
    live.write_bytes(Path(pub1).read_bytes())
    enc = Encryptor(["k"], CryptoKeyReader(str(live), ""), refresh_seconds=0)
    sealed = []
    for i in range(2):
        meta, payload = encode_batch([[f"m{i}".encode(), {}, None, 0, i]], producer_name="p", first_sequence_id=i)
        sealed.append((meta, enc.seal(meta, payload)))
    live.write_bytes(Path(pub2).read_bytes())
    meta, payload = encode_batch([[b"m2", {}, None, 0, 2]], producer_name="p", first_sequence_id=2)
    sealed.append((meta, enc.seal(meta, payload)))
    wrapped = [m["ek"][0][1] for m, _ in sealed]
    assert len(set(wrapped)) == 3  # three data keys
    old, new = Decryptor(CryptoKeyReader("", priv1)), Decryptor(CryptoKeyReader("", priv2))
    assert [decode_batch(m, old.open(m, p), verify=False)[0][0] for m, p in sealed[:2]] == [b"m0", b"m1"]
    assert decode_batch(sealed[2][0], new.open(*sealed[2]), verify=False)[0][0] == b"m2"
    with pytest.raises(CryptoError):
        old.open(*sealed[2])
    assert encryption_context_of(sealed[2][0]) is not None

    # A changed key file is noticed at the next key check, without waiting for the data key period.
    live.write_bytes(Path(pub1).read_bytes())
    watching = Encryptor(["k"], CryptoKeyReader(str(live), ""), key_check_seconds=0)
    meta, payload = encode_batch([[b"before", {}, None, 0, 0]], producer_name="p", first_sequence_id=0)
    before = (meta, watching.seal(meta, payload))
    meta, payload = encode_batch([[b"same", {}, None, 0, 1]], producer_name="p", first_sequence_id=1)
    same = (meta, watching.seal(meta, payload))
    assert same[0]["ek"] == before[0]["ek"]  # unchanged file: the same data key
    live.write_bytes(Path(pub2).read_bytes())
    meta, payload = encode_batch([[b"after", {}, None, 0, 2]], producer_name="p", first_sequence_id=2)
    after = (meta, watching.seal(meta, payload))
    assert decode_batch(after[0], new.open(*after), verify=False)[0][0] == b"after"
    assert decode_batch(before[0], old.open(*before), verify=False)[0][0] == b"before"
    # A key file that disappears (being replaced, say) keeps the current data key instead of failing sends.
    live.unlink()
    meta, payload = encode_batch([[b"kept", {}, None, 0, 3]], producer_name="p", first_sequence_id=3)
    kept = (meta, watching.seal(meta, payload))
    assert kept[0]["ek"] == after[0]["ek"]
    assert decode_batch(kept[0], new.open(*kept), verify=False)[0][0] == b"kept"

    # End to end: producers under two key pairs (names v1, v2); one consumer reads both.
    consumer = client.subscribe(topic, "s", crypto_key_reader=_PerNameReader({"v1": priv1, "v2": priv2}))
    for name, pub in (("v1", pub1), ("v2", pub2)):
        p = client.create_producer(topic, encryption_key=name, crypto_key_reader=CryptoKeyReader(pub, ""))
        p.send(name.encode())
        p.close()
    got = [consumer.receive(timeout_millis=20000) for _ in range(2)]
    assert [m.data() for m in got] == [b"v1", b"v2"]
    assert [[k.key for k in m.encryption_context().keys()] for m in got] == [["v1"], ["v2"]]


# ---------------------------------------------------------------- server-side readers of stored entries


def test_compaction_keeps_encrypted_entries_whole_and_encrypted_per_key(
    standalone: StandaloneProcess, client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    from tests.integration.test_compaction import compact

    pub, priv = keys["rsa"]
    producer = client.create_producer(
        topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, ""), batching_enabled=False
    )
    client.subscribe(topic, "keep").close()  # so that the entries stay for the plain reader below
    for key, value in (("a", b"a1"), ("b", b"b1"), ("a", b"a2"), ("b", b"b2"), ("a", b"a3")):
        producer.send(value, partition_key=key)
    compact(standalone, topic)
    reader = client.create_reader(
        topic, magnetar.MessageId.earliest, is_read_compacted=True, crypto_key_reader=CryptoKeyReader("", priv)
    )
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=20000))
    assert [(m.partition_key(), m.data()) for m in got] == [("b", b"b2"), ("a", b"a3")]
    assert all(m.encryption_context() is not None for m in got)


def test_peek_returns_an_encrypted_entry_whole_and_still_encrypted(
    standalone: StandaloneProcess, client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    from tests.integration.test_admin_subscriptions import peek, sub_path

    pub, _ = keys["rsa"]
    client.subscribe(topic, "s").close()
    secret = _marker()
    client.create_producer(topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, "")).send(secret)
    status, _, body = peek(standalone.admin_url, sub_path(topic, "s") + "/position/1")
    assert status == 200
    assert body and secret not in body


def test_spark_rows_carry_an_encrypted_entry_as_one_opaque_row(keys: dict[str, tuple[str, str]]) -> None:
    from magnetar.columnar.message_rows import ENCRYPTION_KEY_PREFIX, ENCRYPTION_KEYS, RowColumns, StoredEntry

    pub, priv = keys["rsa"]
    records = [[f"m{i}".encode(), {"i": str(i)}, "k", 0, i] for i in range(3)]
    meta, payload = encode_batch(records, producer_name="p", first_sequence_id=0, key="k")
    sealed = Encryptor(["rsa-key"], CryptoKeyReader(pub, "")).seal(meta, payload)
    rows = RowColumns("persistent://public/default/t", -1, 7)
    rows.add(StoredEntry(3, meta, sealed))
    batch = rows.flush().to_pydict()
    assert batch["batch_index"] == [-1]
    assert batch["payload"] == [sealed]
    props = dict(batch["properties"][0])
    assert props[ENCRYPTION_KEYS] == "rsa-key"
    # What the row carries is enough for a key holder to open it.
    import base64

    ek = [["rsa-key", base64.b64decode(props[ENCRYPTION_KEY_PREFIX + "rsa-key"]), {}]]
    opened = Decryptor(CryptoKeyReader("", priv)).open({"ek": ek, "ep": meta["ep"]}, sealed)
    assert [r[0] for r in decode_batch(meta, opened, verify=False)] == [b"m0", b"m1", b"m2"]


def test_dead_letters_and_retries_of_encrypted_messages_are_refused_not_leaked(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    pub, priv = keys["rsa"]
    consumer = client.subscribe(
        topic,
        "s",
        crypto_key_reader=CryptoKeyReader("", priv),
        retry_enable=True,
        consumer_type=magnetar.ConsumerType.Shared,
    )
    client.create_producer(topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, "")).send(b"x")
    msg = consumer.receive(timeout_millis=20000)
    with pytest.raises(CryptoError, match="encrypted"):
        consumer.reconsume_later(msg, 1000)


async def test_the_asyncio_client_encrypts_and_decrypts_alike(
    standalone: StandaloneProcess, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    import magnetar.asyncio as aio

    pub, priv = keys["ec"]
    client = aio.Client(standalone.service_url)
    try:
        consumer = await client.subscribe(topic, "s", crypto_key_reader=CryptoKeyReader("", priv))
        producer = await client.create_producer(
            topic, encryption_key="ec-key", crypto_key_reader=CryptoKeyReader(pub, "")
        )
        await producer.send(b"async secret", properties={"k": "v"})
        msg = await consumer.receive()
        assert (msg.data(), msg.properties()) == (b"async secret", {"k": "v"})
        ctx = msg.encryption_context()
        assert ctx is not None and [k.key for k in ctx.keys()] == ["ec-key"]
    finally:
        await client.close()


def test_consume_hands_an_undecryptable_batch_out_whole_and_acknowledging_it_acknowledges_the_batch(
    client: magnetar.Client, topic: str, keys: dict[str, tuple[str, str]]
) -> None:
    pub, priv = keys["rsa"]
    client.subscribe(topic, "s").close()
    producer = client.create_producer(
        topic, encryption_key="rsa-key", crypto_key_reader=CryptoKeyReader(pub, ""), batching_max_publish_delay_ms=60000
    )
    for i in range(3):  # one batch: flush() seals it
        producer.send_async(f"m{i}".encode(), lambda *_: None)
    producer.flush()
    consuming = client.subscribe(topic, "s", crypto_failure_action=ConsumerCryptoFailureAction.CONSUME)
    whole = consuming.receive(timeout_millis=20000)
    ctx = whole.encryption_context()
    assert ctx is not None and ctx.is_decryption_failed() and ctx.batch_size() == 3
    assert whole.message_id().batch_index() == -1
    consuming.acknowledge(whole)
    consuming.close()
    last = _marker()
    client.create_producer(topic, batching_enabled=False).send(last)
    able = client.subscribe(topic, "s", crypto_key_reader=CryptoKeyReader("", priv))
    assert able.receive(timeout_millis=20000).data() == last  # the batch was acknowledged as a whole
