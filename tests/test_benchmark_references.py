"""The synthetic benchmark's error columns against the value each row estimates (benchmarks/bench_synthetic.py).

Its ground truth is the Aumann–Shapley value; sampled Shapley and Banzhaf estimate other values, so their MAE
against it was mostly the gap between two values (softplus, N = 10: exact Shapley is 0.009 from the truth, sampled
Shapley with 200 permutations 0.0115), not the estimator's error. ``mae_own_value`` measures against exact Shapley
/ Banzhaf where they are computable."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from aumann.attribution import ExactBanzhaf, ExactShapley, Panel, SampledShapley, attribute
from aumann.attribution import metrics as M

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_synthetic
    finally:
        sys.path.remove(str(BENCHMARKS))
    return bench_synthetic


def test_sampled_rows_are_scored_against_the_value_they_estimate(bench):
    f, z, truth, dv = bench.instance("softplus", 10, 2, 5, 0)
    own = bench.own_values(f, z, truth)
    exact = attribute(f, Panel(z), method=ExactShapley()).phi
    np.testing.assert_allclose(own["shapley"], exact, atol=1e-14)
    np.testing.assert_allclose(own["banzhaf"], attribute(f, Panel(z), method=ExactBanzhaf()).phi, atol=1e-14)
    assert M.mae(exact, truth) > 1e-3  # the two values differ: the ground truth is not sampled Shapley's target
    res = attribute(f, Panel(z), method=SampledShapley(permutations=200), rng=0)
    row = bench.score(res, truth, dv, 5, own[bench.OWN_VALUE["Sampled Shapley (200)"]])
    assert row["mae_own_value"] == pytest.approx(M.mae(res.phi, exact))
    assert row["mae"] == pytest.approx(M.mae(res.phi, truth))
    assert np.isnan(bench.score(res, truth, dv, 5)["mae_own_value"])  # LOO, or N above OWN_MAX_N
    assert "LOO" not in bench.OWN_VALUE and bench.own_values(f, np.zeros((1, bench.OWN_MAX_N + 1, 5)), truth) is None
