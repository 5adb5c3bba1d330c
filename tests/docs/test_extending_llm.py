"""docs/extending.md, "An LLM backend": its example runs as written (a core, a layer, a registered name)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start:] if nxt < 0 else text[start:nxt]


def test_the_llm_backend_example_runs():
    section = _section(DOC.read_text(encoding="utf-8"), "## An LLM backend")
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "the LLM-backend section has a python example"
    namespace: dict = {"__name__": "extending_llm_example"}
    exec(compile("\n".join(blocks), str(DOC), "exec"), namespace)
    from aumann.simulators.llm import backend_names

    assert "always-yes" in backend_names()
