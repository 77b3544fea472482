"""The README's Python snippets run as written against a real standalone.

The README is what a new user tries first; an import it promises that does not exist
(``from magnetar.asyncio import Client`` once raised ``ModuleNotFoundError``) is a bug nobody
notices until then. Each ```python block runs in a fresh interpreter, so every import is really
resolved, with the README's service URL pointed at this test's standalone. The snippets carry
their own ``assert`` lines (the message received is the one sent), so a snippet that runs but
does the wrong thing fails too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.standalone import StandaloneProcess

README = Path(__file__).resolve().parents[2] / "README.md"
README_URL = "magnetar://127.0.0.1:6650"
# Examples that set a policy call the admin REST API of `magnetar standalone` (default port 8080).
README_ADMIN_URL = "http://127.0.0.1:8080"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[str]:
    return _BLOCK.findall(README.read_text())


def test_readme_has_python_blocks_that_use_the_documented_url() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 2, "expected the sync and the asyncio examples"
    assert all(README_URL in block for block in blocks)
    assert any("from magnetar.asyncio import" in block for block in blocks)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index: int, standalone: StandaloneProcess, tmp_path: Path) -> None:
    code = python_blocks()[index].replace(README_URL, standalone.service_url)
    code = code.replace(README_ADMIN_URL, standalone.admin_url.rstrip("/"))
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(code)
    # Run outside the repository so that only the installed package is importable.
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"README block {index} failed:\n{code}\n--- stderr:\n{done.stderr}"
