"""Compiled kernel (numba) for the control-variate estimator's low-rank control along permutations.

Loaded like :mod:`aumann.attribution.jit` (lazily; ``AUMANN_NUMBA=0`` switches it off; cached on disk).

* :func:`low_rank_units` — for each permutation π and position k, the control of the player i = π_k,
  g_i(k) = Σ_p B[i, p] Γ[k, p] (and, for the reversed permutation, Σ_p B[i, p] Γ[n − 1 − k, p]), averaged
  over the pair and centred by its mean μ_i, written straight to player order. One walk of the permutation
  reads one (P-wide) row of B per player — one cache line — where the torch path made P gathers of (c, n),
  P products, a scatter per direction, then the pair mean and the centring as four more passes. The
  products are added in the same order (p = 0, 1, …) and the pair mean and centring are the same float64
  operations, so the values are the same bits (``tests/attribution/test_control_variate.py``). The walk
  prefetches, ``_AHEAD`` players on, the cache lines of that player's row of B, its μ and its output: at 10⁶
  players a permutation with the reversed walk took 33–34 ms instead of 57–83 (P = 3) and 48–55 instead of 76–80
  (P = 8), best of 9, load 2.6; without it 45–48 ms instead of 53 (P = 8), the same within noise for P = 3.
"""

from __future__ import annotations

from typing import Any

from aumann.attribution.jit import built, compile_source, enabled, njit_bound
from aumann.attribution.jit_sampling import _AHEAD, _fetch_row, _prefetch

_CACHE: dict[int, Any] = {}
prefetch: Any = None  # the intrinsic low_rank calls, bound when it is compiled (jit.njit_bound)


def available() -> bool:
    """Whether the compiled control kernel is used (see :func:`aumann.attribution.jit.enabled`)."""
    return enabled()


_MAX_UNROLLED = 8  # profile counts P written out term by term (a loop over a run-time P is 2× slower)

_TEMPLATE = '''
def low_rank_p{P}(B, G, mu, perms, reverse, out):
    c, n = perms.shape
    flat = B.reshape(B.size)
    for r in range(c):
        row = out[r]
        for k in range(n):
            if k + {ahead} < n:
                ahead_i = perms[r, k + {ahead}]
{fetch}
                prefetch(mu, ahead_i, 0)
                prefetch(row, ahead_i, 1)
            i = perms[r, k]
            s = {fwd}
            if reverse:
                kr = n - 1 - k
                t = {rev}
                s = (s + t) * 0.5
            out[r, i] = s - mu[i]
'''


def low_rank_units(B: Any, G: Any, mu: Any, perms: Any, reverse: bool, out: Any) -> None:
    """``out[r, π_k] = g(π_k, k) − μ`` — or, with ``reverse``, ``(g(π_k, k) + g(π_k, n − 1 − k)) · ½ − μ`` — for
    B (n, P) and Γ (n, P) float64 C-contiguous, μ (n,) float64, ``perms`` (c, n) int32/int64, ``out`` (c, n)
    float64."""
    P = int(B.shape[1])
    key = P if P <= _MAX_UNROLLED else 0
    fn = built(_CACHE, key, lambda: _build_unrolled(P) if key else _build_low_rank())
    fn(B, G, mu, perms, reverse, out)


def _build_unrolled(P: int) -> Any:
    fwd = " + ".join(f"B[i, {p}] * G[k, {p}]" for p in range(P))
    rev = " + ".join(f"B[i, {p}] * G[kr, {p}]" for p in range(P))
    src = _TEMPLATE.format(P=P, fwd=fwd, rev=rev, ahead=_AHEAD, fetch=_fetch_row("ahead_i", P, 16))
    return compile_source(src, f"low_rank_p{P}", __file__, __name__, prefetch=_prefetch())


def _build_low_rank() -> Any:
    ahead = _AHEAD

    def low_rank(B: Any, G: Any, mu: Any, perms: Any, reverse: bool, out: Any) -> None:
        c, n = perms.shape
        P = B.shape[1]
        flat = B.reshape(B.size)
        for r in range(c):
            row = out[r]
            for k in range(n):
                if k + ahead < n:  # every cache line of the row of B read `ahead` players on, its μ, its output
                    at = perms[r, k + ahead] * P
                    for q in range(0, P, 8):
                        prefetch(flat, at + q, 0)
                    prefetch(flat, at + P - 1, 0)
                    prefetch(mu, perms[r, k + ahead], 0)
                    prefetch(row, perms[r, k + ahead], 1)
                i = perms[r, k]
                s = B[i, 0] * G[k, 0]
                for p in range(1, P):
                    s += B[i, p] * G[k, p]
                if reverse:
                    kr = n - 1 - k
                    t = B[i, 0] * G[kr, 0]
                    for p in range(1, P):
                        t += B[i, p] * G[kr, p]
                    s = (s + t) * 0.5
                out[r, i] = s - mu[i]

    return njit_bound(low_rank, prefetch=_prefetch())


__all__ = ["available", "low_rank_units"]
