"""Java properties text (Pulsar's ``standalone.conf`` / ``broker.conf``) read into a dict of strings.

Pulsar loads its configuration with ``java.util.Properties``, so an operator's file follows its
rules, and a file that Pulsar reads must read the same here: ``#`` and ``!`` start a comment line;
a key ends at the first unescaped ``=``, ``:`` or blank; a line ending in an odd number of
backslashes continues on the next one (whose leading blanks are dropped); ``\\t``, ``\\n``,
``\\uXXXX`` and ``\\x`` (any other character, itself) are escapes. The last of two equal keys wins,
as in Java. Pulsar then trims each value, and a blank value leaves the setting at its default;
``config_file`` does that part, since what "unset" means depends on the setting.
"""

from __future__ import annotations

import re

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A line the properties format cannot read; ``line`` is its number (from 1)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


def parse_properties(text: str) -> dict[str, str]:
    """The key/value pairs of ``text``, in file order."""
    result: dict[str, str] = {}
    for number, logical in _logical_lines(_LINE_BREAK.split(text)):
        key, value = _split(logical)
        result[_unescape(key, number)] = _unescape(value, number)
    return result


def _logical_lines(natural: list[str]) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: comments and blank lines dropped,
    continuations joined."""
    lines: list[tuple[int, str]] = []
    index = 0
    while index < len(natural):
        start = index
        text = natural[index].lstrip(_BLANKS)
        index += 1
        if not text or text[0] in "#!":
            continue
        while _continues(text) and index < len(natural):
            text = text[:-1] + natural[index].lstrip(_BLANKS)
            index += 1
        if _continues(text):  # a continuation at the end of the file continues into nothing
            text = text[:-1]
        lines.append((start + 1, text))
    return lines


def _continues(text: str) -> bool:
    trailing = len(text) - len(text.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=:" or char in _BLANKS:
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(raw: str, line: int) -> str:
    if "\\" not in raw:
        return raw
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        index += 1
        if char != "\\" or index >= len(raw):
            out.append(char)
            continue
        escaped = raw[index]
        index += 1
        if escaped == "u":
            digits = raw[index : index + 4]
            if len(digits) < 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(line, f"malformed \\uxxxx escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    return "".join(out)
