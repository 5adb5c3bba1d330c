"""Registry, configs and a smoke run of every registered scenario."""

from __future__ import annotations

import numpy as np
import pytest

from aumann import scenarios
from aumann.errors import ConfigError
from aumann.scenarios.base import Scenario, target_step
from tests.tiny import tiny_config


def test_builtins_are_registered():
    assert {"social-llm", "midscale-social"} <= set(scenarios.names())
    assert scenarios.get("social_llm") is scenarios.get("social-llm")
    assert all(isinstance(scenarios.get(n), Scenario) for n in scenarios.names())


def test_unknown_scenario_lists_valid_names():
    with pytest.raises(scenarios.UnknownScenarioError, match="social-llm"):
        scenarios.get("no-such-scenario")


def test_register_rejects_non_scenarios():
    with pytest.raises(ConfigError, match="Scenario"):
        scenarios.register(object())


def test_invalid_config_is_a_config_error(tmp_path):
    sc = scenarios.get("social-llm")
    with pytest.raises(ConfigError, match="agents"):
        sc.load_config(agents=1)
    with pytest.raises(ConfigError, match="does not exist"):
        sc.load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("agents = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        sc.load_config(bad)
    with pytest.raises(ConfigError, match="reference_game"):
        sc.load_config(study={"reference_game": "nonsense"})


def test_smoke_every_scenario(scenario_name):
    sc, cfg = tiny_config(scenario_name, steps=4)
    run = sc.simulate(cfg, rng=np.random.default_rng(3), keep_from=0)
    T, N, D = run.panel.shape
    assert (T, N, D) == (4, cfg.agents, len(sc.features))
    assert tuple(run.panel.features) == sc.features
    assert np.all(np.isfinite(run.panel.values))
    f, f_orig = sc.indicators(cfg)
    from aumann.simulators import indicator_values as step_values

    fv, fo = step_values(f, run.panel), step_values(f_orig, run.panel)
    assert np.all(np.isfinite(fv)) and np.all(np.isfinite(fo))
    z0 = sc.baseline_features(run.before(2), cfg)
    assert z0.shape == (N, D)


def test_same_seed_same_panel_different_seed_different(scenario_name):
    sc, cfg = tiny_config(scenario_name, steps=5)
    a = sc.simulate(cfg, rng=11).panel
    b = sc.simulate(cfg, rng=11).panel
    c = sc.simulate(cfg, rng=12).panel
    assert a.equals(b)
    assert not np.array_equal(a.values, c.values)


def test_fork_without_intervention_replays_and_baseline_features_match_the_action(scenario_name):
    """Deletion and attribution remove the same thing: the per-agent baseline equals the features
    the agents have after re-simulating the step with everyone at the baseline action."""
    sc, cfg = tiny_config(scenario_name, steps=6)
    run = sc.simulate(cfg, rng=5, keep_from=0)
    for t in (3, 5):
        z, _ = sc.step_with_baseline(run.before(t), cfg, [])
        np.testing.assert_array_equal(z, run.panel.values[t])
        zb, _ = sc.step_with_baseline(run.before(t), cfg, range(cfg.agents))
        np.testing.assert_allclose(sc.baseline_features(run.before(t), cfg), zb, atol=1e-12)


def test_target_step_is_post_midpoint_argmax():
    assert target_step(np.array([9.0, 0, 0, 1, 3, 3, 2])) == 4  # ⌈7/2⌉ = 4, first max
    assert target_step(np.array([5.0, 1.0])) == 1


def test_baseline_actions_by_id_reach_agents_with_tuple_ids():
    """A panel labels a tuple unique_id by its text ('(0, 1)'), and the scenario matched the panel's labels with
    the model's ids as they are: no agent was ever 'present', so a baseline action by id acted on nobody, without
    a word -- the baseline features were the unforced step and every deletion fork deleted nothing. The panel's
    labels are now matched with the model's ids through the panel's own labelling, and the action gets the ids."""
    import mesa
    from pydantic import Field

    from aumann.scenarios import ScenarioConfig
    from aumann.simulators import FeatureRecorder

    class Cell(mesa.Agent):
        def __init__(self, model, uid):
            super().__init__(model)
            self.unique_id, self.w = uid, 1.0 + uid[0] + uid[1]

        def step(self):
            self.w += 1.0

    class Board(mesa.Model):
        def __init__(self, seed):
            super().__init__(rng=seed)
            for x in range(2):
                for y in range(2):
                    Cell(self, (x, y))

        def step(self):
            self.agents.shuffle_do("step")

    class Config(ScenarioConfig):
        agents: int = Field(4, ge=2)
        steps: int = Field(3, ge=2)

    seen = []

    def idle(model, ids):
        seen.append(list(ids))
        for a in model.agents.select(lambda a: a.unique_id in set(ids)):
            a.w = -a.w  # so the forced agents' rows differ from the unforced step

    sc = Scenario(name="board", description="tuple ids", config_model=Config,
                  build_model=lambda cfg, rng, backend=None: Board(int(rng.integers(100))),
                  make_recorder=lambda cfg: FeatureRecorder({"w": "w"}), features=("w",),
                  indicator=lambda cfg: "lin", original=lambda cfg: "lin",
                  baseline_action=idle, baseline_action_by="id", baseline_description="negates its value")
    cfg = Config()
    run = sc.simulate(cfg, rng=np.random.default_rng(1), keep_from=0)
    ids = run.panel.agent_ids
    assert ids.tolist() == ["(0, 0)", "(0, 1)", "(1, 0)", "(1, 1)"]
    before = run.before(1)
    assert sc.present(before, ids).tolist() == [0, 1, 2, 3]
    z0 = sc.baseline_features(before, cfg, agent_ids=ids)
    np.testing.assert_array_equal(z0[:, 0], -run.panel.values[0, :, 0] + 1.0)  # negated, then stepped (+1)
    assert seen[-1] == [(0, 0), (0, 1), (1, 0), (1, 1)]  # the model's ids, not their text
    z, _ = sc.step_with_baseline(before, cfg, [2], agent_ids=ids)
    assert seen[-1] == [(1, 0)]
    np.testing.assert_array_equal(z[:, 0], np.where(np.arange(4) == 2, z0[:, 0], run.panel.values[1, :, 0]))


def test_a_scenario_registered_under_a_mixed_case_name_is_found_by_that_name(monkeypatch):
    """``get`` normalises the name it is given (``My_Model`` → ``my-model``) but ``register`` kept the name as
    written: names() listed 'My_Model' and get('My_Model') said "unknown scenario 'My_Model'; registered
    scenarios: ['My_Model', ...]"."""
    import dataclasses

    monkeypatch.setattr(scenarios, "_REGISTRY", dict(scenarios._REGISTRY))
    base = scenarios.get("midscale-social")
    mine = scenarios.register(dataclasses.replace(base, name="My_Model"))
    assert "My_Model" in scenarios.names()
    assert scenarios.get("My_Model") is mine and scenarios.get("my-model") is mine
    again = scenarios.register(dataclasses.replace(base, name="my-model"))  # the same name once normalised: replaces
    assert scenarios.get("My_Model") is again and "My_Model" not in scenarios.names()


@pytest.mark.parametrize("name", ["../x", "a.py:f", "pkg.module:fn", "dir\\x"])
def test_a_scenario_cannot_be_named_like_a_spec_or_a_path(name):
    """``get`` looks names up before it reads text with ':' as a ``module:attribute`` / ``file.py:attribute`` spec,
    so a scenario registered as 'a.py:f' would hide that file; such names are refused where the Scenario is made
    (a scenario name is one path component: runs/<name>-seed<S>). Indicators refuse them at register()."""
    import dataclasses

    from aumann.errors import UnsafeNameError

    with pytest.raises(UnsafeNameError, match=r"scenario name .* cannot be used as a file or folder name: it contains"):
        dataclasses.replace(scenarios.get("midscale-social"), name=name)
