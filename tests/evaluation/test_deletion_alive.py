"""Forks hand their living mask to alive-aware indicators, as the engine does for recorded panels."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from aumann import scenarios
from aumann.evaluation.deletion import DeletionOracle
from aumann.panel import Panel

# one re-simulated step of 4 agents; agent 3 died during it (its row holds junk)
Z = np.array([[[1.0], [2.0], [3.0], [1000.0]]])
ALIVE = np.array([[True, True, True, False]])


def _scenario_with_a_dying_fork(monkeypatch):
    sc = dataclasses.replace(scenarios.get("midscale-social"), resimulate_fn=None)  # forks, not its exact shortcut
    monkeypatch.setattr(type(sc), "_fork_one",
                        lambda self, model, config, targets: SimpleNamespace(panel=Panel(Z, alive=ALIVE)))
    return sc


def test_step_with_baseline_returns_the_forks_living_mask(monkeypatch):
    sc = _scenario_with_a_dying_fork(monkeypatch)
    z, _ctx, alive = sc.step_with_baseline(None, None, [0], with_alive=True)
    assert z.shape == (4, 1) and alive.tolist() == [True, True, True, False]
    z2, _ctx2 = sc.step_with_baseline(None, None, [0])  # the two-item form stays as it was
    np.testing.assert_array_equal(z2, z)


def test_oracle_evaluates_alive_aware_indicators_over_the_living(monkeypatch):
    sc = _scenario_with_a_dying_fork(monkeypatch)
    oracle = DeletionOracle(scenario=sc, config=None, model_before=None, f="lin", f_original="lin")
    f_k, f_k_original = oracle.values([0])
    assert f_k == f_k_original == 2.0  # the mean over the three living rows, not 251.5 over all four


def test_indicators_without_the_keyword_still_see_every_row(monkeypatch):
    sc = _scenario_with_a_dying_fork(monkeypatch)
    oracle = DeletionOracle(scenario=sc, config=None, model_before=None,
                            f=lambda z: z[..., 0].mean(-1), f_original=lambda z: z[..., 0].mean(-1))
    assert oracle.values([1])[0] == 251.5
