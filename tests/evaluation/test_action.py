"""Action attribution through the simulator: step maps against forks, and the value against
enumeration, Shapley and a finite-difference path integral."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from aumann import scenarios
from aumann.attribution import Attribution, ExactShapley
from aumann.attribution.indicators import evaluate
from aumann.errors import StepMapError, StepMapUnavailable
from aumann.evaluation import action_attribution, scenario_resimulation_game, step_map_gap
from aumann.evaluation.action import build_step_map, map_features, map_value_fn
from aumann.scenarios.base import Scenario, ScenarioConfig, StepMap
from aumann.simulators import ArrayRecorder
from tests.tiny import tiny_config

WITH_MAPS = [n for n in scenarios.names() if scenarios.get(n).step_map is not None]


def test_the_built_in_scenarios_have_step_maps():
    assert {"midscale-social", "social-llm", "econagent"} <= set(WITH_MAPS)


@pytest.mark.parametrize("name", WITH_MAPS)
def test_step_map_reproduces_the_forks_at_both_ends_and_exact_maps_at_every_corner(name, rng):
    sc, cfg = tiny_config(name, steps=5)
    run = sc.simulate(cfg, rng=3, keep_from=0)
    f = sc.indicator(cfg)
    n, d = cfg.agents, len(sc.features)
    for t in (2, 4):
        model = run.before(t)
        sm = build_step_map(sc, model, cfg)
        with torch.no_grad():
            g = map_features(sm, np.stack([np.ones(n), np.zeros(n)]), n_features=d).numpy()
        z_full, ctx_full = sc.step_with_baseline(model, cfg, [])
        z_empty, ctx_empty = sc.step_with_baseline(model, cfg, range(n))
        np.testing.assert_allclose(z_full, run.panel.values[t], atol=1e-12)  # the fork replays the factual step
        np.testing.assert_allclose(g[0], z_full, atol=1e-9, rtol=1e-12)      # λ = 1: the factual step
        np.testing.assert_allclose(g[1], z_empty, atol=1e-9, rtol=1e-12)     # λ = 0: everyone at the baseline
        v = map_value_fn(sm, f, n_features=d)
        with torch.no_grad():
            vals = v(torch.as_tensor(np.stack([np.ones(n), np.zeros(n)]))).numpy()
        assert vals[0] == pytest.approx(float(evaluate(f, z_full, ctx_full)), rel=1e-10, abs=1e-12)
        assert vals[1] == pytest.approx(float(evaluate(f, z_empty, ctx_empty)), rel=1e-10, abs=1e-12)
        if sm.exact:
            for _ in range(4):
                keep = rng.random(n) < 0.5
                z_fork, _ = sc.step_with_baseline(model, cfg, np.flatnonzero(~keep))
                with torch.no_grad():
                    z_map = map_features(sm, keep[None].astype(float), n_features=d).numpy()[0]
                np.testing.assert_allclose(z_map, z_fork, atol=1e-9, rtol=1e-12)
        else:
            assert sm.holds  # a map that is not exact says what it holds


@pytest.mark.parametrize("interaction", ["sequential", "synchronous"])
def test_social_llm_step_map_replays_the_recorded_reactions_in_both_interaction_modes(interaction):
    # reactions are decided in waves (sequential) or one batch (synchronous); the trace the map holds
    # lists them in sequential order, so G(1) is the factual step and G(0) everyone at the baseline
    sc, cfg = tiny_config("social-llm", steps=4, interaction=interaction)
    run = sc.simulate(cfg, rng=5, keep_from=0)
    model = run.before(3)
    sm = build_step_map(sc, model, cfg)
    n, d = cfg.agents, len(sc.features)
    with torch.no_grad():
        g = map_features(sm, np.stack([np.ones(n), np.zeros(n)]), n_features=d).numpy()
    z_empty, _ = sc.step_with_baseline(model, cfg, range(n))
    np.testing.assert_allclose(g[0], run.panel.values[3], atol=1e-9, rtol=1e-12)
    np.testing.assert_allclose(g[1], z_empty, atol=1e-9, rtol=1e-12)
    assert run.panel.values[3][:, 3:].sum() > 0  # the step had likes or dislikes to replay


@pytest.mark.parametrize("name", WITH_MAPS)
def test_action_attribution_is_efficient_against_the_forks(name):
    sc, cfg = tiny_config(name, steps=5)
    run = sc.simulate(cfg, rng=5, keep_from=0)
    res = action_attribution(sc, run.before(4), cfg, step=4)
    assert isinstance(res, Attribution) and res.method == "action_aumann_shapley"
    assert res.phi.shape == (1, cfg.agents) and res.steps.tolist() == [4]
    p = res.provenance
    assert p["converged"] and p["fork_gap"] < 1e-10 and p["feature_gap"] < 1e-9
    # Δv is the fork-measured v(N) − v(∅), and Σφ meets it to the adaptive budget (1e-6 relative)
    game = scenario_resimulation_game(sc, run.before(4), cfg)
    assert res.delta_v[0] == pytest.approx(game.full_value() - game.empty_value(), rel=1e-12, abs=1e-14)
    assert res.relative_efficiency_gap[0] <= 1e-6
    assert p["step_evals"] == p["grad_evals"] + p["value_evals"] == res.n_evals and p["seconds"] > 0


def test_the_attribution_saves_and_loads_with_its_provenance(tmp_path):
    sc, cfg = tiny_config("midscale-social", agents=10, steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    res = action_attribution(sc, run.before(3), cfg)
    back = Attribution.load(res.save(tmp_path / "a"))
    np.testing.assert_array_equal(back.phi, res.phi)
    assert back.provenance["game"] == "resimulation" and back.provenance["exact_map"] is True


# --------------------------------------------------------------------------- a toy propagation scenario
class ToyConfig(ScenarioConfig):
    agents: int = 7
    steps: int = 3
    nonlinear: bool = False


class ToyModel:
    """Posting p_i; agent i reads its neighbours' posts if it takes part: e_i = live_i Σ_j A_ij live_j p_j."""

    def __init__(self, cfg: ToyConfig, rng: np.random.Generator) -> None:
        n = cfg.agents
        a = (rng.random((n, n)) < 0.5).astype(float)
        self.A = np.triu(a, 1) + np.triu(a, 1).T
        self.p = rng.uniform(0.2, 1.0, n)
        self.post, self.exposure = np.zeros(n), np.zeros(n)
        self.forced = np.zeros(n, dtype=bool)

    def force_baseline(self, positions) -> None:
        self.forced[list(positions)] = True

    def step(self) -> None:
        live = (~self.forced).astype(float)
        self.post = live * self.p
        self.exposure = live * (self.A @ self.post)
        self.p = np.clip(0.7 * self.p + 0.1 * self.exposure, 0.0, 1.0)
        self.forced[:] = False


