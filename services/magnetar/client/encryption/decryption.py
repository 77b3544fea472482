"""What a consumer (or reader) does with an end-to-end encrypted entry: open it, or apply its
``ConsumerCryptoFailureAction`` when it cannot (Pulsar's three actions).

Kept apart from ``consumer`` so that the receive hot path of unencrypted topics gains one dict
lookup only, and from ``crypto`` so that the cipher code knows nothing of consumers.

- opened: the entry's records, decoded as any entry's;
- ``FAIL`` (the default): the entry is not delivered and not acknowledged; it stays on the
  subscription (the broker redelivers it when the consumer reconnects), and an error is logged;
- ``DISCARD``: the entry is acknowledged and dropped, with a warning;
- ``CONSUME``: the entry is delivered as one message whose ``data()`` is the still encrypted (and
  compressed) payload, ``encryption_context().is_decryption_failed()`` True, as Pulsar delivers
  an undecryptable batch whole.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Protocol

from magnetar.client.encryption.crypto import META_DECRYPTION_FAILED, META_SENT_BATCH_SIZE, CryptoKeyReader, Decryptor
from magnetar.client.options import ConsumerCryptoFailureAction
from magnetar.protocol.batch import Record, decode_batch
from magnetar.protocol.checksum import crc32c
from magnetar.protocol.entry import EntryMeta
from magnetar.protocol.errors import ChecksumError, CryptoError

log = logging.getLogger(__name__)


class DecryptionSettings(Protocol):
    """The two options of ``ConsumerConfig`` this module reads (a protocol: encryption sits below config)."""

    @property
    def crypto_key_reader(self) -> CryptoKeyReader | None: ...

    @property
    def crypto_failure_action(self) -> ConsumerCryptoFailureAction: ...


class PartitionConsumer(Protocol):
    """What this module needs of ``consumer.partition.PartitionConsumer`` (a protocol: no import cycle)."""

    topic: str

    @property
    def config(self) -> DecryptionSettings: ...

    def ack_entry(self, position: tuple[int, int]) -> None: ...

    def return_permits(self, n: int) -> None: ...


# One decryptor (and its cache of unwrapped data keys) per key reader, shared by every consumer
# and reader given that reader.
_decryptors: weakref.WeakKeyDictionary[Any, Decryptor] = weakref.WeakKeyDictionary()
_no_reader = Decryptor(None)


def decryptor_for(reader: CryptoKeyReader | None) -> Decryptor:
    if reader is None:
        return _no_reader
    found = _decryptors.get(reader)
    if found is None:
        found = _decryptors[reader] = Decryptor(reader)
    return found


def open_entry(
    consumer: PartitionConsumer,
    meta: EntryMeta,
    payload: bytes,
    positions: list[tuple[int, int]],
    *,
    verify: bool = True,
) -> tuple[EntryMeta, list[Record]] | None:
    """``(meta, records)`` of an encrypted entry, or None when the failure action disposed of it.

    ``positions`` are the entry's stored positions (a chunked message's chunks, else one); the last
    is the delivered one. A bad checksum raises ``ChecksumError`` (the caller asks for redelivery).
    With ``CONSUME``, the returned meta is a copy marking the entry unbatched and undecrypted.
    """
    if verify and crc32c(payload) != meta.get("crc"):
        raise ChecksumError("entry payload checksum mismatch (corrupted in storage or transit)")
    config = consumer.config
    try:
        plain = decryptor_for(config.crypto_key_reader).open(meta, payload)
    except CryptoError as exc:
        return _failed(consumer, meta, payload, positions, exc)
    return meta, decode_batch(meta, plain, verify=False)


def _failed(
    consumer: PartitionConsumer,
    meta: EntryMeta,
    payload: bytes,
    positions: list[tuple[int, int]],
    exc: CryptoError,
) -> tuple[EntryMeta, list[Record]] | None:
    action = consumer.config.crypto_failure_action
    where = f"{positions[-1][0]}:{positions[-1][1]} of {consumer.topic}"
    if action is ConsumerCryptoFailureAction.CONSUME:
        log.warning("delivering entry %s still encrypted (CONSUME): %s", where, exc)
        sent_batch = int(meta.get("n", 1)) if meta.get("b", True) else -1
        marked: dict[str, Any] = {
            **meta,
            "b": False,
            "n": 1,
            META_DECRYPTION_FAILED: True,
            META_SENT_BATCH_SIZE: sent_batch,
        }
        record: Record = [payload, {}, meta.get("k"), 0, int(meta.get("seq", 0))]
        return marked, [record]  # type: ignore[return-value]
    if action is ConsumerCryptoFailureAction.DISCARD:
        log.warning("discarding entry %s (DISCARD): %s", where, exc)
        for position in positions:
            consumer.ack_entry(position)
    else:
        log.error("not delivering entry %s (FAIL; it stays unacknowledged): %s", where, exc)
    consumer.return_permits(int(meta.get("n", 1)))  # the broker charged them; the application sees none
    return None
