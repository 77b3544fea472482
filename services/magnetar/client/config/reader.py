"""``create_reader``'s and ``create_table_view``'s options, defined once (``option_list.py``).

Both are pulsar-client 3.x's, in its order, names and defaults. The asyncio ``create_reader``
(Magnetar's; ``pulsar.asyncio`` has none) takes the same arguments, calls ``reader_listener`` on the
client's loop and checks only the topic and the start id; the blocking one checks them all and
runs its listener on the listener threads. A table view is the blocking client's only. Neither has
a config object of its own: a reader is a consumer (``aio.Client.create_reader`` builds its
``ConsumerConfig``).
"""

from __future__ import annotations

from magnetar.client.config.arguments import callable_or_none, of_type, of_type_or_none
from magnetar.client.config.option_list import REQUIRED, Option, OptionList, Place
from magnetar.client.options import ConsumerCryptoFailureAction
from magnetar.protocol.message_id import MessageId

__all__ = ["READER_OPTIONS", "TABLE_VIEW_OPTIONS"]

_NO = Place.ABSENT

READER_OPTIONS = OptionList(
    "create_reader",
    [
        Option("topic", REQUIRED, of_type(str), config=_NO),
        Option("start_message_id", REQUIRED, of_type(MessageId), config=_NO),
        Option("schema", None, config=_NO),  # checked by the consumer's config (``schema_codec``)
        Option("reader_listener", None, callable_or_none("(reader, message)"), config=_NO),
        Option("receiver_queue_size", 1000, of_type(int), config=_NO),
        Option("reader_name", None, of_type_or_none(str), config=_NO),
        Option("subscription_role_prefix", None, of_type_or_none(str), config=_NO),
        Option("is_read_compacted", False, of_type(bool), config=_NO),
        Option("crypto_key_reader", None, config=_NO),
        Option("start_message_id_inclusive", False, config=_NO),
        Option(
            "crypto_failure_action",
            ConsumerCryptoFailureAction.FAIL,
            of_type(ConsumerCryptoFailureAction),
            config=_NO,
        ),
    ],
)

TABLE_VIEW_OPTIONS = OptionList(
    "create_table_view",
    [
        Option("topic", REQUIRED, of_type(str), asyncio=_NO, config=_NO),
        Option("subscription_name", None, of_type_or_none(str), asyncio=_NO, config=_NO),
        Option("schema", None, asyncio=_NO, config=_NO),
    ],
)
