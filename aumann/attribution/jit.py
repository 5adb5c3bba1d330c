"""Compiled kernels (numba) for the memory-bound loops of the closed forms and the permutation methods.

numba is imported lazily, on the first call of :func:`kernels` (importing :mod:`aumann` stays
light), and only when it is installed and not switched off: ``AUMANN_NUMBA=0`` in the environment
makes every caller take its numpy/torch path instead (the benchmarks measure both ways; the tests
check that both agree). Compiled code is cached on disk (numba's ``cache=True``), so a machine pays
the compilation once, not every process.

The two passes of a linear closed form (column sums, then weighted row sums φ_i = Σ_d x_{i,d} c_d with
Σ_i φ_i) are cut into *blocks* of ``_BLOCK`` agents of one step (the last block of a step may be
shorter; the < ``_LANES`` agents after the last whole group of ``_LANES`` are the step's *tail*). A
block kernel computes, for any range of blocks, each block's own partial result: the ``_LANES`` · D
side-by-side column sums of the block (``_LANES`` consecutive agents summed in independent
accumulators, sequentially), or φ of the block and its lane-wise sum. A *fold* then adds the block
results in one fixed order — blocks in order within each part of the step (the parts of
:func:`aumann.attribution.streaming._parts`, a function of N only), parts in order — and the tail last.
That is exactly the order the previous per-part kernels used, so the numbers are the same bits; and
since a block's partial result does not depend on who computed it, callers may split the blocks among
any number of threads, in any chunks, and balance them dynamically: the results never depend on the
thread count. Rounding is bounded by about (``_BLOCK`` / ``_LANES`` + n / ``_BLOCK``) ε.

Kernels are generated per feature count D ≤ ``_MAX_UNROLLED``: the column sums with their ``_LANES`` · D
accumulators as scalars (registers), φ as explicit vector code (:mod:`aumann.attribution.jit_simd`: one
load of 8 agents, split by shuffles, φ of the 8 agents as one vector added lane-wise to one vector
accumulator). Larger D take plain loops with the same arithmetic. Every kernel releases the GIL.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

_LANES = 8  # agents summed side by side (independent accumulators)
_BLOCK = 4096  # agents per first-level block (a multiple of _LANES)
_MAX_UNROLLED = 8  # (_LANES must equal jit_simd.LANES: the vector code's lanes)

_LOCK = threading.Lock()
_KERNELS: SimpleNamespace | None = None
_TRIED = False
_ROWS: dict[int, Any] = {}
_SUMS: dict[int, Any] = {}


def enabled() -> bool:
    """Whether compiled kernels are used (numba importable and ``AUMANN_NUMBA`` not ``0``/``false``/``off``)."""
    if os.environ.get("AUMANN_NUMBA", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    return kernels() is not None


def kernels() -> SimpleNamespace | None:
    """The compiled kernels, or ``None`` when numba is not installed."""
    global _KERNELS, _TRIED
    if _TRIED:
        return _KERNELS
    with _LOCK:
        if not _TRIED:
            try:
                _KERNELS = _build()
            except ImportError:
                _KERNELS = None
            _TRIED = True
    return _KERNELS


def rows_blocks_kernel(d: int) -> Any:
    """``kernel(x, c, g0, g1, nblk, out, R)`` for x of this D: for the blocks g0 ≤ g < g1 (block g is block
    g mod nblk of step g // nblk), ``out[t, i] = Σ_d x[t, i, d] c[t, d]`` for the block's agents (computed
    in float64 from float64 c, rounded once to out's dtype) and ``R[t, j]`` = the block's lane-wise sum of
    the stored values, lanes then added in order. x C-contiguous (T, N, D), out C-contiguous (T, N)."""
    return _get(_ROWS, d, _rows_kernel)


def _rows_kernel(d: int) -> Any:
    if d > _MAX_UNROLLED:
        return kernels().rows_blocks_any
    from aumann.attribution import jit_simd

    # compiled as if written in jit_simd.py, next to the intrinsic it inlines: numba's disk cache is keyed on
    # that file, so a change to the vector code cannot be answered by stale machine code
    src, name, names = jit_simd.rows_blocks_source(d, _BLOCK)
    return compile_source(src, name, jit_simd.__file__, jit_simd.__name__, **names)


def sums_blocks_kernel(d: int) -> Any:
    """``kernel(x, g0, g1, nblk, P)`` for x of this D: for the blocks g0 ≤ g < g1 (as in
    :func:`rows_blocks_kernel`), ``P[t, j, l·D + k]`` = Σ of x[t, i, k] over the block's agents i ≡ l
    (mod ``_LANES``), added in order (float64)."""
    return _get(_SUMS, d, _sums_kernel)


_SUMS_TEMPLATE = '''
def sums_blocks_d{d}(x, g0, g1, nblk, P):
    n = x.shape[1]
    body = n // {lanes} * {lanes}
    for g in range(g0, g1):
        t = g // nblk
        j = g - t * nblk
        i = j * {block}
        end = min(body, i + {block})
        seg = x[t].reshape(n * {d})[{d} * i:{d} * end]  # indexed from 0: provably ≥ 0, no wraparound checks
{zero_acc}
        for q in range((end - i) // {lanes}):
            r = q * {width}
{acc_body}
        p = P[t, j]
{store}
'''


def _sums_kernel(d: int) -> Any:
    if d > _MAX_UNROLLED:
        return kernels().sums_blocks_any
    width = _LANES * d
    src = _SUMS_TEMPLATE.format(
        d=d, lanes=_LANES, block=_BLOCK, width=width,
        zero_acc="\n".join(f"        a{j} = 0.0" for j in range(width)),
        acc_body="\n".join(f"            a{j} += seg[r + {j}]" for j in range(width)),
        store="\n".join(f"        p[{j}] = a{j}" for j in range(width)),
    )
    return compile_source(src, f"sums_blocks_d{d}", __file__, __name__)


_BUILD_LOCK = threading.RLock()  # re-entrant: a builder may ask for another (e.g. an intrinsic it inlines)


def built(cache: dict[Any, Any], key: Any, build: Callable[[], Any]) -> Any:
    """``cache[key]``, made by ``build()`` on its first use, once (under one lock for every compiled kernel of
    :mod:`aumann.attribution`: the ``jit_*`` modules keep their own caches and share this)."""
    fn = cache.get(key)
    if fn is None:
        with _BUILD_LOCK:
            fn = cache.get(key)
            if fn is None:
                fn = cache[key] = build()
    return fn


def _get(cache: dict[int, Any], d: int, build: Any) -> Any:
    return built(cache, d, lambda: build(d))


def blocks(n: int) -> int:
    """Blocks per step of N agents."""
    return -(-(n // _LANES * _LANES) // _BLOCK)


def compile_source(src: str, name: str, path: str, module: str, **names: Any) -> Any:
    """``numba.njit(nogil=True, cache=True)`` of the function ``name`` defined by ``src``, compiled as if
    written in the file ``path`` of ``module``, so that numba's on-disk cache finds it again (its key is the
    function's name and that file's timestamp — the template that made ``src`` is part of the file). ``names``
    are further globals of the source (compiled helpers, intrinsics)."""
    import numba
    import numpy as np

    ns: dict[str, Any] = {"__name__": module, "np": np, **names}
    exec(compile(src, path, "exec"), ns)  # our own templates, formatted with integers only
    return numba.njit(nogil=True, cache=True)(ns[name])


def njit_bound(fn: Callable[..., Any], /, *, options: dict[str, Any] | None = None, **names: Any) -> Any:
    """``numba.njit(nogil=True, cache=True, **options)`` of ``fn`` with ``names`` (the compiled helpers it calls:
    intrinsics, other kernels) as *globals* of the compiled function.

    numba keys a kernel's disk cache on a pickle of its closure, and a compiled helper pickles with an id drawn
    afresh in every process (numba's ``_uuid``): a kernel that closes over one was compiled again in every new
    process (about 0.9 s each, a new cache file each time), never found on disk. Globals are not in the key
    (like :func:`compile_source`'s ``names``). ``fn`` must call them by global name — declare them at module
    level (``prefetch: Any = None``) so the source reads — and may close over plain constants only."""
    import types

    import numba
    from numba.core.serialize import ReduceMixin

    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        if isinstance(cell.cell_contents, ReduceMixin):
            raise TypeError(f"{fn.__qualname__} closes over the compiled {var!r}: pass it to njit_bound as a global, "
                            "or numba's disk cache misses in every new process")
    bound = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__, fn.__defaults__,
                               fn.__closure__)
    bound.__qualname__, bound.__doc__, bound.__module__ = fn.__qualname__, fn.__doc__, fn.__module__
    return numba.njit(**{"nogil": True, "cache": True, **(options or {})})(bound)


def _build() -> SimpleNamespace:
    import numba
    import numpy as np

    lanes, block = _LANES, _BLOCK

    @numba.njit(nogil=True, cache=True)
    def sums_blocks_any(x: Any, g0: int, g1: int, nblk: int, P: Any) -> None:
        """:func:`sums_blocks_kernel` for any D (a loop over a run-time D does not vectorise)."""
        n, d = x.shape[1], x.shape[2]
        body = n // lanes * lanes
        width = lanes * d
        acc = np.zeros(width)
        for g in range(g0, g1):
            t = g // nblk
            j = g - t * nblk
            i = j * block
            end = min(body, i + block)
            rows = x[t].reshape(n * d)[d * i:d * end].reshape((end - i) // lanes, width)
            acc[:] = 0.0
            for r in range(rows.shape[0]):
                acc += rows[r]
            P[t, j, :width] = acc

    @numba.njit(nogil=True, cache=True)
    def rows_blocks_any(x: Any, c: Any, g0: int, g1: int, nblk: int, out: Any, R: Any) -> None:
        """:func:`rows_blocks_kernel` for any D."""
        n, d = x.shape[1], x.shape[2]
        body = n // lanes * lanes
        acc = np.zeros(lanes)
        for g in range(g0, g1):
            t = g // nblk
            j = g - t * nblk
            i = j * block
            end = min(body, i + block)
            acc[:] = 0.0
            for i0 in range(i, end, lanes):
                for lane in range(lanes):
                    v = 0.0
                    for k in range(d):
                        v += x[t, i0 + lane, k] * c[t, k]
                    out[t, i0 + lane] = v
                    acc[lane] += out[t, i0 + lane]
            R[t, j] = acc.sum()

    @numba.njit(nogil=True, cache=True)
    def fold_sums(x: Any, P: Any, cuts: Any, out: Any) -> None:
        """out[t, k] += the column sums of step t from its blocks' partial sums ``P`` (see the module's
        docstring for the order), part by part (``cuts``: the parts' agent boundaries), tail last."""
        n, d = x.shape[1], x.shape[2]
        body = n // lanes * lanes
        width = lanes * d
        tot = np.zeros(width)
        s = np.zeros(d)
        for t in range(x.shape[0]):
            flat = x[t].reshape(n * d)
            for p in range(cuts.size - 1):
                a, b = cuts[p], cuts[p + 1]
                tot[:] = 0.0
                for j in range(a // block, -(-min(b, body) // block)):
                    tot += P[t, j, :width]
                s[:] = 0.0
                for q in range(width):
                    s[q % d] += tot[q]
                if b == n:
                    for q in range(body * d, n * d):
                        s[q % d] += flat[q]
                out[t] += s

    @numba.njit(nogil=True, cache=True)
    def fold_rows(x: Any, c: Any, R: Any, cuts: Any, out: Any, sums: Any, from_zero: bool) -> None:
        """sums[t] += Σ_i out[t, i] from the blocks' sums ``R``, part by part; φ of the tail agents is
        computed here (after the last whole group of ``_LANES``) and added last — as the block kernel of
        this D computes it (``from_zero``: the run-time-D loop's 0.0 + x₀c₀ + …, which differs from
        x₀c₀ + … only in the sign of a zero)."""
        n, d = x.shape[1], x.shape[2]
        body = n // lanes * lanes
        for t in range(x.shape[0]):
            for p in range(cuts.size - 1):
                a, b = cuts[p], cuts[p + 1]
                tot = 0.0
                for j in range(a // block, -(-min(b, body) // block)):
                    tot += R[t, j]
                if b == n:
                    for i in range(body, n):
                        v = 0.0 if from_zero else x[t, i, 0] * c[t, 0]
                        for k in range(0 if from_zero else 1, d):
                            v += x[t, i, k] * c[t, k]
                        out[t, i] = v
                        tot += out[t, i]
                sums[t] += tot

    return SimpleNamespace(sums_blocks_any=sums_blocks_any, rows_blocks_any=rows_blocks_any,
                           fold_sums=fold_sums, fold_rows=fold_rows)


__all__ = ["blocks", "built", "compile_source", "enabled", "kernels", "rows_blocks_kernel", "sums_blocks_kernel"]
