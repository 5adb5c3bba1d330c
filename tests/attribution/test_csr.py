"""The compiled, threaded CSR mat-vec (aumann.attribution.csr) against scipy's: the same bits."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from aumann.attribution import csr, jit
from aumann.attribution import threads as item_threads

pytestmark = pytest.mark.skipif(not jit.enabled(), reason="numba is not installed")


def _matrix(rng: np.random.Generator, n_row: int, n_col: int, nnz: int, dtype: type) -> sp.csr_matrix:
    i, j = rng.integers(0, n_row, size=nnz), rng.integers(0, n_col, size=nnz)
    vals = (rng.normal(size=nnz) * 10.0 ** rng.integers(-8, 8, size=nnz)).astype(dtype)  # wide range: rounding shows
    return sp.coo_matrix((vals, (i, j)), shape=(n_row, n_col)).tocsr()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,nnz", [((1, 1), 1), ((7, 5), 20), ((1000, 1000), 9000), ((5000, 300), 40_000),
                                       ((20_000, 20_000), 10)])  # the last: mostly empty rows
@pytest.mark.parametrize("helpers", [0, 1])
def test_matvec_is_scipys_bit_for_bit(dtype, shape, nnz, helpers, monkeypatch):
    rng = np.random.default_rng(nnz)
    monkeypatch.setattr(csr, "_MIN_NNZ", 0)  # the compiled path at every size
    monkeypatch.setattr(item_threads, "idle_cores", lambda: helpers)
    A = _matrix(rng, *shape, nnz, dtype)
    x = (rng.normal(size=shape[1]) * 1e3).astype(dtype)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        y = csr.matvec(A, x)
    finally:
        torch.set_num_threads(old)
    ref = A @ x
    assert y.dtype == ref.dtype and y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)


def test_other_inputs_take_scipys_own_product(monkeypatch):
    rng = np.random.default_rng(1)
    monkeypatch.setattr(csr, "_MIN_NNZ", 0)
    A = _matrix(rng, 50, 40, 300, np.float32)
    x64 = rng.normal(size=40)
    np.testing.assert_array_equal(csr.matvec(A, x64), A @ x64)  # mixed dtypes: upcast as scipy does
    np.testing.assert_array_equal(csr.matvec(A.tocsc(), x64), A.tocsc() @ x64)
    X = rng.normal(size=(40, 3)).astype(np.float32)
    np.testing.assert_array_equal(csr.matvec(A, X), A @ X)
    assert not csr._compiled(A, x64) and csr._compiled(A, x64.astype(np.float32))


def test_big_products_use_the_compiled_path():
    rng = np.random.default_rng(2)
    A = _matrix(rng, 200_000, 200_000, 2 * csr._MIN_NNZ, np.float64)  # (duplicates are summed)
    x = rng.normal(size=200_000)
    assert csr._compiled(A, x)
    np.testing.assert_array_equal(csr.matvec(A, x), A @ x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,nnz", [((1, 1), 1), ((1000, 1000), 9000), ((5000, 300), 40_000),
                                       ((20_000, 20_000), 10)])
@pytest.mark.parametrize("helpers", [0, 1])
def test_matvec_pair_is_two_scipy_products(dtype, shape, nnz, helpers, monkeypatch):
    rng = np.random.default_rng(nnz + 1)
    monkeypatch.setattr(csr, "_MIN_NNZ", 0)
    monkeypatch.setattr(item_threads, "idle_cores", lambda: helpers)
    A = _matrix(rng, *shape, nnz, dtype)
    x, y = ((rng.normal(size=shape[1]) * 10.0 ** rng.integers(-6, 6, size=shape[1])).astype(dtype) for _ in range(2))
    p, q = csr.matvec_pair(A, x, y)
    for got, ref in ((p, A @ x), (q, A @ y)):
        assert got.dtype == ref.dtype and got.shape == ref.shape and got.flags.c_contiguous
        np.testing.assert_array_equal(got, ref)


def test_matvec_pair_of_other_inputs_is_two_products(monkeypatch):
    rng = np.random.default_rng(4)
    monkeypatch.setattr(csr, "_MIN_NNZ", 0)
    A = _matrix(rng, 60, 40, 300, np.float32)
    x64, x32 = rng.normal(size=40), rng.normal(size=40).astype(np.float32)
    p, q = csr.matvec_pair(A, x64, x32)  # one side mixed: both as matvec would
    np.testing.assert_array_equal(p, A @ x64)
    np.testing.assert_array_equal(q, A @ x32)
