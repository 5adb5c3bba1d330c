"""The four Aumann–Shapley axioms as property tests on random indicators (Appendix B)."""

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aumann.attribution import AumannShapley, Panel, attribute, indicators

METHOD = AumannShapley(steps=48, closed_form=False)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def random_deepset(seed: int, d: int):
    """A random permutation-invariant C∞ indicator: tanh head over mean-pooled tanh features."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(d, 6, generator=g, dtype=torch.float64)
    w2 = torch.randn(6, generator=g, dtype=torch.float64)
    c = float(torch.randn(1, generator=g))

    def f(z):
        h = torch.tanh(z @ w1).mean(dim=-2)
        return torch.tanh(h @ w2) + c * (h**2).sum(dim=-1)

    return f


panels = st.builds(
    lambda n, d, t, seed: np.random.default_rng(seed).normal(size=(t, n, d)),
    st.integers(2, 12), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31),
)
fn_seeds = st.integers(0, 2**31)


@SETTINGS
@given(panels, fn_seeds)
def test_efficiency(z, seed):
    res = attribute(random_deepset(seed, z.shape[2]), Panel(z), method=METHOD)
    assert res.max_efficiency_gap <= 1e-9 * max(1.0, np.abs(res.delta_v).max())


@SETTINGS
@given(panels, fn_seeds, st.data())
def test_symmetry(z, seed, data):
    n = z.shape[1]
    i, j = data.draw(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    z = z.copy()
    z[:, j] = z[:, i]
    res = attribute(random_deepset(seed, z.shape[2]), Panel(z), method=METHOD)
    np.testing.assert_allclose(res.phi[:, i], res.phi[:, j], rtol=1e-10, atol=1e-12)


@SETTINGS
@given(panels, fn_seeds)
def test_dummy(z, seed):
    inner = random_deepset(seed, z.shape[2])
    res = attribute(lambda x: inner(x[..., :-1, :]), Panel(z), method=METHOD)  # ignores the last agent
    assert np.all(res.phi[:, -1] == 0)
    assert res.max_efficiency_gap <= 1e-9 * max(1.0, np.abs(res.delta_v).max())


@SETTINGS
@given(panels, fn_seeds, fn_seeds, st.floats(-3, 3), st.floats(-3, 3))
def test_linearity(z, s1, s2, a, b):
    f1, f2 = random_deepset(s1, z.shape[2]), random_deepset(s2, z.shape[2])
    panel = Panel(z)
    combo = attribute(lambda x: a * f1(x) + b * f2(x), panel, method=METHOD)
    parts = a * attribute(f1, panel, method=METHOD).phi + b * attribute(f2, panel, method=METHOD).phi
    np.testing.assert_allclose(combo.phi, parts, rtol=1e-9, atol=1e-12)


@SETTINGS
@given(st.builds(lambda n, seed: np.abs(np.random.default_rng(seed).normal(size=(2, n, 3))),
                 st.integers(2, 30), st.integers(0, 2**31)),
       st.floats(-2, 2), st.floats(-2, 2))
def test_linearity_of_closed_forms(z, a, b):
    panel = Panel(z)
    combo = attribute(a * indicators.get("heat") + b * indicators.get("var"), panel)
    assert combo.provenance["closed_form"] is True
    parts = a * attribute("heat", panel).phi + b * attribute("var", panel).phi
    np.testing.assert_allclose(combo.phi, parts, rtol=1e-12, atol=1e-14)
