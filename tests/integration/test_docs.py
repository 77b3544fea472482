"""The documentation's Python examples run as written against a real standalone, twice; the site builds.

README.md and the pages under docs/ are what a new user tries first; an import they promise that
does not exist, or an example that only works on an empty server, is a bug nobody notices until
then. Every ```python block (```py blocks are shown only: fragments, or set-ups such as TLS that a
plain standalone does not have) runs in a fresh interpreter, outside the repository so that only
the installed package is importable, with the documented service and admin URLs pointed at this
test's standalone. The examples carry their own ``assert`` lines, so one that runs but does the
wrong thing fails too. Each runs twice in a row against the same standalone: a reader who tries an
example again must see it work again, so examples use names of their own (or assume nothing about
what is already there).

``mkdocs build --strict`` must pass as well: a page missing from the navigation, a broken link or
anchor, or a snippet that includes a file that moved fails it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess

ROOT = Path(__file__).resolve().parents[2]
DOC_URL = "magnetar://127.0.0.1:6650"
# Examples that set a policy call the admin REST API of `magnetar standalone` (default port 8080).
DOC_ADMIN_URL = "http://127.0.0.1:8080"
# A fenced block, possibly indented (inside a list item): its fence, then its body up to the same fence.
_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks(path: Path) -> list[str]:
    return [textwrap.dedent(m.group("body")) for m in _BLOCK.finditer(path.read_text())]


def all_blocks() -> list[tuple[str, int]]:
    """(file relative to the repository, index of the block in it), for every ```python block."""
    return [(str(p.relative_to(ROOT)), i) for p in doc_files() for i in range(len(python_blocks(p)))]


def test_readme_has_the_blocking_and_the_asyncio_example() -> None:
    blocks = python_blocks(ROOT / "README.md")
    assert len(blocks) == 2, "expected the blocking and the asyncio examples"
    assert all(DOC_URL in block for block in blocks)
    assert any("from magnetar.asyncio import" in block for block in blocks)


def test_docs_have_python_blocks() -> None:
    assert len(all_blocks()) > 10


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("name", "index"), all_blocks(), ids=[f"{n}:{i}" for n, i in all_blocks()])
def test_python_block_runs_twice(name: str, index: int, standalone: StandaloneProcess, tmp_path: Path) -> None:
    code = python_blocks(ROOT / name)[index]
    code = code.replace(DOC_URL, standalone.service_url)
    code = code.replace(DOC_ADMIN_URL, standalone.admin_url.rstrip("/"))
    script = tmp_path / f"block_{index}.py"
    script.write_text(code)
    for attempt in ("first", "second"):
        # Run outside the repository so that only the installed package is importable.
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (
            f"{name} block {index} failed on its {attempt} run:\n{code}\n--- stderr:\n{done.stderr}"
        )


def test_conformance_reasons_point_at_anchors_of_coming_from_pulsar() -> None:
    """The conformance test's expected failures name a difference by its anchor; each must exist."""
    conformance = (ROOT / "tests" / "client" / "test_conformance.py").read_text()
    named = set(re.findall(r'difference\("([a-z0-9-]+)"\)', conformance))
    page = (ROOT / "docs" / "coming-from-pulsar.md").read_text()
    anchors = set(re.findall(r"\{#([a-z0-9-]+)\}", page))
    assert named, "expected the conformance test to name its differences"
    assert named <= anchors, f"anchors missing from docs/coming-from-pulsar.md: {sorted(named - anchors)}"


@pytest.mark.timeout(600)
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
