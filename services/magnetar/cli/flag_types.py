"""Argument types shared by the node commands' flags, which also read settings files.

A setting arrives as a flag's text or as a value from a YAML/broker.conf settings file
(cli/config_file.py), so a boolean may be ``true``/``false`` text or a YAML bool, and a list a
comma-separated string or a YAML list.
"""

from __future__ import annotations

from typing import Any


def flag_bool(value: Any) -> bool:
    """A boolean setting (``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def flag_names(value: Any) -> list[str]:
    """A list setting: comma-separated (broker.conf) or a YAML list."""
    items = value if isinstance(value, list) else str(value).split(",")
    return [str(x).strip() for x in items if str(x).strip()]
