"""Argument types shared by the node commands' flags, which also read settings files.

A setting arrives as a flag's text or as a value from a YAML/broker.conf settings file
(cli/config_file.py), so a boolean may be ``true``/``false`` text or a YAML bool, and a list a
comma-separated string or a YAML list. ``kind_of`` names what a flag's type takes in words, for the
one line that refuses a file's bad value.
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


def flag_optional_port(value: Any) -> int | None:
    """A port, or none at all: ``""``/``none``/``off`` switch a plaintext listener off (TLS only),
    as an empty ``brokerServicePort`` / ``webServicePort`` does in Pulsar."""
    if value is None or str(value).strip().lower() in ("", "none", "off"):
        return None
    return int(value)


# What each converter takes, in words, for the one line that refuses a bad value from a settings file.
_KINDS: dict[Any, str] = {
    flag_bool: "true or false",
    int: "a whole number",
    float: "a number",
    flag_optional_port: "a port number (empty: no listener)",
}


def kind_of(converter: Any, error: Exception) -> str:
    """What ``converter`` expects, in words; ``error`` (what it raised) says it for the others."""
    if converter in _KINDS:
        return _KINDS[converter]
    message = str(error)
    if message.startswith("invalid literal for int()"):
        return "a whole number"
    if message.startswith("could not convert string to float"):
        return "a number"
    return message
