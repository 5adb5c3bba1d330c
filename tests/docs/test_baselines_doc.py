"""docs/baselines.md's Python examples run as written (in order, one namespace), and the control-variate
section's worked example shows what it says: an estimate within its standard errors of exact Shapley,
fewer permutations for the same standard error, exact efficiency, a gain that grows with N."""

import re

import numpy as np

from tests.paths import REPO

DOC = REPO / "docs" / "baselines.md"


def test_baselines_doc_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), ns)
    cv, exact12, plain = ns["cv"], ns["exact12"], ns["plain"]
    assert np.all(np.abs(cv.phi - exact12.phi) <= 4.5 * cv.stderr)
    assert np.median((plain.stderr / cv.stderr) ** 2) > 10
    assert cv.max_efficiency_gap < 1e-12 and cv.method == "sampled_shapley_cv"
    assert np.median((ns["plb"].stderr / ns["cvb"].stderr) ** 2) > 1000
    est, game5 = ns["est"], ns["game5"]
    exact5 = ns["ExactShapley"]().attribute_game(game5).phi
    assert np.all(np.abs(est.phi - exact5) <= 4.5 * est.stderr)
