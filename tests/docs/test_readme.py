"""The README's Python examples run as written (in order, sharing one namespace)."""

import re

from tests.paths import REPO

README = REPO / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), ns)
    assert ns["res"].phi.shape[1] == 20          # the Mesa example's attribution
    assert ns["ss"].n_evals > 0 and 0.0 < ns["metrics"].kendall_tau(ns["ours"], ns["ss"]) <= 1.0
