"""The vectorised log1p (aumann.attribution.jit_log1p): within one unit in the last place of the exact value, the
C library's value at every special input, and the same bits compiled and as numpy operations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aumann.attribution import jit_log1p
from aumann.attribution.jit_log1p import log1p, log1p_scalar

SPECIALS = np.array([0.0, -0.0, 5e-324, -5e-324, 1e-300, 1e-17, 2.0**-53, -(2.0**-53), 2.0**-54, -(2.0**-54),
                     0.4142135623730950, 0.41421356237309515, -0.2928932188134524, -0.29289321881345254,
                     2.0**53, 2.0**54, 1.5e16, 1e308, np.finfo(float).max, np.inf, -np.inf, np.nan,
                     -1.0, -1.0 + 2.0**-53, -2.0, -np.finfo(float).max])


def _samples(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.random(20_000) * 1e-3, rng.random(20_000), rng.random(20_000) * 100.0,
            np.exp(rng.uniform(-745.0, 709.0, 20_000)), -rng.random(20_000) * 0.999_999, SPECIALS]


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.view(np.int64) - b.view(np.int64))


def test_within_one_ulp_of_the_c_library_and_its_special_values(rng):
    for x in _samples(rng):
        ours = log1p(x)
        with np.errstate(all="ignore"):
            ref = np.log1p(x)
        finite = np.isfinite(ref)
        assert _ulps(ours[finite], ref[finite]).max(initial=0) <= 1
        np.testing.assert_array_equal(ours[~finite], ref[~finite])  # ±inf and NaN where the C library has them
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(ref))  # log1p(-0.0) = -0.0


def test_within_one_ulp_of_the_exact_value():
    """Against a 200-bit reference (mpmath), on values spread over the whole range and where the reduction
    switches paths (1 + x near √2/2 and √2, powers of two)."""
    mpmath = pytest.importorskip("mpmath")
    rng = np.random.default_rng(7)
    x = np.concatenate([np.exp(rng.uniform(-40.0, 40.0, 600)), -rng.random(200) * 0.99,
                        np.sqrt(2.0) - 1.0 + rng.uniform(-1e-9, 1e-9, 100),
                        np.sqrt(0.5) - 1.0 + rng.uniform(-1e-9, 1e-9, 100),
                        2.0 ** rng.integers(-50, 60, 100) - 1.0 + rng.uniform(-1e-6, 1e-6, 100)])
    x = x[x > -1.0]
    ours = log1p(x)
    with mpmath.workprec(200):
        worst = max(float(abs(mpmath.mpf(float(o)) - mpmath.log1p(mpmath.mpf(float(v))))
                          / mpmath.mpf(np.spacing(abs(o)))) for v, o in zip(x, ours, strict=True) if o != 0.0)
    assert worst < 1.0


def test_compiled_numpy_and_in_place_give_the_same_bits(rng, monkeypatch):
    for x in _samples(rng):
        compiled = log1p(x)
        in_place = x.copy()
        log1p(in_place, out=in_place)  # the special values are read before they are overwritten
        with monkeypatch.context() as m:
            m.setattr(jit_log1p, "enabled", lambda: False)  # AUMANN_NUMBA=0: numpy operations
            plain = log1p(x)
        for got in (in_place, plain):
            np.testing.assert_array_equal(compiled.view(np.int64), got.view(np.int64))


def test_shapes_views_and_scalars():
    x = np.linspace(0.0, 3.0, 12).reshape(3, 4)
    np.testing.assert_array_equal(log1p(x), log1p(x.ravel()).reshape(3, 4))
    np.testing.assert_array_equal(log1p(x[:, ::2]), log1p(np.ascontiguousarray(x[:, ::2])))  # strided: numpy path
    out = np.zeros((3, 4))
    assert log1p(x, out=out) is out and out[2, 3] == log1p_scalar(3.0)
    assert log1p_scalar(0.5) == pytest.approx(math.log1p(0.5), rel=2.5e-16)
    assert log1p(np.empty(0)).shape == (0,)
    assert log1p(np.float32([1.0])).dtype == np.float32  # not float64: numpy's own
