"""Acceptance: a user's own Mesa model, recorded with ``simulate`` and attributed end to end."""

from __future__ import annotations

import mesa
import numpy as np
import torch

from aumann.attribution import AumannShapley, attribute, indicators
from aumann.attribution.smoothing import fraction_above, gap_report, max_surrogate
from aumann.simulators import FeatureRecorder, for_agents, fork, simulate


class Trader(mesa.Agent):
    """A user's model written here, not one of aumann's: Boltzmann exchange with births and deaths."""

    def __init__(self, model, wealth=1.0):
        super().__init__(model)
        self.wealth = wealth

    def step(self):
        if self.wealth >= 1:
            self.random.choice(list(self.model.agents)).wealth += 1
            self.wealth -= 1


class Market(mesa.Model):
    def __init__(self, n=10, seed=0):
        super().__init__(rng=seed)
        for _ in range(n):
            Trader(self, wealth=2.0)

    def step(self):
        self.agents.shuffle_do("step")
        if self.steps % 4 == 0:  # the poorest leaves (its wealth is inherited), a newcomer arrives
            poorest = min(self.agents, key=lambda a: (a.wealth, a.unique_id))
            heir = max(self.agents, key=lambda a: (a.wealth, a.unique_id))
            heir.wealth += poorest.wealth
            poorest.remove()
            Trader(self, wealth=0.0)


def test_user_model_recorded_and_attributed_end_to_end():
    panel = simulate(Market(10, seed=4), steps=12, recorder=FeatureRecorder({"wealth": "wealth"}))
    assert panel.shape == (12, 13, 1) and panel.alive is not None and not panel.alive.all()
    res = attribute(indicators.get("var"), panel)

    # independent reference: the built-in var is over the living rows at the living count n_t
    alive = panel.alive
    g = np.where(alive, panel.values[..., 0], 0.0)
    n_t = alive.sum(axis=1, keepdims=True)
    dev = np.where(alive, g - g.sum(axis=1, keepdims=True) / n_t, 0.0)
    np.testing.assert_allclose(res.f_values, (dev**2).sum(axis=1) / n_t[:, 0], rtol=1e-12)
    np.testing.assert_allclose(res.phi, g * dev / n_t, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(res.phi.sum(axis=1), res.delta_v, rtol=1e-10)  # efficiency
    assert np.all(res.phi[~panel.alive] == 0.0)  # absent agents get nothing

    # the same via a plain torch callable that opts in with ``alive`` and the path integral (no closed form)
    def var_fn(z, alive=None):
        w = z[..., 0]
        mask, n = indicators.living(w, alive)
        if mask is None:
            return ((w - w.mean(-1, keepdim=True)) ** 2).mean(-1)
        mean = torch.where(mask, w, 0.0).sum(-1, keepdim=True) / n[..., None]
        return torch.where(mask, (w - mean) ** 2, 0.0).sum(-1) / n

    path = attribute(var_fn, panel, AumannShapley(steps=8, closed_form=False))
    np.testing.assert_allclose(path.phi, res.phi, rtol=1e-9, atol=1e-12)

    # a callable without the keyword is evaluated on all N rows, dead rows held at the baseline, as before
    def var_all_rows(z):
        w = z[..., 0]
        return ((w - w.mean(-1, keepdim=True)) ** 2).mean(-1)

    old = attribute(var_all_rows, panel, AumannShapley(steps=8, closed_form=False))
    dev_all = g - g.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(old.f_values, (dev_all**2).mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(old.phi, g * dev_all / g.shape[1], rtol=1e-9, atol=1e-12)


def test_counterfactual_fork_changes_the_indicator_and_its_attribution():
    model = Market(10, seed=1)
    rec = FeatureRecorder({"wealth": "wealth"})
    simulate(model, steps=3, recorder=rec)
    richest = max(model.agents, key=lambda a: (a.wealth, a.unique_id)).unique_id
    factual = fork(model, steps=4, recorder=rec).panel
    levelled = fork(model, intervention=for_agents([richest], lambda a: setattr(a, "wealth", 2.0)),
                    steps=4, recorder=rec).panel
    f = indicators.get("var")
    phi_f, phi_c = attribute(f, factual), attribute(f, levelled)
    assert not np.allclose(phi_f.f_values, phi_c.f_values)
    np.testing.assert_allclose(phi_c.phi.sum(axis=1), phi_c.delta_v, rtol=1e-10)
    # the fork can report the indicator itself; it matches the engine's f(z_t)
    direct = fork(model, steps=4, recorder=rec, indicator=f)
    np.testing.assert_allclose(direct.f_values, phi_f.f_values, rtol=1e-12)


def test_gap_report_with_rank_agreement_on_a_recorded_run():
    panel = simulate(Market(12, seed=2), steps=6, recorder=FeatureRecorder({"wealth": "wealth"}))
    report = gap_report(max_surrogate(0, temperature=0.05), panel, ranks=True, k=2)
    assert report.max_gap <= 0.05 * np.log(panel.N) + 1e-12
    assert report.kendall_tau is not None and report.kendall_tau.shape == (panel.T,)
    assert np.all((report.top_k_jaccard >= 0) & (report.top_k_jaccard <= 1))
    assert report.top_k_jaccard.mean() > 0.5  # the smooth max credits the same richest agents
    # the step-function original has no gradient: the value gap is reported, the rank fields are
    # None and the note says why
    share = gap_report(fraction_above(2.5, 0, 0.05), panel, ranks=True)
    assert share.abs_gap.shape == (panel.T,) and share.max_gap < 1e-3
    assert share.kendall_tau is None and "original not attributable" in share.rank_note


def test_smooth_surrogate_attributions_sum_to_its_delta_v():
    panel = simulate(Market(8, seed=3), steps=4, recorder=FeatureRecorder({"wealth": "wealth"}))
    s = max_surrogate(0, temperature=0.2)
    res = attribute(s, panel, AumannShapley(steps=32))
    # the surrogate is alive-aware (issue 21): the smooth max over the living rows of each step, by hand
    alive = panel.alive if panel.alive is not None else np.ones(panel.shape[:2], dtype=bool)
    want = [0.2 * np.logaddexp.reduce(panel.values[t, alive[t], 0] / 0.2) for t in range(panel.T)]
    np.testing.assert_allclose(res.f_values, want, rtol=1e-10)
    assert res.max_efficiency_gap < 1e-6 * max(1.0, float(np.abs(res.delta_v).max()))
