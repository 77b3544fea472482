"""The Structured Streaming page (docs/spark/streaming.md): it has its three examples, and its
tables name every option the source, the sink and the continuous export take.

The examples themselves run twice in a row against a real standalone with every other page's
(tests/integration/test_docs.py), which is what shows that a streaming example does not only work
on an empty checkpoint or a fresh topic. The option tables are checked against the options the
code reads, so an option added later without a line on the page fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.test_docs import ROOT, python_blocks

PAGE = ROOT / "docs" / "spark" / "streaming.md"
JOBS = ROOT / "services" / "magnetar" / "jobs"


def _table_names(section: str) -> set[str]:
    """The `names` in the first column of the tables under the page's heading ``section``."""
    text = PAGE.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end > 0 else None]
    names: set[str] = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            first = line.split("|")[1]
            names |= set(re.findall(r"`([^`]+)`", first))
    return names


def _quoted_options(path: Path, pattern: str) -> set[str]:
    return set(re.findall(pattern, path.read_text()))


def test_page_has_the_three_examples() -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 3
    assert "readStream" in blocks[0] and 'format("console")' in blocks[0]
    assert 'format("parquet")' in blocks[1]
    assert 'writeStream.format("magnetar")' in blocks[2] and "withColumn" in blocks[2]


def test_source_options_are_all_documented() -> None:
    read = _quoted_options(JOBS / "stream_reader.py", r'opt\("([A-Za-z]+)"\)')
    for module in ("source.py", "source_reads.py"):
        read |= _quoted_options(JOBS / module, r'opt\("([A-Za-z]+)"\)')
    read -= {"startAfter", "endAt", "publishTimeSlackMs"}  # batch only (a streaming read has no pushdown)
    assert read, "expected the readers' options"
    assert read <= _table_names("Source options"), sorted(read - _table_names("Source options"))


def test_sink_options_are_all_documented() -> None:
    text = (JOBS / "sink_options.py").read_text()
    names = {
        n
        for call in re.findall(r"_(?:first|int_option)\(options, ([^)]*)\)", text)
        for n in re.findall(r'"([^"]+)"', call)
    }
    assert {"serviceUrl", "service.url", "adminUrl", "topic", "writerId", "sendTimeoutMs"} <= names
    assert names <= _table_names("Sink options"), sorted(names - _table_names("Sink options"))


def test_continuous_export_flags_and_spec_fields_are_all_documented() -> None:
    from magnetar.jobs.streaming_export import STREAMING_ONLY

    flags = {flag for flag, _ in STREAMING_ONLY} | {"--streaming", "--no-fail-on-data-loss"}
    documented = _table_names("Continuous export")
    assert flags <= documented, sorted(flags - documented)
    crd = (ROOT / "crds" / "magnetar.dev_topics.yaml").read_text()
    block = crd[crd.index("                streamingExport:") :]
    fields = set(re.findall(r"^ {20}([a-zA-Z]+):", block[: block.index("\n            status:")], re.M))
    fields |= set(re.findall(r"^ {24}([a-zA-Z]+):", block[: block.index("\n            status:")], re.M))
    fields -= {"description", "type", "required", "properties", "pattern", "minLength", "enum"}
    page = PAGE.read_text()
    assert {"target", "checkpoint", "claimName", "deleteClaim"} <= fields
    assert all(f"{name}:" in page for name in fields), sorted(n for n in fields if f"{n}:" not in page)
