"""Sampled Shapley of the re-simulation game with the step map as control variate: unbiased for the
fork game's exact Shapley value (by enumeration of every coalition's fork), efficient, honest about forks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aumann import scenarios
from aumann.attribution import ExactShapley
from aumann.errors import MethodError, StepMapUnavailable
from aumann.evaluation import DeletionOracle, resimulation_game, resimulation_shapley_cv


def _setup(name: str, agents: int = 8):
    sc = scenarios.get(name)
    cfg = sc.load_config(agents=agents, steps=4)
    run = sc.simulate(cfg, rng=0, keep_from=0)
    model = run.before(3)
    f, f_orig = sc.indicators(cfg)
    oracle = DeletionOracle(sc, cfg, model, f, f_orig)
    exact = ExactShapley().attribute_game(resimulation_game(oracle, agents)).phi[0]  # 2^8 forks
    return sc, cfg, model, oracle, exact


@pytest.mark.parametrize("name", ["midscale-social", "social-llm"])
def test_both_controls_estimate_the_fork_games_shapley_value(name):
    sc, cfg, model, oracle, exact = _setup(name)
    for seed in (0, 1):
        first = resimulation_shapley_cv(sc, model, cfg, permutations=24, rng=seed, oracle=oracle)
        assert np.all(np.abs(first.phi[0] - exact) <= 4.5 * first.stderr[0] + 1e-12)
        assert first.method == "sampled_shapley_cv_resimulation" and first.provenance["control"] == "aumann-shapley"
        assert first.n_evals == 24 * 7 + 2
        assert first.provenance["forks"] - first.n_evals in (0, 2)  # the generic kernel values both ends twice
        assert first.max_efficiency_gap < 1e-9 * max(1.0, abs(first.delta_v[0]))
        mapped = resimulation_shapley_cv(sc, model, cfg, permutations=8, control="step-map", map_permutations=200,
                                         rng=seed, oracle=oracle)
        assert np.all(np.abs(mapped.phi[0] - exact) <= 4.5 * mapped.stderr[0] + 1e-12)
        assert mapped.n_evals == 8 * 7 + 2 and mapped.provenance["map_permutations"] == 200
        assert mapped.provenance["forks"] - mapped.n_evals in (0, 2)
        assert mapped.max_efficiency_gap < 1e-9 * max(1.0, abs(mapped.delta_v[0]))
        np.testing.assert_allclose(mapped.delta_v, first.delta_v, rtol=1e-12)  # the fork game's Δv, both
    # MidScale's map is exact at the corners: its marginals equal the forks', the fork level adds nothing;
    # SocialLLM's holds same-step decisions: the difference is real and measured
    if name == "midscale-social":
        assert mapped.provenance["map_exact_agents"] == 1.0
    else:
        assert mapped.provenance["map_exact_agents"] < 1.0 and mapped.provenance["map_variance_reduction"] > 0


def test_bad_control_and_missing_step_map_are_typed_errors():
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=6, steps=3)
    run = sc.simulate(cfg, rng=0, keep_from=0)
    with pytest.raises(MethodError, match="control"):
        resimulation_shapley_cv(sc, run.before(2), cfg, permutations=8, control="taylor")
    with pytest.raises(StepMapUnavailable, match="no step_map"):
        resimulation_shapley_cv(dataclasses.replace(sc, step_map=None), run.before(2), cfg, permutations=8)
