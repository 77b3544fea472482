"""Print, one per line, the requirements an image installs, read from pyproject.toml.

    python3 requirements.py pyproject.toml server          # [project].dependencies + the `server` extra
    python3 requirements.py pyproject.toml server spark    # several extras
    python3 requirements.py pyproject.toml --build         # [build-system].requires

Extras that name the project itself (``magnetar[server,dev]``) are expanded. The output is sorted
and de-duplicated, so the image layer that installs it stays cached until a pin really changes.
Runs on the image's Python (3.11, tomllib) with no third-party packages.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path
from typing import Any


def requirements(pyproject: dict[str, Any], extras: list[str]) -> list[str]:
    project = pyproject["project"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    self_ref = re.compile(rf"{re.escape(project['name'])}\[(?P<extras>[^\]]+)\]", re.IGNORECASE)
    found: set[str] = set(project.get("dependencies", []))
    todo, seen = list(extras), set[str]()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"requirements.py: no extra {extra!r} in pyproject.toml (have: {', '.join(optional)})")
        seen.add(extra)
        for req in optional[extra]:
            match = self_ref.fullmatch(req.replace(" ", ""))
            if match:
                todo.extend(match["extras"].split(","))
            else:
                found.add(req)
    return sorted(found, key=str.lower)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    pyproject = tomllib.loads(Path(argv[0]).read_text())
    if argv[1:] == ["--build"]:
        lines = sorted(pyproject["build-system"]["requires"], key=str.lower)
    else:
        lines = requirements(pyproject, argv[1:])
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