def _toy_step_map(model: ToyModel, cfg: ToyConfig) -> StepMap:
    A, p = torch.as_tensor(model.A), torch.as_tensor(model.p)
    return StepMap(fn=lambda lam: torch.stack([lam * p, lam * ((lam * p) @ A.T)], dim=-1), n_agents=cfg.agents)


def _toy_f(cfg: ToyConfig):
    if cfg.nonlinear:
        return lambda z: torch.log1p(3.0 * z[..., 1].mean(-1)) * (1.0 + z[..., 0].mean(-1))
    return lambda z: z[..., 0].mean(-1) + 2.0 * z[..., 1].mean(-1)


TOY = Scenario(
    name="toy-propagation", description="test-only", config_model=ToyConfig,
    build_model=lambda cfg, rng, backend: ToyModel(cfg, rng),
    make_recorder=lambda cfg: ArrayRecorder(lambda m: {"post": m.post, "exposure": m.exposure},
                                            features=("post", "exposure")),
    features=("post", "exposure"), indicator=_toy_f, original=_toy_f,
    baseline_action=lambda m, pos: m.force_baseline(pos),
    baseline_features_fn=lambda m, cfg: np.zeros((cfg.agents, 2)), step_map=_toy_step_map)


def _fd_path_integral(v, n: int, points: int = 4000, h: float = 1e-6) -> np.ndarray:
    """∫₀¹ ∂v/∂λ_i(τ·1) dτ by central differences on a dense midpoint grid (no autograd)."""
    taus = (np.arange(points) + 0.5) / points
    lam = np.repeat(taus[:, None, None], n, axis=2) * np.ones((1, n, 1))  # (points, n players, n coords)
    eye = np.eye(n)[None]
    with torch.no_grad():
        up = v(torch.as_tensor((lam + h * eye).reshape(-1, n))).numpy().reshape(points, n)
        down = v(torch.as_tensor((lam - h * eye).reshape(-1, n))).numpy().reshape(points, n)
    return ((up - down) / (2 * h)).mean(axis=0)


