"""Decoded values fitted to the merged type of the ``value`` column (``conform``).

A value decoded with its writer version (fastavro) or parsed from JSON is reshaped into what Arrow
takes for the merged type: fields the merge lacks are dropped, missing ones are null, and a value
of the wrong kind (a JSON payload that does not follow its schema) becomes null rather than failing
the whole read; jobs/value_schema.py describes the rules in full.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
from collections.abc import Mapping
from typing import Any

from magnetar.jobs.value_types import Node

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_DAY = datetime.date(1970, 1, 1)


def conform(value: Any, node: Node) -> Any:
    """``value`` (decoded by fastavro or ``json``) as a value Arrow takes for ``arrow_type(node)``;
    None for a value of another kind (a JSON payload that does not follow its schema)."""
    if value is None:
        return None
    kind = node.kind
    if kind == "struct":
        if not isinstance(value, Mapping):
            return None
        return {name: conform(value.get(name), child) for name, child in node.fields}
    if kind == "array":
        if not isinstance(value, (list, tuple)):
            return None
        assert node.item is not None
        return [conform(x, node.item) for x in value]
    if kind == "map":
        if not isinstance(value, Mapping):
            return None
        assert node.item is not None
        return {str(k): conform(v, node.item) for k, v in value.items()}
    return _conform_scalar(value, node)


def _conform_scalar(value: Any, node: Node) -> Any:  # one case per type
    kind = node.kind
    if kind == "json":
        return json.dumps(value, default=_json_default, sort_keys=True)
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind in ("int", "long"):
        if isinstance(value, datetime.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            return micros // 1000 if kind == "int" else micros
        if isinstance(value, bool):
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            return None
        limit = 1 << (31 if kind == "int" else 63)
        return value if -limit <= value < limit else None
    if kind in ("float", "double"):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)):  # a JSON enum written by its value, a number for a string
            return json.dumps(value)
        return str(value) if node.unit == "uuid" and not isinstance(value, (dict, list, bytes)) else None
    if kind == "binary":
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str):  # JSON carries bytes as base64 (Jackson's and the Python client's way)
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                return None
        return None
    if kind == "date":
        if isinstance(value, datetime.date):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return _EPOCH_DAY + datetime.timedelta(days=value)
        return None
    if kind in ("timestamp", "timestamp_ntz"):
        if isinstance(value, datetime.datetime):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            micros = int(value) * (1000 if node.unit == "millis" else 1)
            stamp = _EPOCH + datetime.timedelta(microseconds=micros)
            return stamp if kind == "timestamp" else stamp.replace(tzinfo=None)
        return None
    if kind == "decimal":
        try:
            if isinstance(value, (int, float, str, decimal.Decimal)) and not isinstance(value, bool):
                return decimal.Decimal(str(value)).quantize(decimal.Decimal(1).scaleb(-node.scale))
        except decimal.InvalidOperation:
            return None
        return None
    return None


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    return str(value)
