"""Argument checks of pulsar-client, with its exception (``ValueError``) and its messages.

pulsar-client checks the type of every argument of ``create_producer``, ``subscribe``,
``create_reader`` and ``send`` before it does anything (its ``_check_type`` and
``_check_type_or_none``), so that ``subscribe(topic, None)`` fails at the call instead of creating
a subscription named "None", and ``producer_name=5`` is not silently turned into "5". Programs
and tests written for it expect that ``ValueError``, so the checks and their wording are the same
here. As in pulsar-client, ``bool`` passes for ``int`` (it is one in Python).

Each option list (``option_list.py``) names the check of each of its options with the makers
below (``of_type(int)``...); ``send``'s arguments, checked on the hot path, have their own
function (``check_message_arguments``).

The service URL is checked as the C++ client's ``ServiceURI`` does: a missing or unknown scheme is
a ``ValueError`` when the ``Client`` is built, not a connection failure at the first lookup.
"""

from __future__ import annotations

import re
from typing import Any

from magnetar.client.config.option_list import Check

__all__ = [
    "callable_or_none",
    "check_message_arguments",
    "check_service_url",
    "check_topics",
    "check_type",
    "check_type_or_none",
    "of_type",
    "of_type_or_none",
]

SERVICE_URL_SCHEMES = ("pulsar", "pulsar+ssl", "magnetar", "magnetar+ssl", "http", "https")


def check_type(var_type: type | tuple[type, ...], var: object, name: str) -> None:
    """``ValueError`` unless ``var`` is a ``var_type`` (pulsar-client's ``_check_type``)."""
    if not isinstance(var, var_type):
        raise ValueError(
            f"Argument {name} is expected to be of type '{_name(var_type)}' and not '{type(var).__name__}'"
        )


def check_type_or_none(var_type: type | tuple[type, ...], var: object, name: str) -> None:
    """``ValueError`` unless ``var`` is None or a ``var_type`` (pulsar-client's ``_check_type_or_none``)."""
    if var is not None and not isinstance(var, var_type):
        raise ValueError(f"Argument {name} is expected to be either None or of type '{_name(var_type)}'")


def _name(var_type: type | tuple[type, ...]) -> str:
    return var_type.__name__ if isinstance(var_type, type) else var_type[0].__name__


def check_service_url(url: str) -> None:
    """``ValueError`` for a service URL without a known scheme, worded as the C++ client's.

    Only the start is checked: in ``pulsar://h1:6650,h2:6650`` the scheme covers every host.
    """
    if "://" not in url:
        raise ValueError(f"The scheme part is missing: {url}")
    scheme = url.split("://", 1)[0]
    if not scheme:
        raise ValueError(f"Expected scheme name at index 0: {url}")
    if scheme not in SERVICE_URL_SCHEMES:
        raise ValueError(f"Invalid scheme: {scheme}")


def check_message_arguments(
    *,
    properties: Any,
    partition_key: Any,
    ordering_key: Any,
    sequence_id: Any,
    replication_clusters: Any,
    disable_replication: Any,
    event_timestamp: Any,
) -> None:
    """The checks of ``Producer.send`` / ``send_async`` (the content is checked by ``check_content``)."""
    check_type_or_none(dict, properties, "properties")
    check_type_or_none(str, partition_key, "partition_key")
    check_type_or_none(str, ordering_key, "ordering_key")
    check_type_or_none(int, sequence_id, "sequence_id")
    check_type_or_none(list, replication_clusters, "replication_clusters")
    check_type(bool, disable_replication, "disable_replication")
    check_type_or_none(int, event_timestamp, "event_timestamp")


def of_type(var_type: type | tuple[type, ...]) -> Check:
    """The check of an option that must be a ``var_type``."""

    def check(value: object, name: str) -> None:
        check_type(var_type, value, name)

    return check


def of_type_or_none(var_type: type | tuple[type, ...]) -> Check:
    """The check of an option that must be None or a ``var_type``."""

    def check(value: object, name: str) -> None:
        check_type_or_none(var_type, value, name)

    return check


def callable_or_none(signature: str) -> Check:
    """The check of a callback option (``message_listener``...): None or callable as ``signature`` says."""

    def check(value: object, name: str) -> None:
        if value is not None and not callable(value):
            raise ValueError(f"{name} must be callable{signature}")

    return check


def check_topics(value: object, name: str) -> None:
    """``subscribe``'s topic: a name, a list of names or a compiled pattern (pulsar-client's message)."""
    if not isinstance(value, str | list | tuple | re.Pattern):
        raise ValueError(f"Argument '{name}' is expected to be of a type between (str, list, re.pattern)")