def _exact_resimulation_shapley(sc, model, cfg) -> np.ndarray:
    game = scenario_resimulation_game(sc, model, cfg)  # 2^N forks
    return ExactShapley().attribute_game(game).phi[0]


def test_multilinear_propagation_action_value_is_the_exact_shapley_value_of_the_enumerated_game():
    cfg = TOY.load_config(agents=7, steps=3)
    run = TOY.simulate(cfg, rng=4, keep_from=0)
    model = run.before(2)
    res = action_attribution(TOY, model, cfg)
    exact = _exact_resimulation_shapley(TOY, model, cfg)
    np.testing.assert_allclose(res.phi[0], exact, atol=1e-12)  # f∘G multilinear: Aumann–Shapley = Shapley
    v = map_value_fn(build_step_map(TOY, model, cfg), TOY.indicator(cfg), n_features=2)
    np.testing.assert_allclose(res.phi[0], _fd_path_integral(v, 7), atol=1e-7)
    assert res.provenance["feature_gap"] < 1e-12


def test_nonlinear_propagation_matches_the_finite_difference_integral_and_reports_its_shapley_gap(
        record_property):
    cfg = TOY.load_config(agents=7, steps=3, nonlinear=True)
    run = TOY.simulate(cfg, rng=4, keep_from=0)
    model = run.before(2)
    res = action_attribution(TOY, model, cfg, tol=1e-10)
    v = map_value_fn(build_step_map(TOY, model, cfg), TOY.indicator(cfg), n_features=2)
    np.testing.assert_allclose(res.phi[0], _fd_path_integral(v, 7), atol=1e-7)
    exact = _exact_resimulation_shapley(TOY, model, cfg)
    diff = float(np.abs(res.phi[0] - exact).max() / np.abs(exact).max())
    record_property("max_relative_difference_to_shapley", diff)
    print(f"nonlinear toy propagation: max |φ_AS − φ_Shapley| / max |φ_Shapley| = {diff:.3g}")
    assert exact.sum() == pytest.approx(res.phi.sum(), rel=1e-8)  # both split the same Δv
    assert 0 < diff < 0.5


def test_midscale_action_value_matches_finite_differences_and_reports_its_shapley_gap(record_property):
    # the real propagation model at N = 8 (2^8 = 256 forks enumerate its re-simulation game exactly)
    sc, cfg = tiny_config("midscale-social", agents=8, steps=6)
    run = sc.simulate(cfg, rng=11, keep_from=0)
    model = run.before(5)
    res = action_attribution(sc, model, cfg, tol=1e-9)
    v = map_value_fn(build_step_map(sc, model, cfg), sc.indicator(cfg), n_features=5)
    fd = _fd_path_integral(v, 8, points=2000)
    np.testing.assert_allclose(res.phi[0], fd, atol=2e-4 * np.abs(fd).max())
    exact = _exact_resimulation_shapley(sc, model, cfg)
    diff = float(np.abs(res.phi[0] - exact).max() / np.abs(exact).max())
    record_property("max_relative_difference_to_shapley", diff)
    print(f"MidScale-Social N=8: max |φ_AS − φ_Shapley| / max |φ_Shapley| = {diff:.3g} (f∘G is not multilinear)")
    assert exact.sum() == pytest.approx(res.phi.sum(), rel=1e-6)


