"""Linear closed forms at memory speed: column sums and weighted row sums of a (T, N, D) panel.

The zero-baseline closed form of every pooled indicator with linear ψ (``lin``, ``heat`` and their
linear combinations) is

    φ_{t,i} = Σ_d z_{t,i,d} c_{t,d},

with coefficients c_t that depend on z only through the column means m_t = mean_i z_{t,i}; so do
f(z_t) and f(0) (Appendix F). The whole attribution is therefore two reads of z and one write of
φ, and nothing else touches an O(N) array:

1. :func:`column_sums` — one read of z, reduced along contiguous memory: each step is viewed as
   rows of ``_ROW_AGENTS · D`` consecutive values, so the reduction is a vectorised sum of long
   contiguous rows (instead of a strided reduction over the agent axis), accumulated sequentially in
   blocks of ``_BLOCK_ROWS`` rows and the blocks then added up, which bounds rounding at
   ~(``_BLOCK_ROWS`` + N / (``_ROW_AGENTS`` · ``_BLOCK_ROWS``) + ``_ROW_AGENTS``) ε;
2. the indicator's coefficients, f(z_t) and f(0) from the (T, D) means (a few flops);
3. :func:`weighted_rows` — one read of z and one write of φ, a matrix–vector product per step
   (BLAS) into a freshly allocated output, plus Σ_i φ_{t,i} read back while the part's φ is still
   warm in cache. Those sums give the efficiency gap (``Attribution.efficiency_gap`` then costs
   nothing) and the finiteness check of φ: a float sum is finite only if every term is.

Big steps are cut into a few block-aligned parts (a function of N only) that run on up to
``torch.get_num_threads()`` threads and are added in a fixed order, so results do not depend on the
thread count. The compiled kernels (:mod:`aumann.attribution.jit`) go further: each block of 4,096
agents yields its own partial result and a fold adds them up in that same fixed order, so blocks may be
shared among threads in any way — the calling thread works too, and helpers are handed work only while
a core is idle (:func:`aumann.attribution.threads.run_items`). Small panels take single numpy calls (no
per-step Python loop), which keeps the fixed cost of an ``attribute()`` call low. Results agree with a
plain float64 evaluation of the formulas to ~1e-14 relative.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from aumann.attribution import jit
from aumann.attribution.threads import run_items
from aumann.checks import as_torch
from aumann.errors import IndicatorError

# The indicator's type is not imported: indicators import this module (no cycle, even a typing-only one).
Indicator = Any  # an aumann.attribution.indicators.Indicator with has_linear_closed_form

_ROW_AGENTS = 128  # agents per contiguous row of the column-sum reduction
_BLOCK_ROWS = 1024  # rows accumulated sequentially before blocks are added
_SMALL = 1 << 15  # N·D below this: one numpy call per pass, no per-step loop
_PART = _ROW_AGENTS * _BLOCK_ROWS  # agents per part of a step (parts run on separate threads)
_MAX_PARTS = 8
_COMPILED = 1 << 15  # T·N·D from here on: the compiled kernels (numba), when available
_THREADED = 1 << 18  # values read from here on: parts go to the thread pool


def _run(fn: Callable[[Any], Any], items: list[Any], work: int = 1 << 62) -> list[Any]:
    """:func:`~aumann.attribution.threads.run_items` with this module's threshold (values read)."""
    return run_items(fn, items, work=work, threshold=_THREADED)


