"""Lines and the summary of ``scripts/fault_seeds.sh``: read pytest's junit XML of each seed.

A failure's class is the first line of its message with numbers (seeds, ports, pages, timings)
replaced by ``N``, so that runs failing the same way count together and a new way stands out.
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

_NUMBER = re.compile(r"\d+(\.\d+)?")


def outcomes(xml_path: Path) -> list[tuple[str, str, str]]:
    """(test name without its seed, outcome, failure class) for each test case of one run."""
    if not xml_path.exists():
        return [("(pytest did not write a report)", "error", "no junit XML")]
    found: list[tuple[str, str, str]] = []
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        name = re.sub(r"\[seed\d+\]", "", case.get("name", "?"))
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or node.text or "").strip().splitlines()
                why = _NUMBER.sub("N", message[0] if message else "")[:200]
                break
        found.append((name, outcome, why))
    return found or [("(no test collected)", "error", "no tests")]


def line(xml_path: Path, seed: str) -> None:
    for name, outcome, why in outcomes(xml_path):
        print(f"seed={seed} {name} {outcome}{'  ' + why if why and outcome != 'skipped' else ''}", flush=True)


def summary(directory: Path) -> None:
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    classes: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for xml_path in sorted(directory.glob("seed*.xml")):
        seed = xml_path.stem.removeprefix("seed")
        for name, outcome, why in outcomes(xml_path):
            counts[(name, outcome)] += 1
            if outcome in ("failed", "error"):
                classes[(name, why)].append(seed)
    for (name, outcome), n in sorted(counts.items()):
        print(f"{name}: {outcome} {n}")
    if classes:
        print("failure classes (test, first line, seeds):")
        for (name, why), seeds in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            print(f"  {name}: {why!r} x{len(seeds)} seeds {','.join(seeds[:20])}")
    else:
        print("no failures")
    figures = directory / "figures.jsonl"
    if figures.exists():
        ends: collections.Counter[tuple[str, str]] = collections.Counter()
        for raw in figures.read_text().splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(raw)
                if "outcome" in doc:
                    ends[(str(doc.get("scenario")), str(doc["outcome"]))] += 1
        for (scenario, outcome), n in sorted(ends.items()):
            print(f"outcome {scenario}: {outcome} x{n}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["line"] and len(sys.argv) == 4:
        line(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1:2] == ["summary"] and len(sys.argv) == 3:
        summary(Path(sys.argv[2]))
    else:
        sys.exit("usage: fault_seeds_report.py line XML SEED | summary DIR")
