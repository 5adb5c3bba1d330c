"""One evaluation context (issue 21): a step's (z, context, alive) travel together as one ``EvalContext``
through every place an indicator is evaluated.

``test_every_evaluation_site_is_enumerated`` finds every call of the evaluation helpers
(``evaluate``, ``evaluate_tensor``, ``Problem.evaluate``) in the package by AST; a new call site that is
not listed in ``SITES`` fails it, and no call may hand the context or the mask separately. Each listed site
is then run with an alive-aware indicator on a population with deaths (dead rows hold junk) and compared
with the same numbers computed over the living rows by hand (numpy, no aumann).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from aumann import scenarios
from aumann.attribution import (
    AumannShapley,
    EvalContext,
    MaskedIndicatorGame,
    NetworkQuadratic,
    Panel,
    Problem,
    Surrogate,
    attribute,
    indicators,
)
from aumann.attribution.indicators import as_indicator, evaluate
from aumann.attribution.smoothing import gap_report
from aumann.evaluation.ablations import vertex_path_attribution
from aumann.evaluation.deletion import DeletionOracle, MaskingOracle
from aumann.simulators import indicator_values
from tests.paths import REPO

JUNK = 1.0e6  # what dead rows hold: any leak of a dead row shows at once


def mean_energy(z, context=None, alive=None):
    """Alive-aware: mean of feature 0 (+ a context offset) over the living rows."""
    g = z[..., 0]
    mask, n = indicators.living(g, alive)
    m = g.mean(-1) if mask is None else torch.where(mask, g, 0.0).sum(-1) / n
    return m + (0.0 if context is None or "offset" not in context else context["offset"])


def spread(z, alive=None):
    """Alive-aware and not pooled: mean squared feature-0 difference over living pairs (N × N)."""
    g = z[..., 0]
    mask, n = indicators.living(g, alive)
    d = (g[..., :, None] - g[..., None, :]) ** 2
    if mask is not None:
        d = torch.where(mask[..., :, None] & mask[..., None, :], d, 0.0)
    return d.sum((-1, -2)) / (n * n if mask is not None else g.shape[-1] ** 2)


def by_hand(name, z, alive, offset=0.0):
    """The indicator on the living rows of one step, from the definitions (numpy only)."""
    g = z[alive][:, 0]
    if name == "mean_energy":
        return float(g.mean()) + offset
    if name == "spread":
        return float(((g[:, None] - g[None, :]) ** 2).mean())
    if name == "var":
        return float(np.var(z[alive].sum(axis=1)))
    raise AssertionError(name)


def dying_panel(rng, T=3, N=7, D=2, context=True):
    z = np.abs(rng.normal(size=(T, N, D))) + 0.5
    alive = np.ones((T, N), dtype=bool)
    alive[0, 5:] = False  # two newborns at step 1
    alive[1, 1] = False  # agent 1 leaves at step 1 and comes back at step 2
    alive[2, 3] = False  # agent 3 dies at step 2
    z[~alive] = JUNK
    ctx = {"offset": np.array([0.0, 0.5, -0.25])[:T]} if context else None
    return Panel(z, alive=alive, context=ctx), z, alive


# ------------------------------------------------------------------ the sites
def check_engine(rng):
    panel, z, alive = dying_panel(rng)
    for f in (mean_energy, "var"):
        name = f if isinstance(f, str) else f.__name__
        res = attribute(f, panel, method=AumannShapley(steps=8, closed_form=False))
        off = panel.context["offset"]
        for t in range(panel.T):
            assert res.f_values[t] == pytest.approx(by_hand(name, z[t], alive[t], off[t] if f is mean_energy else 0))
        assert np.all(res.phi[~alive] == 0)
        assert res.max_efficiency_gap < 1e-10


def check_path_points(rng):
    """φ of a linear indicator through the autograd path integral: z_i / n_t over the living, by hand."""
    panel, z, alive = dying_panel(rng, context=False)
    res = attribute(mean_energy, panel, method=AumannShapley(steps=4, closed_form=False, pooled_fast_path=False))
    for t in range(panel.T):
        want = np.where(alive[t], z[t, :, 0] / alive[t].sum(), 0.0)
        np.testing.assert_allclose(res.phi[t], want, rtol=1e-12)


def check_values_at(rng):
    panel, z, alive = dying_panel(rng, context=False)
    problem = Problem.build(as_indicator(spread), panel, "mean")
    got = problem.values_at("x", chunk=2)
    np.testing.assert_allclose(got, [by_hand("spread", z[t], alive[t]) for t in range(panel.T)], rtol=1e-12)


def check_item_bytes(rng):
    panel, _, alive = dying_panel(rng, context=False)
    seen = []

    def spy(z, alive=None):
        seen.append(None if alive is None else alive.detach().cpu().numpy().copy())
        return spread(z, alive)

    problem = Problem.build(as_indicator(spy), panel)
    problem.item_bytes(grad=True)
    assert seen and all(a is not None and np.array_equal(a, np.broadcast_to(alive[0], a.shape)) for a in seen)


def check_batch_probe(rng):
    """The batch-independence probe hands f the living mask of its step (and the context): an alive-aware f over a
    population with deaths passes it, each element valued over the living rows by hand."""
    from aumann.attribution.batchcheck import check_batch_independent

    panel, _, alive = dying_panel(rng)
    seen = []

    def spy(z, context=None, alive=None):
        seen.append((z.detach().cpu().numpy().copy(), alive.detach().cpu().numpy().copy(), context["offset"]))
        return mean_energy(z, context, alive)

    check_batch_independent(Problem.build(as_indicator(spy), panel, "mean"))
    t = panel.T - 1
    assert len(seen) == 3
    for zz, mask, off in seen:
        assert np.array_equal(mask, np.broadcast_to(alive[t], mask.shape))
        np.testing.assert_allclose(off.cpu().numpy(), panel.context["offset"][t])
        assert not np.any(zz[:, ~alive[t]] == JUNK)  # dead rows hold the baseline, never the junk they recorded


def check_masked_game(rng):
    panel, z, alive = dying_panel(rng, context=False)
    base = np.full((panel.N, panel.D), 0.25)
    problem = Problem.build(as_indicator(spread), panel, base)
    for t in range(panel.T):
        game = MaskedIndicatorGame(problem, t)
        masks = rng.random((6, panel.N)) < 0.5
        got = game.checked(masks)
        for m, v in zip(masks, got):
            zz = np.where(m[:, None], z[t], base)
            assert v == pytest.approx(by_hand("spread", zz, alive[t]), rel=1e-12)


def check_pooled_precision(rng):
    """The pooled fast path's corner check evaluates f at z⁰ and z over the living: with dead rows holding junk,
    a leak would make f there disagree with the running sums, and the game would fall back (warned)."""
    import warnings

    from aumann.attribution.pooled import AdditiveKernel

    panel, z, alive = dying_panel(rng, context=False)
    base = np.full((panel.N, panel.D), 0.25)
    problem = Problem.build(as_indicator("var"), panel, base)
    for t in range(panel.T):
        game = MaskedIndicatorGame(problem, t)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            kernel = game.kernel()
        assert isinstance(kernel, AdditiveKernel)
        assert game._check_pooled_form(kernel) is None
        ends = np.asarray(kernel.ends(), dtype=np.float64)
        assert ends[0] == pytest.approx(by_hand("var", base, alive[t]), rel=1e-12, abs=1e-15)
        assert ends[1] == pytest.approx(by_hand("var", z[t], alive[t]), rel=1e-12)


def check_evaluate(rng):
    panel, z, alive = dying_panel(rng)
    got = evaluate(mean_energy, EvalContext.of_panel(panel))
    off = panel.context["offset"]
    np.testing.assert_allclose(got, [by_hand("mean_energy", z[t], alive[t], off[t]) for t in range(panel.T)])


def check_evaluate_in_slices(rng, monkeypatch):
    """A batch larger than the budget is evaluated in slices: context and mask are sliced with it."""
    from aumann.attribution import memory

    monkeypatch.setattr(memory, "limits", lambda device=None, requested=None, target=0: (2**16, 2**40))
    z = np.abs(rng.normal(size=(40, 60, 2))) + 0.5
    alive = rng.random((40, 60)) < 0.7
    alive[:, 0] = True
    z[~alive] = JUNK
    off = rng.normal(size=40)
    got = evaluate(spread, EvalContext(z, {"offset": off}, alive, batched=True))
    np.testing.assert_allclose(got, [by_hand("spread", z[t], alive[t]) for t in range(40)], rtol=1e-12)
    got = evaluate(mean_energy, EvalContext(z, {"offset": off}, alive, batched=True))
    np.testing.assert_allclose(got, [by_hand("mean_energy", z[t], alive[t], off[t]) for t in range(40)], rtol=1e-12)


def check_indicator_values(rng):
    panel, z, alive = dying_panel(rng)
    off = panel.context["offset"]
    np.testing.assert_allclose(indicator_values(mean_energy, panel),
                               [by_hand("mean_energy", z[t], alive[t], off[t]) for t in range(panel.T)])


def check_gap_report(rng):
    panel, z, alive = dying_panel(rng, context=False)
    rep = gap_report(Surrogate(spread, lambda z, alive=None: 1.5 * spread(z, alive), "spread"), panel)
    want = np.array([by_hand("spread", z[t], alive[t]) for t in range(panel.T)])
    np.testing.assert_allclose(rep.f_original, want, rtol=1e-12)
    np.testing.assert_allclose(rep.f_smooth, 1.5 * want, rtol=1e-12)


def check_vertex_path(rng):
    panel, z, alive = dying_panel(rng, context=False)
    t = 1
    base = np.full((panel.N, panel.D), 0.3)
    order = rng.permutation(panel.N)
    phi = vertex_path_attribution(spread, EvalContext.at_step(panel, t), base, order)
    cur = base.copy()
    prev = by_hand("spread", cur, alive[t])
    want = np.zeros(panel.N)
    for i in order:  # agents join one by one; dead rows stay at the baseline (dummies)
        if alive[t, i]:
            cur[i] = z[t, i]
        val = by_hand("spread", cur, alive[t])
        want[i], prev = val - prev, val
    np.testing.assert_allclose(phi, want, atol=1e-12)
    assert np.all(phi[~alive[t]] == 0)


def _dying_fork(monkeypatch, z, alive):
    sc = dataclasses.replace(scenarios.get("midscale-social"), resimulate_fn=None,
                             indicator=lambda cfg: mean_energy, original=lambda cfg: spread)
    monkeypatch.setattr(type(sc), "_fork_one", lambda self, model, config, targets: SimpleNamespace(
        panel=Panel(z[None], alive=alive[None])))
    return sc


def check_fork_oracle(rng, monkeypatch):
    _, z, alive = dying_panel(rng, context=False)
    sc = _dying_fork(monkeypatch, z[2], alive[2])
    oracle = DeletionOracle(scenario=sc, config=None, model_before=None, f=mean_energy, f_original=spread)
    f_k, f_orig = oracle.values([0])
    assert f_k == pytest.approx(by_hand("mean_energy", z[2], alive[2]))
    assert f_orig == pytest.approx(by_hand("spread", z[2], alive[2]))


def check_pooled_forks(rng, monkeypatch):
    """Forks given as changed rows (resimulate_rows_fn) of indicators with a pooled form: the rows carry no
    living mask, so an alive-aware indicator is left to the full fork, evaluated over the living; an indicator
    that is not alive-aware gets the pooled sums, over every row (a fixed population), as by hand."""
    from aumann.attribution.indicators import PooledForm, as_indicator
    from aumann.evaluation.deletion import PooledForks

    _, z, alive = dying_panel(rng, context=False)
    base = np.abs(rng.normal(size=z[2].shape)) + 0.5
    sc = dataclasses.replace(_dying_fork(monkeypatch, z[2], alive[2]),
                             resimulate_rows_fn=lambda m, c, p: (base, np.array([0, 3]), base[[0, 3]] + 1.0))
    form = PooledForm(psi=lambda x: x[..., :1], rho=lambda m: m[..., 0])
    aware = as_indicator(mean_energy)
    aware.pooled = form
    assert PooledForks.of(sc, aware, aware) is None
    oracle = DeletionOracle(scenario=sc, config=None, model_before=None, f=aware, f_original=spread)
    assert oracle.values([0])[0] == pytest.approx(by_hand("mean_energy", z[2], alive[2]))  # the full fork

    plain = as_indicator(lambda x: x[..., 0].mean(-1))
    plain.pooled = form
    changed = base.copy()
    changed[[0, 3]] += 1.0
    # the rows hook describes the re-simulated step (the oracle checks that once against the full fork)
    # a user's pooled form is checked against f between the step and the scenario's baseline features (the number
    # of agents read from the config)
    sc = dataclasses.replace(_dying_fork(monkeypatch, changed, np.ones(len(changed), bool)),
                             resimulate_rows_fn=sc.resimulate_rows_fn,
                             baseline_features_fn=lambda m, c: np.full_like(changed, 0.25),
                             features=tuple(f"f{d}" for d in range(changed.shape[1])))
    oracle = DeletionOracle(scenario=sc, config=SimpleNamespace(agents=len(changed)), model_before=None, f=plain,
                            f_original=plain)
    assert oracle.values([0])[0] == pytest.approx(float(changed[:, 0].mean()), rel=1e-12)
    assert isinstance(oracle._pooled, PooledForks) and oracle.pooled_fallback is None


def check_evaluate_pair(rng):
    """Two network indicators on one graph evaluated together (one pass over it): each over the living (a
    dead row's r is 0, so its edges are gone), as by hand; an alive-aware pair without a shared part: each
    alone, over the living too."""
    from aumann.attribution.indicators import evaluate_pair

    n = 40
    upper = np.triu(rng.random((n, n)) < 0.2, 1) * rng.uniform(0.5, 2.0, (n, n))
    A = upper + upper.T
    z = np.abs(rng.normal(size=(n, 3))) + 0.5
    alive = rng.random(n) < 0.7
    alive[0] = True
    z[~alive] = JUNK
    f = NetworkQuadratic(sp.csr_matrix(A), lambda x: x[..., 0] * x[..., 1], scale=0.01)
    g = NetworkQuadratic(f.A, lambda x: x[..., 2], scale=0.02)

    def hand(r, c):
        r = np.where(alive, r, 0.0)
        return float(np.log1p(c * r @ A @ r))

    got = evaluate_pair(f, g, EvalContext(z, None, alive))
    assert got[0] == pytest.approx(hand(z[:, 0] * z[:, 1], 0.01), rel=1e-12)
    assert got[1] == pytest.approx(hand(z[:, 2], 0.02), rel=1e-12)
    got = evaluate_pair(mean_energy, spread, EvalContext(z, None, alive))
    assert got[0] == pytest.approx(by_hand("mean_energy", z, alive))
    assert got[1] == pytest.approx(by_hand("spread", z, alive))


def check_action_corners(rng, monkeypatch):
    from aumann.evaluation import action_attribution
    from tests.tiny import tiny_config

    sc0, cfg = tiny_config("midscale-social", steps=3)
    run = sc0.simulate(cfg, rng=1, keep_from=0)
    n, d = cfg.agents, len(sc0.features)
    z = np.abs(rng.normal(size=(n, d))) + 0.5
    alive = np.ones(n, dtype=bool)
    alive[[1, 4]] = False
    z[~alive] = JUNK
    sc = _dying_fork(monkeypatch, z, alive)
    res = action_attribution(sc, run.before(2), cfg, steps=4, tol=None)
    assert res.provenance["v_fork_full"] == pytest.approx(by_hand("mean_energy", z, alive))
    assert res.provenance["v_fork_empty"] == pytest.approx(by_hand("mean_energy", z, alive))


def check_step_map(rng):
    """A step map describes a fixed population (no dead rows); its context travels with its features."""
    from aumann.evaluation.action import map_value_fn
    from aumann.scenarios.base import StepMap

    n = 5
    w = torch.as_tensor(rng.normal(size=(n, 1)))
    sm = StepMap(fn=lambda lam: lam[..., None] * w, n_agents=n, context={"offset": np.array(0.75)})
    v = map_value_fn(sm, mean_energy, n_features=1)
    lam = rng.random((3, n))
    got = v(torch.as_tensor(lam)).detach().numpy()
    want = [float((lam_b * w.numpy()[:, 0]).mean()) + 0.75 for lam_b in lam]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def check_panel_deletion(rng):
    """The masking deletion study of an event log (``aumann attribute --trace``) over the step's living rows."""
    from aumann.evaluation.panel_deletion import masking_deletion

    panel, z, alive = dying_panel(rng, context=False)
    att = attribute("var", panel)
    out = masking_deletion("var", panel, att, k_del=3, orderings=2)
    ts = out["t_star"]
    assert out["f"] == pytest.approx(by_hand("var", z[ts], alive[ts]))
    ids = list(panel.agent_ids)
    zz = z[ts].copy()
    for k, agent in enumerate(out["aumann_shapley"]["deleted"], start=1):
        zz[ids.index(agent)] = 0.0
        assert alive[ts, ids.index(agent)]
        assert out["aumann_shapley"]["f_k"][k - 1] == pytest.approx(by_hand("var", zz, alive[ts]))


def check_cv_feature_gradients(rng):
    """The control variate's feature-path table (issue 25): ∇_{z_i} f(z⁰ + τ(z − z⁰))·(z_i − z⁰_i) over the
    living, against central differences of the by-hand indicator; a dead row's entry is 0 whatever it holds."""
    from aumann.attribution.controls import _masked_feature_gradients

    panel, z, alive = dying_panel(rng, context=False)
    base = np.full((panel.N, panel.D), 0.25)
    problem = Problem.build(as_indicator(spread), panel, base)
    taus = np.array([0.2, 0.55, 0.9])
    eps = 1e-6
    for t in range(panel.T):
        H = _masked_feature_gradients(MaskedIndicatorGame(problem, t), taus, 2**24)
        zt = np.where(alive[t][:, None], z[t], base)  # dead rows: the game holds them at the baseline
        for k, tau in enumerate(taus):
            point = base + tau * (zt - base)
            for i in range(panel.N):
                d = np.zeros_like(point)
                d[i] = zt[i] - base[i]
                fd = (by_hand("spread", point + eps * d, alive[t]) - by_hand("spread", point - eps * d, alive[t]))
                assert H[k, i] == pytest.approx(fd / (2 * eps), abs=1e-6)
            assert np.all(H[k, ~alive[t]] == 0.0)


SITES = {
    "aumann/attribution/batchcheck.py::_values": check_batch_probe,
    "aumann/attribution/controls.py::_masked_feature_gradients": check_cv_feature_gradients,
    "aumann/attribution/games.py::MaskedIndicatorGame.__call__": check_masked_game,
    "aumann/attribution/games.py::MaskedIndicatorGame._check_pooled_form": check_pooled_precision,
    "aumann/attribution/indicators.py::_batch_rows.run": check_evaluate_in_slices,
    "aumann/attribution/indicators.py::evaluate": check_evaluate,
    "aumann/attribution/indicators.py::evaluate_pair": check_evaluate_pair,
    "aumann/attribution/path.py::AumannShapley._integrate.on_device": check_engine,
    "aumann/attribution/path.py::AumannShapley._integrate.grad_of": check_path_points,
    "aumann/attribution/problem.py::Problem.evaluate": check_engine,
    "aumann/attribution/problem.py::Problem.item_bytes.run": check_item_bytes,
    "aumann/attribution/problem.py::Problem.values_at": check_values_at,
    "aumann/attribution/smoothing.py::gap_report": check_gap_report,
    "aumann/evaluation/ablations.py::vertex_path_attribution": check_vertex_path,
    "aumann/evaluation/action.py::map_value_fn.v": check_step_map,
    "aumann/evaluation/action.py::ActionAumannShapley.attribute": check_action_corners,
    "aumann/evaluation/deletion.py::DeletionOracle._compute": check_fork_oracle,
    "aumann/evaluation/deletion.py::PooledForks._sums": check_pooled_forks,
    "aumann/evaluation/panel_deletion.py::masking_deletion": check_panel_deletion,
    "aumann/simulators/runner.py::indicator_values": check_indicator_values,
}
HELPERS = {"evaluate", "evaluate_tensor", "evaluate_pair"}


class _Calls(ast.NodeVisitor):
    """Calls of the evaluation helpers in one module, each with its enclosing function's qualified name."""

    def __init__(self, rel: str) -> None:
        self.rel, self.stack, self.out = rel, [], []

    def visit_FunctionDef(self, node):
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_Call(self, node):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in HELPERS:
            self.out.append((f"{self.rel}::{'.'.join(self.stack)}", node))
        self.generic_visit(node)


@functools.cache
def evaluation_calls() -> tuple:
    """(site, call node) for every call of an evaluation helper in the package (``Problem.evaluate`` is
    ``x.evaluate(...)``, the module function ``evaluate(...)``). Parsed once per session: the two tests
    that read it see the same source, which does not change while the suite runs."""
    out = []
    for path in sorted((REPO / "aumann").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        visitor = _Calls(rel)
        visitor.visit(ast.parse(path.read_text(), filename=rel))
        out += visitor.out
    return tuple(out)


def test_every_evaluation_site_is_enumerated():
    found = {site for site, _ in evaluation_calls()}
    assert found == set(SITES), (f"new evaluation sites (add them to SITES with a check over the living): "
                                 f"{sorted(found - set(SITES))}; gone: {sorted(set(SITES) - found)}")


def test_no_site_passes_the_context_or_the_mask_separately():
    for site, node in evaluation_calls():
        kws = {k.arg for k in node.keywords}
        assert not kws & {"context", "alive", "context_batched"}, f"{site} passes {kws} beside the values"
        pair = getattr(node.func, "id", getattr(node.func, "attr", None)) == "evaluate_pair"
        assert len(node.args) == (3 if pair else 2), \
            f"{site}: evaluate(f, EvalContext) / evaluate_pair(f, g, EvalContext) / Problem.evaluate(z, t_idx)"


@pytest.mark.parametrize("site", sorted(SITES))
def test_each_site_evaluates_over_the_living(site, rng, monkeypatch):
    check = SITES[site]
    if "monkeypatch" in check.__code__.co_varnames[: check.__code__.co_argcount]:
        check(rng, monkeypatch)
    else:
        check(rng)


# ------------------------------------------------------------------ kernels and the masking oracle
def _network(n, rng):
    A = sp.random(n, n, density=0.5, random_state=int(rng.integers(1000)))
    A = sp.csr_matrix(((A + A.T) / 2).toarray() * (1 - np.eye(n)))
    return NetworkQuadratic(A, lambda z: z[..., 0] * z[..., 1], degree=2)


@pytest.mark.parametrize("which", ["var", "spread", "network"])
def test_masking_oracle_curves_are_over_the_living(which, rng):
    """The study's masking oracle (the masking game's kernel curve: running sums over the living at n_t,
    a sparse pass, or batched evaluation) against the curve by hand on the living rows."""
    panel, z, alive = dying_panel(rng, context=False)
    t = 1
    base = np.full((panel.N, panel.D), 0.4)
    if which == "network":
        f = _network(panel.N, rng)
        A = f.A.toarray()

        def hand(zz, live):
            r = np.where(live, zz[:, 0] * zz[:, 1], 0.0)
            return float(np.log1p(r @ A @ r))
    else:
        f = indicators.get("var") if which == "var" else spread

        def hand(zz, live):
            return by_hand(which, zz, live)
    oracle = MaskingOracle(f, f, EvalContext.at_step(panel, t), base)
    order = np.concatenate([np.flatnonzero(alive[t]), np.flatnonzero(~alive[t])])
    curve = oracle.curve(order, 5)
    for k in range(1, 6):
        zz = z[t].copy()
        zz[order[:k]] = base[order[:k]]
        assert curve[k - 1, 0] == pytest.approx(hand(zz, alive[t]), rel=1e-12, abs=1e-14)
        assert curve[k - 1, 1] == curve[k - 1, 0]


def test_masking_oracle_before_the_fix_would_have_divided_by_all_rows(rng):
    """The regression of the issue: var over the living (n_t) vs the old running sums over all N rows."""
    panel, z, alive = dying_panel(rng, context=False)
    t = 0  # two dead rows holding junk
    base = np.zeros((panel.N, panel.D))
    oracle = MaskingOracle("var", "var", EvalContext.at_step(panel, t), base)
    live = np.flatnonzero(alive[t])
    got = oracle.curve(live, 3)[:, 0]
    for k in range(1, 4):
        zz = z[t].copy()
        zz[live[:k]] = 0
        assert got[k - 1] == pytest.approx(by_hand("var", zz, alive[t]))
    # and the living are what matters: changing the dead rows changes nothing
    z2 = z.copy()
    z2[~alive] = -7.0
    oracle2 = MaskingOracle("var", "var", EvalContext(z2[t], None, alive[t]), base)
    np.testing.assert_array_equal(oracle2.curve(live, 3), oracle.curve(live, 3))


def test_masking_oracle_takes_the_mask_beside_plain_arrays(rng):
    panel, z, alive = dying_panel(rng, context=False)
    base = np.zeros((panel.N, panel.D))
    a = MaskingOracle("var", spread, z[0], base, alive=alive[0]).curve(np.arange(panel.N), 4)
    b = MaskingOracle("var", spread, EvalContext(z[0], None, alive[0]), base).curve(np.arange(panel.N), 4)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="EvalContext"):
        MaskingOracle("var", "var", EvalContext(z[0], None, alive[0]), base, alive=alive[0])


def test_evaluate_refuses_a_context_beside_an_eval_context(rng):
    from aumann.errors import IndicatorError

    panel, _, _ = dying_panel(rng)
    with pytest.raises(IndicatorError, match="pass it alone"):
        evaluate(mean_energy, EvalContext.of_panel(panel), alive=panel.alive)


@pytest.mark.parametrize("mask", [np.array(["True", "False", "True", "True"]), np.full(4, 0.5), np.full(4, np.nan),
                                  np.array([1, 2, 1, 1])], ids=["strings", "halves", "nan", "int_two"])
def test_a_mask_the_panel_would_refuse_is_refused_by_the_evaluation_context_too(mask):
    # EvalContext (and evaluate(alive=...)) cast any mask with astype(bool): "False", 0.5 and NaN were all alive,
    # so the living mean of an alive-aware indicator silently took the agents the caller had marked dead
    from aumann.errors import IndicatorError

    z = np.arange(8.0).reshape(4, 2)
    with pytest.raises(IndicatorError, match=r"alive mask must be bool \(or integers 0/1\)"):
        evaluate(mean_energy, z, alive=mask)
    with pytest.raises(IndicatorError, match="alive mask must be bool"):
        EvalContext(z, alive=mask)
    ok = np.array([1, 0, 1, 1])
    assert EvalContext(z, alive=ok).alive.tolist() == [True, False, True, True]


def test_a_context_that_is_not_a_mapping_is_an_indicator_error():
    from aumann.errors import IndicatorError

    with pytest.raises(IndicatorError, match="context must be a mapping"):  # was AttributeError: 'list' ... 'items'
        evaluate(lambda z, c: z.sum((-1, -2)), np.ones((3, 4, 2)), [1.0, 2.0])


def test_network_indicator_over_the_living_is_the_induced_subgraph(rng):
    n = 8
    f = _network(n, rng)
    z = np.abs(rng.normal(size=(n, 2)))
    alive = np.ones(n, dtype=bool)
    alive[[2, 5]] = False
    live = np.flatnonzero(alive)
    sub = f.subset(live)
    want = sub.value(z[live])
    assert float(evaluate(f, EvalContext(z, None, alive))) == pytest.approx(want, rel=1e-12)
    assert f.value(EvalContext(z, None, alive)) == pytest.approx(want, rel=1e-12)
    z2 = z.copy()
    z2[~alive] = JUNK
    assert float(evaluate(f, EvalContext(z2, None, alive))) == pytest.approx(want, rel=1e-12)