def _parts(n: int) -> list[tuple[int, int]]:
    """Agent ranges a big step is cut into: block-aligned, at most ``_MAX_PARTS``, and a function of
    N only — so the rounding, and the results, never depend on how many threads run them."""
    k = max(1, min(_MAX_PARTS, n // (2 * _PART)))
    cuts = [0] + [(n * j // k) // _PART * _PART for j in range(1, k)] + [n]
    return list(itertools.pairwise(cuts))


def _flat_sums(flat: np.ndarray, d: int) -> np.ndarray:
    """Column sums of a contiguous run of agents given as its flat (n·D,) values."""
    width = _ROW_AGENTS * d
    rows = flat.size // width
    blocks = rows // _BLOCK_ROWS
    head = blocks * _BLOCK_ROWS * width
    acc = np.zeros(width)
    if blocks:
        acc += flat[:head].reshape(blocks, _BLOCK_ROWS, width).sum(axis=1, dtype=np.float64).sum(axis=0)
    if rows * width > head:
        acc += flat[head:rows * width].reshape(-1, width).sum(axis=0, dtype=np.float64)
    s = acc.reshape(_ROW_AGENTS, d).sum(axis=0)
    if flat.size > rows * width:
        s += flat[rows * width:].reshape(-1, d).sum(axis=0, dtype=np.float64)
    return s


def _block_tasks(T: int, N: int, D: int) -> list[tuple[int, int]]:
    """Ranges [g0, g1) of the T · ``jit.blocks(N)`` blocks for the compiled kernels: one range when the
    work is small or there is one thread, else about 4 per thread (balanced dynamically by the pool:
    a thread that lost its core leaves its share to the others). The results do not depend on this
    split (see :mod:`aumann.attribution.jit`), only the speed does."""
    G = T * jit.blocks(N)
    workers = torch.get_num_threads()
    if workers <= 1 or T * N * D < _THREADED or G < 2:
        return [(0, G)]
    k = min(G, 4 * workers, max(2, T * N * D // (_THREADED // 2)))
    return [(G * j // k, G * (j + 1) // k) for j in range(k)]


@functools.lru_cache(maxsize=64)
def _cuts(N: int) -> np.ndarray:
    """The agent boundaries of a step's parts (:func:`_parts` for big steps, else the whole step): the
    order in which the block results are added up, a function of N only (read-only, cached)."""
    cuts = np.array([0] + [b for _, b in _parts(N)] if N >= 2 * _PART else [0, N], dtype=np.int64)
    cuts.flags.writeable = False
    return cuts


def column_sums(x: np.ndarray) -> np.ndarray:
    """Σ_i x[t, i, :] for every step, float64 (T, D); one read of ``x`` along contiguous memory."""
    T, N, D = x.shape
    if x.flags.c_contiguous and x.size >= _COMPILED and jit.enabled():  # one vectorised read, no temporaries
        kernel, nblk = jit.sums_blocks_kernel(D), jit.blocks(N)
        partial = np.empty((T, nblk, jit._LANES * D))  # each block's lane sums, from whichever thread
        _run(lambda task: kernel(x, task[0], task[1], nblk, partial), _block_tasks(T, N, D), x.size)
        out = np.zeros((T, D))
        jit.kernels().fold_sums(x, partial, _cuts(N), out)  # added up in one fixed order
        return out
    if N * D < _SMALL:
        return _small_sums(x)
    if not x.flags.c_contiguous:  # a strided view: let torch stream it rather than copy it
        return _tensor(x).sum(dim=1, dtype=torch.float64).numpy()
    parts = _parts(N)
    tasks = [(t, a, b) for t in range(T) for a, b in parts]
    partial = _run(lambda task: _flat_sums(x[task[0], task[1]:task[2]].reshape(-1), D), tasks)
    out = np.zeros((T, D))
    for (t, _, _), s in zip(tasks, partial, strict=True):  # added in a fixed order
        out[t] += s
    return out


def _small_sums(x: np.ndarray) -> np.ndarray:
    """Column sums of a small panel in a few numpy calls: rows of 8 consecutive agents summed along
    contiguous memory (a reduction over an axis of length D is ~20× slower per value), then folded."""
    T, N, D = x.shape
    if N < 256 or not x.flags.c_contiguous:
        return np.add.reduce(x, axis=1, dtype=np.float64)  # x.sum(axis=1, dtype=float64) without the dispatch
    body = N // 8 * 8
    s = np.add.reduce(np.add.reduce(x[:, :body].reshape(T, body // 8, 8 * D), axis=1, dtype=np.float64)
                      .reshape(T, 8, D), axis=1)
    if body < N:
        s += np.add.reduce(x[:, body:], axis=1, dtype=np.float64)
    return s


def weighted_rows(x: np.ndarray, coef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """φ[t, i] = Σ_d x[t, i, d] coef[t, d] (in ``x``'s dtype) and the float64 row sums Σ_i φ[t, i]."""
    T, N, D = x.shape
    if x.flags.c_contiguous and x.size >= _COMPILED and jit.enabled():
        # compiled: φ in float64 from float64 coefficients, rounded to x's dtype once, and its sum in the same
        # read (each block's, added up afterwards in one fixed order)
        phi = fresh((T, N), x.dtype)
        kernel, c64, nblk = jit.rows_blocks_kernel(D), np.ascontiguousarray(coef, dtype=np.float64), jit.blocks(N)
        partial = np.empty((T, nblk))
        _run(lambda task: kernel(x, c64, task[0], task[1], nblk, phi, partial), _block_tasks(T, N, D), x.size)
        sums = np.zeros(T)
        jit.kernels().fold_rows(x, c64, partial, _cuts(N), phi, sums, D > jit._MAX_UNROLLED)
        return phi, sums
    c = coef if coef.dtype == x.dtype else coef.astype(x.dtype)
    if N * D < _SMALL:
        phi = x[0].dot(c[0])[None] if T == 1 else np.matmul(x, c[:, :, None])[:, :, 0]
        return phi, np.add.reduce(phi, axis=1, dtype=np.float64)
    phi = np.empty((T, N), dtype=x.dtype)  # numpy asks for huge pages on big buffers: fewer page faults
    tasks = [(t, a, b) for t in range(T) for a, b in _parts(N)]
    sums = np.zeros(T)
    xt, ct, ot = _tensor(x), as_torch(np.ascontiguousarray(c)), as_torch(phi, writable=True)

    def part_blas(task: tuple[int, int, int]) -> float:
        t, a, b = task
        row = ot[t, a:b]
        torch.mv(xt[t, a:b], ct[t], out=row)  # BLAS gemv: streams this part of the step once
        # numpy's pairwise sum (its rounding does not depend on torch's thread count), while the
        # part's φ is still in cache
        return float(phi[t, a:b].sum(dtype=np.float64))

    for (t, _, _), s in zip(tasks, _run(part_blas, tasks), strict=True):
        sums[t] += s
    return phi, sums


# ---------------------------------------------------------------------- recycled outputs
_RECYCLE_MIN = 1 << 20  # outputs from 1 MiB up are recycled (smaller ones: malloc reuses its own heap)
_RECYCLE_MAX = 128 << 20  # at most this many bytes are kept for reuse, none larger than this
_ALIGN = 64  # big outputs start on a cache line (the compiled kernels then write them with streaming stores)


class _Recycled:
    """The owner of an output buffer: numpy arrays over it keep it alive (it is their ``base``), and when
    the last of them is gone the memory goes back to :data:`_SPARE` instead of to the operating system.

    A fresh big allocation comes from ``mmap`` and every page of it is faulted in and zeroed by the
    kernel on first write — about one more pass over the output, as much as a whole read of a 3-feature
    panel. Repeated closed forms of the same size (studies, sweeps, benchmarks) write into memory that
    is already mapped instead. Nothing is shared: a buffer is reused only once no array refers to it.
    """

    __slots__ = ("__array_interface__", "mem")

    def __init__(self, mem: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.mem = mem
        address = mem.ctypes.data
        self.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (address + -address % _ALIGN, False),
                                    "version": 3}

    def __del__(self) -> None:
        spare = _SPARE
        if spare is not None:  # None while the interpreter shuts down
            spare.give(self.mem)


class _Spare:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.free: list[np.ndarray] = []

    def take(self, nbytes: int) -> np.ndarray:
        size = nbytes + _ALIGN
        with self.lock:
            for k, mem in enumerate(self.free):
                if mem.nbytes == size:
                    return self.free.pop(k)
        return np.empty(size, dtype=np.uint8)  # numpy asks for huge pages on big buffers: fewer page faults

    def give(self, mem: np.ndarray) -> None:
        with self.lock:
            self.free.append(mem)
            while sum(m.nbytes for m in self.free) > _RECYCLE_MAX:
                self.free.pop(0)  # the oldest goes back to the operating system


_SPARE: _Spare | None = _Spare()


def fresh(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)``; when it is big, in recycled memory (see :class:`_Recycled`) and aligned to
    ``_ALIGN`` bytes."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < _RECYCLE_MIN:
        return np.empty(shape, dtype=dtype)
    if nbytes > _RECYCLE_MAX or _SPARE is None:  # aligned, not recycled
        mem = np.empty(nbytes + _ALIGN, dtype=np.uint8)
        return mem[-mem.ctypes.data % _ALIGN:][:nbytes].view(dtype).reshape(shape)
    return np.asarray(_Recycled(_SPARE.take(nbytes), shape, dtype))


def _tensor(x: np.ndarray) -> torch.Tensor:
    """A torch view of ``x`` (a copy only for negative strides, which torch cannot view)."""
    return as_torch(x if min(x.strides) >= 0 else np.ascontiguousarray(x))


class ClosedForm(NamedTuple):
    """A closed-form attribution: φ (T, N), f(z_t), f(0), Σ_i φ_{t,i} and optional (T, N, D) φ_d."""

    phi: np.ndarray
    f_values: np.ndarray
    f_baseline: np.ndarray
    phi_sums: np.ndarray | None = None
    phi_features: np.ndarray | None = None


def linear_closed_form(f: Indicator, x: np.ndarray, *, per_feature: bool = False,
                       steps: Any = None) -> ClosedForm:
    """The zero-baseline closed form of an indicator with ``has_linear_closed_form``.

    Raises:
        IndicatorError: when f(z_t), the coefficients or φ are not finite (e.g. heat on features
            whose product of means is ≤ −1, or values so large that φ overflows); the message names
            the step by its label in ``steps`` (the panel's step labels) when given.
    """
    N = x.shape[1]
    means = column_sums(x)
    means /= N
    coef, fv, fb = f.linear_coefficients(means, N)
    phi, sums = weighted_rows(x, coef)
    # one check for all of it: a sum is finite only if every term is (NaN or inf in the coefficients
    # reaches Σ_i φ as well)
    if not all(map(math.isfinite, [*sums.tolist(), *fv.tolist(), *fb.tolist()])):
        _raise_not_finite(f, means, coef, fv, fb, sums, steps)
    phi_features = x * coef.astype(x.dtype)[:, None, :] if per_feature else None
    return ClosedForm(phi=phi, f_values=fv, f_baseline=fb, phi_sums=sums, phi_features=phi_features)


def _raise_not_finite(f: Indicator, means: np.ndarray, coef: np.ndarray, fv: np.ndarray, fb: np.ndarray,
                      sums: np.ndarray, steps: Any = None) -> None:
    def where(t: int) -> str:
        if steps is None:
            return f"step index {t}"
        label = steps[t]
        return f"step {label.item() if hasattr(label, 'item') else label!r}"

    bad_f = ~(np.isfinite(fv) & np.isfinite(fb) & np.isfinite(coef).all(axis=1))
    if bad_f.any():
        t = int(np.flatnonzero(bad_f)[0])
        raise IndicatorError(f"indicator {f.name!r} is not finite (NaN/inf) at {where(t)} (f(z) = {float(fv[t])!r}, "
                             f"f(0) = {float(fb[t])!r}, column means {means[t].tolist()}): its closed form needs a "
                             "finite f along the path from 0 to z; rescale the features or change the baseline")
    bad = np.flatnonzero(~np.isfinite(sums))
    t = int(bad[0]) if bad.size else 0
    raise IndicatorError(f"indicator {f.name!r}: the closed-form attributions overflow (NaN/inf) at {where(t)} "
                         f"(Σ_i φ = {float(sums[t])!r}); rescale the features")


__all__ = ["ClosedForm", "column_sums", "linear_closed_form", "weighted_rows"]
