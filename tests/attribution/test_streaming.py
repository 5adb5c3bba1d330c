"""Linear closed forms (lin, heat, combinations) streamed over z: against independent references."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from aumann.attribution import AumannShapley, Panel, attribute, indicators
from aumann.attribution.streaming import column_sums, weighted_rows
from aumann.errors import IndicatorError

# N·D above the streaming threshold, N not a multiple of the 128·1024-agent blocks (tails exercised)
BIG = 200_003


def _panel(rng: np.random.Generator, T: int, N: int, D: int, dtype=np.float64) -> np.ndarray:
    return np.abs(rng.normal(size=(T, N, D))).astype(dtype)


def _reference_heat(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The paper's formula evaluated the way the previous engine did (torch column sums, per-feature
    products of the other means, log(1 + H)/(D·H)), but with exactly rounded column sums (math.fsum)
    and the weighted row sums written out feature by feature."""
    T, n, D = z.shape
    m = np.array([[math.fsum(z[t, :, d]) for d in range(D)] for t in range(T)]) / n
    h = m.prod(axis=1)
    others = np.stack([np.prod(np.delete(m, d, axis=1), axis=1) for d in range(D)], axis=1)
    scale = np.where(np.abs(h) < 1e-8, (1.0 - h / 2.0) / D, np.log1p(h) / (D * np.where(h == 0, 1.0, h)))
    coef = others / n * scale[:, None]
    phi = sum(z[:, :, d] * coef[:, d, None] for d in range(D))
    return phi, np.log1p(h)


