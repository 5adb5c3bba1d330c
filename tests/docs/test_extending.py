"""docs/extending.md: every Python block runs (one fresh interpreter per section, its blocks in order)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.paths import REPO

DOC = REPO / "docs" / "extending.md"
REQUIRED = ("A scenario", "An indicator", "A method", "A row", "A stage", "A report section", "An LLM backend")


def sections() -> dict[str, list[str]]:
    """{section title: its ```python blocks}, for every "## " section of the page."""
    out: dict[str, list[str]] = {}
    title = None
    for part in re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = re.findall(r"^```python\n(.*?)^```", body, flags=re.M | re.S)
    return out


def test_every_extension_point_has_a_section():
    found = sections()
    for title in REQUIRED:
        assert title in found, title
        if title != "An LLM backend":  # the llm branch writes that one
            assert found[title], f"section {title!r} has no runnable example"


@pytest.mark.parametrize("title", [t for t, blocks in sections().items() if blocks])
def test_the_example_runs(title, tmp_path):
    code = "\n\n".join(sections()[title])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"docs/extending.md, {title!r}:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip(), f"{title!r} printed nothing"
