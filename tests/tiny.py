"""Small scenario configs so every scenario test runs in well under a second or two."""

from __future__ import annotations

from aumann import scenarios

TINY_STUDY = {"permutations": 40, "random_orderings": 3, "path_orders": 3, "quadrature_steps": 16}


def tiny_config(name: str, **overrides):
    """A small config of any registered scenario: few agents (if it has many), few steps."""
    sc = scenarios.get(name)
    base = sc.load_config()
    kw = {"steps": 6, "runs": 1, "study": TINY_STUDY}
    if base.agents > 12:
        kw["agents"] = 12
    kw.update(overrides)
    return sc, sc.load_config(**kw)