def test_a_scenario_without_a_step_map_gets_a_typed_error_and_a_bad_map_too():
    sc, cfg = tiny_config("social-llm", steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    with pytest.raises(StepMapUnavailable, match="no step_map"):
        action_attribution(dataclasses.replace(sc, step_map=None), run.before(2), cfg)
    bad = dataclasses.replace(sc, step_map=lambda m, c: StepMap(fn=lambda lam: lam, n_agents=c.agents))
    with pytest.raises(StepMapError, match="features"):
        action_attribution(bad, run.before(2), cfg)
    with pytest.raises(StepMapError, match="StepMap"):
        action_attribution(dataclasses.replace(sc, step_map=lambda m, c: None), run.before(2), cfg)


def _raises_in_fn(model, cfg):
    def fn(lam):
        raise RuntimeError("fn broke")

    return StepMap(fn=fn, n_agents=cfg.agents)


def _halves_lam(model, cfg):
    inner = _toy_step_map(model, cfg).fn

    def fn(lam):
        lam.mul_(0.5)  # writes into the caller's λ: G(λ/2) reported as G(λ)
        return inner(lam)

    return StepMap(fn=fn, n_agents=cfg.agents)


def _no_state(model, cfg):
    raise KeyError("no such state")


@pytest.mark.parametrize(("step_map", "says"), [
    (_no_state, r"scenario 'toy-propagation': step_map\(model, config\) raised KeyError: 'no such state'"),
    (_raises_in_fn, r"scenario 'toy-propagation': the step map G\(λ\) raised RuntimeError: fn broke"),
])
def test_a_step_map_that_raises_is_a_step_map_error_naming_the_scenario(step_map, says):
    cfg = TOY.load_config()
    run = TOY.simulate(cfg, rng=0, keep_from=0)
    with pytest.raises(StepMapError, match=says) as info:
        action_attribution(dataclasses.replace(TOY, step_map=step_map), run.before(2), cfg)
    assert info.value.__cause__ is not None  # the scenario's own exception, for --debug


def test_a_step_map_that_writes_into_its_intensities_is_refused():
    cfg = TOY.load_config()
    model = TOY.simulate(cfg, rng=0, keep_from=0).before(2)
    lam = np.ones((2, cfg.agents))
    with pytest.raises(StepMapError, match=r"modified its input λ in place"):
        map_features(_halves_lam(model, cfg), lam, n_features=2, name=TOY.name)
    z = map_features(_toy_step_map(model, cfg), lam, n_features=2, name=TOY.name)  # the honest map is accepted
    assert z.shape == (2, cfg.agents, 2)


def test_step_map_gap_is_zero_for_an_exact_map_and_measured_for_a_holding_one():
    for name, exact in (("midscale-social", True), ("social-llm", False)):
        sc, cfg = tiny_config(name, steps=5)
        run = sc.simulate(cfg, rng=2, keep_from=0)
        model = run.before(4)
        sm = build_step_map(sc, model, cfg)
        game = scenario_resimulation_game(sc, model, cfg)
        deleted = [[0], [1, 2], [3, 4, 5]]
        vals = [float(game.checked(np.array([[i not in d for i in range(cfg.agents)]]))[0]) for d in deleted]
        gap = step_map_gap(sm, sc.indicator(cfg), deleted, vals, scale=1.0, n_features=len(sc.features))
        assert gap["coalitions"] == 3
        if exact:
            assert gap["max_rel"] < 1e-12
        else:
            assert np.isfinite(gap["max_rel"]) and gap["mean_rel"] <= gap["max_rel"]


def test_action_attribution_is_a_method_with_the_same_verb_and_result_path():
    from aumann.attribution import AttributionMethod, Panel, attribute
    from aumann.errors import MethodError
    from aumann.evaluation import ActionAumannShapley, ActionProblem

    sc, cfg = tiny_config("midscale-social", steps=4)
    run = sc.simulate(cfg, rng=1, keep_from=0)
    method = ActionAumannShapley(steps=16, tol=1e-8)
    assert isinstance(method, AttributionMethod) and method.name == "action_aumann_shapley"
    res = method.attribute(ActionProblem(sc, run.before(3), cfg, step=3, agent_ids=run.panel.agent_ids))
    same = action_attribution(sc, run.before(3), cfg, steps=16, tol=1e-8, step=3, agent_ids=run.panel.agent_ids)
    np.testing.assert_array_equal(res.phi, same.phi)
    assert res.phi.shape == (1, cfg.agents) and res.method == "action_aumann_shapley" and res.satisfies_efficiency
    assert res.max_efficiency_gap < 1e-6 * abs(res.delta_v[0])
    for key in ("method", "indicator", "baseline", "dtype", "seed", "device"):  # what Problem.result stamps
        assert key in res.provenance, key
    assert list(res.steps) == [3] and res.features == tuple(sc.features)
    np.testing.assert_array_equal(res.agent_ids, run.panel.agent_ids)
    with pytest.raises(MethodError, match="ActionProblem"):  # it explains a step through the simulator
        attribute(sc.indicator(cfg), Panel(run.panel.values[:1], features=list(sc.features)), method=method)
