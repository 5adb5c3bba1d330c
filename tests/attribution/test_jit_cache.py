"""numba's disk cache finds aumann's compiled kernels again in a new process.

numba keys a kernel's cache entry on a pickle of its closure, and a compiled helper (an intrinsic, another kernel)
pickles with an id drawn afresh in every process: a kernel closing over one was compiled again in every new process
(0.9 s for the permutation draw and the marginal scatter alone, a new cache file each time). The kernels take their
compiled helpers as globals (:func:`aumann.attribution.jit.njit_bound`)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("numba")

from aumann.attribution import csr, jit, jit_controls, jit_log1p, jit_rank
from aumann.attribution import jit_sampling as js

pytestmark = pytest.mark.skipif(not jit.enabled(), reason="compiled kernels switched off (AUMANN_NUMBA=0)")


def _exercise_every_kernel() -> None:
    """Call each compiled kernel of the permutation methods, the CSR product, the low-rank control, log1p and τ."""
    import scipy.sparse as sp

    n = 64
    rng = np.random.default_rng(0)
    perms = np.empty((2, n), np.int32)
    js.draw_permutations(rng, perms)
    js.draw_permutations(np.random.Generator(np.random.Philox(1)), np.empty((2, n), np.int64))
    vals, u, out = rng.random((2, n)), rng.random((2, n)), np.empty((2, n))
    js.scatter_steps(vals, 0.0, perms, out)
    js.scatter_steps_reversed(u, 1.0, perms, out)
    js.scatter_antithetic(vals, u, 0.0, 1.0, perms, out)
    js.scatter_pair(vals[0], u[0], 0.0, perms[0].astype(np.int64), out[0])
    ei, ej = rng.integers(0, n, 50), rng.integers(0, n, 50)
    js.edge_running_sums(perms[0].astype(np.int64), ei, ej, rng.random(50), rng.random(n), 0.0,
                         np.empty(n, np.int64), np.empty(n), np.empty(n))
    a = sp.random(1100, 1100, density=0.9, format="csr", random_state=0)  # ≥ 2²⁰ entries: the compiled product
    x = rng.random(1100)
    assert np.array_equal(csr.matvec(a, x), a @ x)
    jit_controls.low_rank_units(rng.random((n, 10)), rng.random((n, 10)), rng.random(n), perms, True,
                                np.empty((2, n)))
    jit_log1p.log1p(rng.random(100))
    jit_rank.tau_counts(rng.integers(0, 5, 30), rng.integers(0, 5, 30), 5, 5)


def test_no_cached_kernel_closes_over_a_compiled_helper() -> None:
    from numba.core.dispatcher import Dispatcher
    from numba.core.serialize import ReduceMixin

    _exercise_every_kernel()
    cached = [d for d in gc.get_objects() if issubclass(type(d), Dispatcher)
              and (d.py_func.__module__ or "").startswith("aumann.") and type(d._cache).__name__ != "NullCache"]
    assert len(cached) >= 13  # the closure-built kernels exercised above, at least
    offenders = [(d.py_func.__qualname__, var) for d in cached
                 for var, cell in zip(d.py_func.__code__.co_freevars, d.py_func.__closure__ or (), strict=True)
                 if isinstance(cell.cell_contents, ReduceMixin)]
    assert offenders == []


def test_njit_bound_refuses_a_closure_over_a_compiled_helper() -> None:
    import numba

    helper = numba.njit(lambda v: v + 1)

    def kernel(v: float) -> float:
        return helper(v)

    with pytest.raises(TypeError, match="closes over the compiled 'helper'"):
        jit.njit_bound(kernel)


def test_njit_bound_binds_helpers_as_globals() -> None:
    import numba

    def kernel(v: float) -> float:
        return twice(v) + 1.0  # noqa: F821 — bound by njit_bound

    compiled = jit.njit_bound(kernel, options={"cache": False}, twice=numba.njit(lambda v: 2.0 * v))
    assert compiled(3.0) == 7.0


_SCRIPT = textwrap.dedent("""
    import numpy as np
    from aumann.attribution import jit_sampling as js
    perms = np.empty((2, 300), np.int32)
    js.draw_permutations(np.random.default_rng(0), perms)
    out = np.empty((2, 300))
    js.scatter_steps(np.ones((2, 300)), 0.0, perms, out)
    js.scatter_steps_reversed(np.ones((2, 300)), 0.0, perms, out)
""")


def test_a_second_process_loads_the_kernels_instead_of_compiling_them(tmp_path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_DEBUG_CACHE": "1"}
    env.pop("AUMANN_NUMBA", None)

    def saved() -> list[str]:
        run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True)
        return [line for line in run.stdout.splitlines() if "data saved" in line]

    first = saved()
    assert len(first) >= 3  # compiled and stored: the draw, the two scatters
    assert saved() == []  # found on disk: nothing compiled again
