"""Compiled kernels (numba) for the memory-bound loops of the closed forms and the permutation methods.

numba is imported lazily, on the first call of :func:`kernels` (importing :mod:`aumann` stays
light), and only when it is installed and not switched off: ``AUMANN_NUMBA=0`` in the environment
makes every caller take its numpy/torch path instead (the benchmarks measure both ways; the tests
check that both agree). Compiled code is cached on disk (numba's ``cache=True``), so a machine pays
the compilation once, not every process.

Every kernel is sequential and releases the GIL (``nogil=True``): callers cut big arrays into fixed
parts (a function of the sizes only) and run the parts on their own threads, so the rounding — and
the numbers — never depend on how many threads there are. Reductions keep independent partial sums
for ``_LANES`` consecutive agents in a fixed order (the compiler vectorises them without
reassociating anything) and add them up once per block of ``_BLOCK`` agents, which bounds the
rounding error at about (``_BLOCK`` / ``_LANES`` + n / ``_BLOCK``) ε.

The weighted row sums φ_i = Σ_d x_{i,d} c_d are generated per feature count D ≤ ``_MAX_UNROLLED``
(the D products written out for ``_LANES`` agents, which the compiler turns into vector code; a
loop over a run-time D does not vectorise); larger D take a plain loop.
"""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace
from typing import Any

_LANES = 8  # agents summed side by side (independent accumulators)
_BLOCK = 4096  # agents per first-level block (a multiple of _LANES)
_MAX_UNROLLED = 8

_LOCK = threading.Lock()
_KERNELS: SimpleNamespace | None = None
_TRIED = False
_ROWS: dict[int, Any] = {}


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


def weighted_rows_kernel(d: int) -> Any:
    """``kernel(x, c, t0, t1, a, b, out, sums)`` for x of this D: for t0 ≤ t < t1 and a ≤ i < b,
    ``out[t, i] = Σ_d x[t, i, d] c[t, d]`` (x C-contiguous (T, N, D), c float64 (T, D), out (T, N) in any
    float dtype: computed in float64, rounded once) and ``sums[t] += Σ_i out[t, i]`` (float64, of the stored
    values)."""
    fn = _ROWS.get(d)
    if fn is None:
        with _LOCK:
            fn = _ROWS.get(d)
            if fn is None:
                fn = _ROWS[d] = _rows_kernel(d)
    return fn


_ROWS_TEMPLATE = '''
def weighted_rows_d{d}(x, c, t0, t1, a, b, out, sums):
    for t in range(t0, t1):
{coefs}
        body = a + (b - a) // {lanes} * {lanes}
        tot = 0.0
        i = a
        while i < body:
            end = min(body, i + {block})
{zero}
            for i0 in range(i, end, {lanes}):
{lanes_body}
            tot += {acc_sum}
            i = end
        for i0 in range(body, b):
            out[t, i0] = {row_tail}
            tot += out[t, i0]
        sums[t] += tot
'''


def _rows_kernel(d: int) -> Any:
    if d > _MAX_UNROLLED:
        return _generic_rows()
    row = " + ".join(f"x[t, i0 + {{l}}, {k}] * c{k}" for k in range(d))
    body = []
    for lane in range(_LANES):
        body.append(f"                out[t, i0 + {lane}] = " + row.format(l=lane))
        body.append(f"                a{lane} += out[t, i0 + {lane}]")
    src = _ROWS_TEMPLATE.format(
        d=d, lanes=_LANES, block=_BLOCK,
        coefs="\n".join(f"        c{k} = c[t, {k}]" for k in range(d)),
        zero="\n".join(f"            a{lane} = 0.0" for lane in range(_LANES)),
        lanes_body="\n".join(body),
        acc_sum=" + ".join(f"a{lane}" for lane in range(_LANES)),
        row_tail=" + ".join(f"x[t, i0, {k}] * c{k}" for k in range(d)),
    )
    return compile_source(src, f"weighted_rows_d{d}", __file__, __name__)


def compile_source(src: str, name: str, path: str, module: str) -> Any:
    """``numba.njit(nogil=True, cache=True)`` of the function ``name`` defined by ``src``, compiled as if
    written in the file ``path`` of ``module``, so that numba's on-disk cache finds it again (its key is the
    function's name and that file's timestamp — the template that made ``src`` is part of the file)."""
    import numba
    import numpy as np

    ns: dict[str, Any] = {"__name__": module, "np": np}
    exec(compile(src, path, "exec"), ns)  # our own templates, formatted with integers only
    return numba.njit(nogil=True, cache=True)(ns[name])


_GENERIC: list[Any] = []


def _generic_rows() -> Any:
    if not _GENERIC:
        import numba
        import numpy as np

        @numba.njit(nogil=True, cache=True)
        def weighted_rows_any(x: Any, c: Any, t0: int, t1: int, a: int, b: int, out: Any, sums: Any) -> None:
            d = x.shape[2]
            acc = np.zeros(_LANES)
            for t in range(t0, t1):
                tot = 0.0
                body = a + (b - a) // _LANES * _LANES
                i = a
                while i < body:
                    end = min(body, i + _BLOCK)
                    acc[:] = 0.0
                    for i0 in range(i, end, _LANES):
                        for lane in range(_LANES):
                            v = 0.0
                            for k in range(d):
                                v += x[t, i0 + lane, k] * c[t, k]
                            out[t, i0 + lane] = v
                            acc[lane] += out[t, i0 + lane]
                    tot += acc.sum()
                    i = end
                for i0 in range(body, b):
                    v = 0.0
                    for k in range(d):
                        v += x[t, i0, k] * c[t, k]
                    out[t, i0] = v
                    tot += out[t, i0]
                sums[t] += tot

        _GENERIC.append(weighted_rows_any)
    return _GENERIC[0]


def _build() -> SimpleNamespace:
    import numba
    import numpy as np

    lanes, block = _LANES, _BLOCK

    @numba.njit(nogil=True, cache=True)
    def column_sums(x: Any, t0: int, t1: int, a: int, b: int, out: Any) -> None:
        """out[t, k] += Σ_{a ≤ i < b} x[t, i, k] (float64) for t0 ≤ t < t1; x C-contiguous (T, N, D)."""
        d = x.shape[2]
        n = b - a
        body = n // lanes * lanes
        width = lanes * d
        acc = np.zeros(width)
        tot = np.zeros(width)
        per = block // lanes
        for t in range(t0, t1):
            flat = x[t, a:b].reshape(n * d)
            rows = flat[: body * d].reshape(body // lanes, width)  # a row: `lanes` consecutive agents
            tot[:] = 0.0
            for r0 in range(0, rows.shape[0], per):
                acc[:] = 0.0
                for r in range(r0, min(rows.shape[0], r0 + per)):
                    acc += rows[r]
                tot += acc
            for j in range(width):
                out[t, j % d] += tot[j]
            for k in range(body * d, n * d):
                out[t, k % d] += flat[k]

    return SimpleNamespace(column_sums=column_sums)


__all__ = ["compile_source", "enabled", "kernels", "weighted_rows_kernel"]
