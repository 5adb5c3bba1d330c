"""The compiled low-rank control walk (:mod:`aumann.attribution.jit_controls`) gives the same bits as the torch
path it replaces (P gathers, products, scatter, pair mean, centring), for unrolled and generic profile counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import jit_controls
from aumann.attribution.controls import DiagonalControl, LowRankControl

pytestmark = pytest.mark.skipif(not jit_controls.available(), reason="numba not installed or AUMANN_NUMBA=0")


@pytest.mark.parametrize("P", [1, 3, 8, 11])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_compiled_units_are_the_torch_paths_bits(P, reverse, dtype, monkeypatch):
    rng = np.random.default_rng(P)
    n, c = 257, 5
    B = torch.from_numpy(rng.normal(size=(n, P)) * 10.0 ** rng.integers(-8, 8, size=(n, P)))
    G = torch.from_numpy(rng.normal(size=(n, P)))
    ctl = LowRankControl(B, G, kind="test")
    perms = np.stack([rng.permutation(n) for _ in range(c)]).astype(dtype)
    got = ctl.units(perms, reverse)
    monkeypatch.setattr(jit_controls, "available", lambda: False)
    want = ctl.units(perms, reverse)  # the torch path: gathers of the centred profiles, scatter, pair mean
    g_minus_mu = DiagonalControl.units(ctl, perms, reverse)  # along(), pair mean, − μ: the same up to rounding
    assert torch.allclose(want, g_minus_mu, rtol=0, atol=1e-12 * float(want.abs().max()))
    assert got.dtype == torch.float64 and got.shape == (c, n)
    assert torch.equal(got, want)


def test_units_reproduce_the_control_definition():
    """Independent of both paths: g_i(k) = Σ_p B[i, p] Γ[k, p] at i's position k, minus the mean over positions."""
    rng = np.random.default_rng(0)
    n, P = 40, 3
    B, G = rng.normal(size=(n, P)), rng.normal(size=(n, P))
    ctl = LowRankControl(torch.from_numpy(B), torch.from_numpy(G), kind="test")
    perm = rng.permutation(n)[None]
    pos = np.argsort(perm[0])
    g = np.einsum("ip,ip->i", B, G[pos])
    grev = np.einsum("ip,ip->i", B, G[n - 1 - pos])
    mu = B @ G.mean(axis=0)
    np.testing.assert_allclose(ctl.units(perm, False).numpy()[0], g - mu, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ctl.units(perm, True).numpy()[0], (g + grev) / 2 - mu, rtol=1e-12, atol=1e-12)
