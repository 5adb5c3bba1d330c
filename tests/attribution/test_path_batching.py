"""The path integral's φ does not depend on how its integration points are batched.

The batch size follows a memory probe (and ``memory_budget``), whose answer differs between machines; a
run's numbers must not. Each step's gradient is summed point by point in k order whatever the batching
(whole steps per call, or chunks of points within a step), so every budget gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import AgentwiseIndicator, AumannShapley, Panel, attribute, indicators
from aumann.attribution.path import quadrature


def _reference(f, x: np.ndarray, method: AumannShapley) -> np.ndarray:
    """φ_t = δ_t ⊙ Σ_k w_k ∇f(τ_k z_t) (zero baseline), one point per autograd call, summed in k order."""
    nodes, weights = quadrature(method.steps, method.rule, method.power)
    out = np.empty(x.shape[:2])
    for t in range(x.shape[0]):
        xt = torch.as_tensor(x[t])
        acc = torch.zeros_like(xt)
        for tau, w in zip(nodes, weights, strict=True):
            z = (float(tau) * xt).detach().requires_grad_(True)
            (g,) = torch.autograd.grad(f(z[None]).sum(), z)
            acc += g * float(w)
        out[t] = (acc * xt).sum(-1).numpy()
    return out


@pytest.mark.parametrize("name", ["var", "gini"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_phi_bits_do_not_depend_on_the_batch(name, dtype):
    rng = np.random.default_rng(7)
    T, N, D, K = 3, 3001, 3, 7
    x = rng.normal(size=(T, N, D)).astype(dtype)
    panel = Panel(x)
    f = indicators.get(name)
    point = N * D * np.dtype(dtype).itemsize
    results = {}
    for budget in (None, 128, 192, 320, 1024, 2560):  # None: the default (whole steps per call here)
        mb = None if budget is None else budget * point
        method = AumannShapley(steps=K, closed_form=False, memory_budget=mb, pooled_fast_path=False)
        results[budget] = np.asarray(attribute(f, panel, method=method).phi)
    first = results[None]
    for budget, phi in results.items():
        assert np.array_equal(phi, first), f"memory_budget={budget} points changed φ"
    if dtype == np.float64:  # and it is the path integral
        np.testing.assert_allclose(first, _reference(f, x, method), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("d", [4, 5, 14])
def test_float32_phi_bits_do_not_depend_on_how_many_steps_share_a_call(d, monkeypatch):
    """float32 row sums over the features: a matrix-vector product (BLAS sgemv) rounded a step's rows differently
    when the step shared its call with others (and sat elsewhere in memory) on AVX-512 hosts; one step per call and
    every step in one call (the memory probe's answer, fixed here) must give the same φ bits."""
    from aumann.attribution.problem import Problem

    rng = np.random.default_rng(3)
    T, N, K = 4, 2001, 5
    x = rng.normal(size=(T, N, d)).astype(np.float32)
    f = AgentwiseIndicator(lambda z: (z * z).sum(-1, keepdim=True), rho=lambda s: torch.sqrt(s[..., 0]), name="l2")
    phi = []
    for points in (K, T * K):
        monkeypatch.setattr(Problem, "batch_items", lambda self, *a, _p=points, **k: _p)
        method = AumannShapley(steps=K, closed_form=False, memory_budget=2**30, pooled_fast_path=False)
        phi.append(np.asarray(attribute(f, Panel(x), method=method).phi))
    assert np.array_equal(phi[0], phi[1])