def _reference_lin(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = z.shape[1]
    g = z.sum(axis=2)
    return g / n, np.array([math.fsum(row) for row in g]) / n


@pytest.mark.parametrize("N", [50, BIG])
@pytest.mark.parametrize("D", [1, 3, 4])
def test_heat_closed_form_matches_an_independent_reference(N, D, rng):
    z = _panel(rng, 3, N, D)
    res = attribute(indicators.get("heat"), Panel(z))
    phi, f = _reference_heat(z)
    np.testing.assert_allclose(res.phi, phi, rtol=1e-12, atol=0)
    np.testing.assert_allclose(res.f_values, f, rtol=1e-12)
    np.testing.assert_allclose(res.f_values, indicators.get("heat")(torch.as_tensor(z)).numpy(), rtol=1e-12)
    assert np.all(res.f_baseline == 0)
    np.testing.assert_allclose(res.by_step(), [math.fsum(row) for row in res.phi], rtol=1e-12)
    assert (res.efficiency_gap / np.abs(res.delta_v)).max() <= 1e-12


@pytest.mark.parametrize("N", [50, BIG])
def test_lin_and_combinations_match_references(N, rng):
    z = _panel(rng, 2, N, 3)
    lin = attribute(indicators.get("lin"), Panel(z))
    phi_lin, f_lin = _reference_lin(z)
    np.testing.assert_allclose(lin.phi, phi_lin, rtol=1e-12)
    np.testing.assert_allclose(lin.f_values, f_lin, rtol=1e-12)
    combo = 2 * indicators.get("heat") - indicators.get("lin")
    assert combo.has_linear_closed_form
    res = attribute(combo, Panel(z))
    phi_heat, f_heat = _reference_heat(z)
    np.testing.assert_allclose(res.phi, 2 * phi_heat - phi_lin, rtol=1e-11, atol=1e-18)
    np.testing.assert_allclose(res.f_values, 2 * f_heat - f_lin, rtol=1e-12)


def test_closed_form_matches_autograd_on_the_streaming_path(rng):
    """Gauss–Legendre K = 48 through autograd on every agent, at a size that takes the streaming kernels."""
    z = _panel(rng, 1, 60_001, 3)
    closed = attribute(indicators.get("heat"), Panel(z))
    path = attribute(indicators.get("heat"), Panel(z), method=AumannShapley(steps=48, closed_form=False,
                                                                              pooled_fast_path=False))
    np.testing.assert_allclose(closed.phi, path.phi, rtol=1e-10)


def test_per_feature_and_float32(rng):
    z = _panel(rng, 2, BIG, 3)
    res = attribute(indicators.get("heat"), Panel(z), per_feature=True)
    np.testing.assert_allclose(res.phi_features.sum(axis=2), res.phi, rtol=1e-12)
    phi, _ = _reference_heat(z)
    np.testing.assert_allclose(res.phi, phi, rtol=1e-12)
    r32 = attribute(indicators.get("heat"), Panel(z.astype(np.float32)))
    assert r32.phi.dtype == np.float32
    np.testing.assert_allclose(r32.phi, phi, rtol=2e-5)


@pytest.mark.parametrize("shape", [(1, 7, 3), (2, 40_000, 3), (3, 131_072 + 129, 3), (2, 50_001, 5)])
def test_column_sums_are_accurate_on_every_layout(shape, rng):
    z = rng.normal(size=shape) * 10 + 3
    exact = np.array([[math.fsum(z[t, :, d]) for d in range(shape[2])] for t in range(shape[0])])
    np.testing.assert_allclose(column_sums(z), exact, rtol=1e-13)
    strided = np.asfortranarray(z)  # not C-contiguous: the torch fallback
    np.testing.assert_allclose(column_sums(strided), exact, rtol=1e-13)
    np.testing.assert_allclose(column_sums(z.astype(np.float32)), exact, rtol=1e-5)


def test_weighted_rows_and_their_sums(rng):
    z = rng.normal(size=(2, BIG, 3))
    c = rng.normal(size=(2, 3))
    phi, sums = weighted_rows(z, c)
    np.testing.assert_allclose(phi, np.einsum("tnd,td->tn", z, c), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(sums, [math.fsum(r) for r in phi], rtol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("T", [1, 2])
def test_non_finite_closed_forms_raise(T):
    z = -np.ones((T, 10, 1)) * 3.0  # heat: log(1 + Π m) with Π m = −3 is NaN
    with pytest.raises(IndicatorError, match="not finite"):
        attribute(indicators.get("heat"), Panel(z))
    huge = np.full((1, 4, 1), 1e308)  # lin: f = mean is finite, Σ_i φ overflows
    with pytest.raises(IndicatorError):
        attribute(indicators.get("lin"), Panel(huge))


def test_cached_step_sums_do_not_survive_replace(rng):
    res = attribute(indicators.get("heat"), Panel(_panel(rng, 2, 30, 3)))
    other = dataclasses.replace(res, phi=res.phi * 2)
    np.testing.assert_allclose(other.by_step(), 2 * res.by_step(), rtol=1e-14)
    assert other.max_efficiency_gap > 0.5 * float(np.abs(res.delta_v).min())


def test_views_with_negative_or_fortran_strides(rng):
    z = _panel(rng, 2, BIG, 3)
    ref = attribute(indicators.get("heat"), Panel(np.ascontiguousarray(z[:, ::-1])))
    for view in (z[:, ::-1], np.asfortranarray(z[:, ::-1])):
        res = attribute(indicators.get("heat"), Panel(view))
        np.testing.assert_allclose(res.phi, ref.phi, rtol=1e-12)
    small = attribute(lambda x: x.mean(-2).prod(-1), Panel(z[:, :500:-1][:, :300]),
                      method=AumannShapley(steps=8))
    assert small.max_efficiency_gap < 1e-10


def test_parts_do_not_depend_on_the_thread_count(rng):
    z = _panel(rng, 2, 600_001, 3)  # cut into parts that may run on two threads
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = attribute(indicators.get("heat"), Panel(z))
        torch.set_num_threads(2)
        two = attribute(indicators.get("heat"), Panel(z))
    finally:
        torch.set_num_threads(old)
    np.testing.assert_array_equal(one.phi, two.phi)
    np.testing.assert_array_equal(one.by_step(), two.by_step())
    phi, _ = _reference_heat(z)
    np.testing.assert_allclose(two.phi, phi, rtol=1e-12)
    exact = np.array([[math.fsum(z[t, :, d]) for d in range(3)] for t in range(2)])
    np.testing.assert_allclose(column_sums(z), exact, rtol=1e-13)


@pytest.mark.parametrize("D", [1, 3, 9])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_kernels_agree_with_the_numpy_path(D, dtype, rng, monkeypatch):
    """The numba kernels (default) and the numpy/BLAS path (AUMANN_NUMBA=0) give the same closed form to
    rounding, on one big step (cut into parts), many small steps (grouped into tasks) and a tail of agents."""
    from aumann.attribution import jit

    if jit.kernels() is None:
        pytest.skip("numba is not installed")
    for T, N in [(1, 600_011), (40, 3_001)]:
        z = _panel(rng, T, N, D, dtype)
        compiled = attribute(indicators.get("heat"), Panel(z))
        monkeypatch.setenv("AUMANN_NUMBA", "0")
        plain = attribute(indicators.get("heat"), Panel(z))
        monkeypatch.delenv("AUMANN_NUMBA")
        tol = 1e-12 if dtype == np.float64 else 2e-6
        np.testing.assert_allclose(compiled.phi, plain.phi, rtol=tol)
        np.testing.assert_allclose(compiled.by_step(), [math.fsum(r) for r in compiled.phi.astype(np.float64)],
                                   rtol=1e-12)
        np.testing.assert_allclose(column_sums(z), [[math.fsum(z[t, :, d]) for d in range(D)] for t in range(T)],
                                   rtol=1e-13 if dtype == np.float64 else 1e-12)


def test_recycled_outputs_are_never_shared(rng):
    """A big closed-form output lives in recycled memory: reused only once no array refers to it."""
    from aumann.attribution.streaming import fresh

    a = fresh((2, 300_000), np.float64)
    a[:] = 1.0
    view = a[1]
    del a
    b = fresh((2, 300_000), np.float64)  # the first buffer is still referenced through `view`
    b[:] = 2.0
    assert np.all(view == 1.0)
    addr = view.ctypes.data
    del view
    c = fresh((2, 300_000), np.float64)
    assert c.ctypes.data + c.nbytes // 2 == addr  # now it is reused
    res = attribute(indicators.get("heat"), Panel(_panel(rng, 2, BIG, 3)))
    keep = res.phi.copy()
    attribute(indicators.get("heat"), Panel(_panel(rng, 2, BIG, 3)))
    np.testing.assert_array_equal(res.phi, keep)
