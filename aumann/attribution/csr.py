"""Sparse matrix–vector products on the idle cores, with scipy's bits.

``scipy.sparse`` computes ``A @ x`` for a CSR matrix on one thread (``csr_matvec``: each row summed in
order, ``sum += A_ij · x_j`` in the result dtype, starting from 0). :func:`matvec` computes exactly that —
the same additions in the same order, row by row, so the same bits — in a compiled kernel
(:mod:`aumann.attribution.jit`'s numba) over blocks of rows that run on two threads while a core is idle
(:func:`aumann.attribution.threads.run_items`). Each row is written by one thread only, so neither the
blocks nor the threads change a number (tested against scipy on random matrices, float32 and float64).
At 10⁷ agents the products are of the cascade pressure, the smoothing-gap series, the deletion forks'
indicators and every simulated step's feed; out of cache, one row's sum waits on memory, and two threads
keep twice as many loads in flight. Anything else (another format, mixed dtypes, small matrices, numba
off) is scipy's own product.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from aumann.attribution import jit
from aumann.attribution.threads import run_items

_MIN_NNZ = 1 << 20  # stored entries from which the compiled, threaded product is used
prefetch: Any = None  # the intrinsic the kernels call, bound when they are compiled (jit.njit_bound)
_BLOCKS = 8  # row blocks per product (a function of the shape only; any block may run on any thread)
_CACHE: dict[Any, Any] = {}


def matvec(A: Any, x: np.ndarray) -> np.ndarray:
    """``A @ x`` for a sparse matrix ``A`` and a 1-D ``x`` (scipy's result, bit for bit)."""
    if not _compiled(A, x):
        return A @ x
    out = np.empty(A.shape[0], dtype=A.dtype)
    _by_blocks(_kernels().rows, A, np.ascontiguousarray(x), out)
    return out


def matvec_pair(A: Any, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(A @ x, A @ y)`` — the bits of two :func:`matvec` calls — from one pass over ``A``'s entries: each row's
    two sums are made side by side, in the same order as alone, and ``x``, ``y`` are read interleaved (the
    random row of both in one cache line). A product out of cache is bound by reading the matrix and the
    random rows, so the pair costs little more than one product."""
    if not (_compiled(A, x) and _compiled(A, y)):
        return matvec(A, x), matvec(A, y)
    xy = np.empty((x.shape[0], 2), dtype=A.dtype)
    xy[:, 0], xy[:, 1] = x, y
    out = np.empty((A.shape[0], 2), dtype=A.dtype)
    _by_blocks(_kernels().rows_pair, A, xy, out)
    return np.ascontiguousarray(out[:, 0]), np.ascontiguousarray(out[:, 1])


def _by_blocks(kernel: Any, A: Any, x: np.ndarray, out: np.ndarray) -> None:
    """``kernel`` over the row blocks of ``A`` (a function of the shape only), on the idle cores."""
    cuts = np.linspace(0, A.shape[0], _BLOCKS + 1).astype(np.int64)
    zero = A.dtype.type(0)
    run_items(lambda b: kernel(A.indptr, A.indices, A.data, x, out, int(cuts[b]), int(cuts[b + 1]), zero),
              list(range(_BLOCKS)))


def _compiled(A: Any, x: Any) -> bool:
    return (isinstance(x, np.ndarray) and x.ndim == 1 and sp.issparse(A) and A.format == "csr"
            and A.nnz >= _MIN_NNZ and A.dtype in (np.float32, np.float64) and x.dtype == A.dtype
            and A.shape[1] == x.shape[0] and jit.enabled())


def _kernels() -> Any:
    return jit.built(_CACHE, "matvec", _build)


def _build() -> Any:
    from types import SimpleNamespace

    from aumann.attribution.jit_sampling import _AHEAD, _prefetch

    ahead = _AHEAD

    def rows(indptr: Any, indices: Any, data: Any, x: Any, out: Any, lo: int, hi: int, zero: Any) -> None:
        end = indptr[hi]
        for i in range(lo, hi):
            acc = zero
            for jj in range(np.intp(indptr[i]), np.intp(indptr[i + 1])):
                if jj + ahead < end:  # the entry of x read `ahead` entries on (a random row of x)
                    prefetch(x, np.uintp(indices[jj + ahead]), 0)
                acc += data[jj] * x[np.uintp(indices[jj])]  # unsigned: no negative-index wraparound test
            out[i] = acc

    def rows_pair(indptr: Any, indices: Any, data: Any, xy: Any, out: Any, lo: int, hi: int, zero: Any) -> None:
        end = indptr[hi]
        for i in range(lo, hi):
            acc0 = zero
            acc1 = zero
            for jj in range(np.intp(indptr[i]), np.intp(indptr[i + 1])):
                if jj + ahead < end:  # both vectors' random row: one cache line
                    prefetch(xy, np.uintp(2 * indices[jj + ahead]), 0)
                j = np.uintp(indices[jj])
                a = data[jj]
                acc0 += a * xy[j, 0]  # each sum in the order of rows' alone: the same bits
                acc1 += a * xy[j, 1]
            out[i, 0] = acc0
            out[i, 1] = acc1

    compiled = {"prefetch": _prefetch()}
    return SimpleNamespace(rows=jit.njit_bound(rows, **compiled), rows_pair=jit.njit_bound(rows_pair, **compiled))


__all__ = ["matvec", "matvec_pair"]
