"""EconAgent through the scenario framework: registry, config, simulate, baseline forks, a tiny study."""

from __future__ import annotations

import numpy as np
import pytest

from aumann import scenarios
from aumann.errors import ConfigError
from aumann.scenarios.econagent.indicator import FEATURES, baseline_features


def test_registered_and_config_from_toml():
    assert "econagent" in scenarios.names()
    sc = scenarios.get("econagent")
    cfg = sc.load_config()
    assert (cfg.agents, cfg.steps) == (10, 36) and cfg.steps >= 30
    assert sc.features == FEATURES
    assert sc.load_config(agents=100).agents == 100
    with pytest.raises(ConfigError):
        sc.load_config(agents=1)
    with pytest.raises(ConfigError):
        sc.load_config(not_a_field=3)


def test_runnable_through_the_framework_with_consistent_baselines():
    sc = scenarios.get("econagent")
    cfg = sc.load_config(agents=4, steps=5)
    run = sc.simulate(cfg, rng=3, keep_from=0)
    again = sc.simulate(cfg, rng=3, keep_from=0)
    assert run.panel.shape == (5, 4, 7) and run.panel.equals(again.panel)
    z0 = baseline_features(run.panel)
    for t in (0, 2, 4):
        before = run.before(t)
        np.testing.assert_array_equal(sc.baseline_features(before, cfg), z0[t])
        # re-simulating step t with every household at the baseline action gives exactly z0
        feats, _ = sc.step_with_baseline(before, cfg, range(cfg.agents))
        np.testing.assert_array_equal(feats, z0[t])
        # no intervention replays the recorded step (forks copy the model and its generator)
        feats, ctx = sc.step_with_baseline(before, cfg, [])
        np.testing.assert_array_equal(feats, run.panel.values[t])
        assert ctx["price"] == run.panel.context["price"][t]
    f, f0 = sc.indicators(cfg)
    assert f.tau > 0 and f0.tau == 0


def test_tiny_faithfulness_study_runs():
    from aumann.studies.faithfulness import run_study
    from aumann.studies.tables import faithfulness_table

    sc = scenarios.get("econagent")
    cfg = sc.load_config(agents=4, steps=6, study={"permutations": 40, "ablations": False, "random_orderings": 3})
    res = run_study(sc, cfg)
    rec = res.records[0]
    assert rec["t_star"] >= 3
    assert rec["efficiency_gap"] <= 1e-6 * abs(rec["delta_v"])
    rows = {r["method"]: r for r in faithfulness_table(res)}
    assert set(rows) == {"aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out",
                         "action_aumann_shapley", "llm_judge", "random"}
    assert np.isfinite(rows["aumann_shapley"]["deletion_auc"])
