"""pulsar-admin's relative times and sizes, as ``magnetar-admin``'s flags take them.

A script written for pulsar-admin passes ``-t 10m`` or ``-s 16G``; the same text must mean the
same seconds and bytes here. These are argparse types: a malformed value is a usage error naming
the accepted forms, before any request is sent.
"""

from __future__ import annotations

import argparse

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def relative_seconds(text: str) -> int:
    """pulsar-admin's relative time (RelativeTimeUtil): ``30`` is seconds, ``10m`` minutes,
    and ``s``/``m``/``h``/``d``/``w``/``y`` units."""
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError("time cannot be empty")
    unit = text[-1].lower() if text[-1].isalpha() else "s"
    number = text[:-1] if text[-1].isalpha() else text
    if unit not in _UNIT_SECONDS or not number.isdigit():
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: a number with an optional unit s, m, h, d, w or y")
    return int(number) * _UNIT_SECONDS[unit]


def size_bytes(text: str) -> int:
    """pulsar-admin's size (``4096``, ``10M``, ``16G``, ``3T``; k/m/g/t units); -1 is "no limit"."""
    text = text.strip()
    if text == "-1":
        return -1
    unit = text[-1].lower() if text and text[-1].isalpha() else ""
    number = text[:-1] if unit else text
    if (unit and unit not in _SIZE_UNITS) or not number.isdigit():
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: a number of bytes with an optional unit k, m, g or t")
    return int(number) * _SIZE_UNITS.get(unit, 1)


def time_or_infinite(text: str) -> int:
    """A relative time in seconds, or -1 (no limit)."""
    return -1 if text.strip() == "-1" else relative_seconds(text)
