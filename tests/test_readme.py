"""The README's Python runs as written: every ```python block of it, in
order, as one script in an empty directory, with worker processes, and its
pipeline's output is the whole volume's smoothing (the README's first
example once called an undefined function on files that did not exist)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"

pytestmark = pytest.mark.skipif(not README.is_file(), reason="no source checkout beside the tests")

#: a fence opening a Python block (indented inside a list item or not), its
#: code, and the fence that closes it at the same indent
BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[str]:
    """The code of each Python block of a Markdown text, dedented."""
    return [textwrap.dedent(m.group(2)) for m in BLOCK.finditer(text)]


def test_the_block_finder_finds_indented_and_top_level_blocks() -> None:
    text = "a\n```python\nx = 1\n```\n- item\n\n  ```python\n  def f():\n      pass\n  ```\n"
    assert python_blocks(text) == ["x = 1\n", "def f():\n    pass\n"]


def test_every_python_block_of_the_readme_runs_as_written(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text())
    assert len(blocks) >= 3, "the README's examples went missing"
    check = textwrap.dedent(
        """
        # (the test's own check, after the README's code)
        whole = box_mean(open_ds("in.zarr/raw")[:], 8)
        written = open_ds("out.zarr/smooth")[:]
        assert np.allclose(whole, written, atol=1e-5), "the blocks do not add up to the volume"
        print("README OK")
        """
    )
    script = tmp_path / "readme.py"
    script.write_text("\n\n".join(blocks) + check)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "README OK" in done.stdout
    # the resume example skipped what the first run did
    assert "Skipped: 64" in done.stdout, done.stdout[-3000:]
