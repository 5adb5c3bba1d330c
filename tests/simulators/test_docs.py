"""Every ```python block of docs/simulators.md runs, in order, in one namespace."""

from __future__ import annotations

import contextlib
import io
import re

from tests.paths import REPO

DOC = REPO / "docs" / "simulators.md"


def test_docs_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 6
    ns: dict = {"__name__": "docs_simulators"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for k, code in enumerate(blocks):
            exec(compile(code, f"{DOC.name}[block {k}]", "exec"), ns)  # our own docs
    text = out.getvalue()
    assert "Panel(T=30, N=20, D=2, features=['wealth', 'rich'], dtype=float64)" in text
    assert "(3, 100000, 2)" in text and "(5, 20, 1)" in text
