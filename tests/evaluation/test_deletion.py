"""The re-simulation game and deletion oracle of :mod:`aumann.evaluation.deletion`."""

from __future__ import annotations

import pytest

from aumann.attribution.indicators import evaluate
from aumann.evaluation.deletion import scenario_resimulation_game
from tests.tiny import tiny_config


def test_resimulation_game_values_are_forks():
    sc, cfg = tiny_config("social-llm", agents=6, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    game = scenario_resimulation_game(sc, run.before(3), cfg)
    f = sc.indicator(cfg)
    full = game.full_value()
    assert full == pytest.approx(float(evaluate(f, run.panel.values[3])))  # nobody removed: the factual step
    z_empty, ctx = sc.step_with_baseline(run.before(3), cfg, range(6))
    assert game.empty_value() == pytest.approx(float(evaluate(f, z_empty, ctx)))
