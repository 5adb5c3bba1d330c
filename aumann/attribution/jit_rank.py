"""Compiled kernel (numba) for Kendall's τ-b between two rankings given as tie runs.

Loaded like :mod:`aumann.attribution.jit` (lazily; ``AUMANN_NUMBA=0`` switches it off; cached on disk).

* :func:`tau_counts` — for two integer rankings ``x``, ``y`` (each agent's tie run: 0 for the lowest scores,
  equal for tied agents), the discordant pairs (x_i < x_j and y_i > y_j) and the pairs tied on both sides.
  These are the integers ``scipy.stats.kendalltau`` counts (``_kendall_dis`` and its joint ties), so τ-b made
  from them is the same float. scipy reaches them by two comparison sorts of the rank values and a Fenwick
  tree (a random access per level per agent); here the agents are put in (x, y) order by two stable counting
  sorts (the runs are integers below N) and the discordant pairs are the strict inversions of y in that order,
  counted by a bottom-up merge sort (sequential passes). 10⁷ agents: 1.5 s against scipy's 5–6 s.
"""

from __future__ import annotations

from typing import Any

from aumann.attribution.jit import built, enabled, njit_bound

_CACHE: dict[str, Any] = {}
counting_order: Any = None  # the kernel tau calls, bound when tau is compiled (jit.njit_bound)


def available() -> bool:
    """Whether the compiled τ kernel is used (see :func:`aumann.attribution.jit.enabled`)."""
    return enabled()


def tau_counts(x: Any, y: Any, nx: int, ny: int) -> tuple[int, int]:
    """(discordant pairs, pairs tied in both) of the rankings ``x``, ``y`` (equal-length int32/int64 arrays
    with values in [0, nx) and [0, ny))."""
    dis, ntie = built(_CACHE, "tau", _build)(x, y, int(nx), int(ny))
    return int(dis), int(ntie)


def _build() -> Any:
    import numba
    import numpy as np

    @numba.njit(nogil=True, cache=True)
    def counting_order_(key: Any, nk: int, within: Any) -> Any:
        """``within`` (positions) stably reordered by ``key[position]`` (values in [0, nk))."""
        n = within.size
        start = np.zeros(nk + 1, dtype=np.int64)
        for i in range(n):
            start[key[i] + 1] += 1
        for k in range(nk):
            start[k + 1] += start[k]
        out = np.empty(n, dtype=within.dtype)
        for j in range(n):
            i = within[j]
            v = key[i]
            out[start[v]] = i
            start[v] += 1
        return out

    def tau(x: Any, y: Any, nx: int, ny: int) -> tuple[int, int]:
        n = x.size
        ident = np.arange(n).astype(x.dtype)
        order = counting_order(x, nx, counting_order(y, ny, ident))  # by x, ties by y
        ys = np.empty(n, dtype=y.dtype)
        ntie = 0
        run = 1
        for k in range(n):
            ys[k] = y[order[k]]
            if k > 0:
                if x[order[k]] == x[order[k - 1]] and ys[k] == ys[k - 1]:
                    run += 1
                else:
                    ntie += run * (run - 1) // 2
                    run = 1
        ntie += run * (run - 1) // 2
        # the strict inversions of ys: pairs k < l with ys[k] > ys[l] (x-ties are in ascending y: none there)
        dis = 0
        src, dst = ys, np.empty(n, dtype=y.dtype)
        width = 1
        while width < n:
            lo = 0
            while lo < n:
                mid = min(lo + width, n)
                hi = min(lo + 2 * width, n)
                i, j, k = lo, mid, lo
                while i < mid and j < hi:
                    if src[j] < src[i]:
                        dst[k] = src[j]
                        j += 1
                        dis += mid - i
                    else:
                        dst[k] = src[i]
                        i += 1
                    k += 1
                while i < mid:
                    dst[k] = src[i]
                    i += 1
                    k += 1
                while j < hi:
                    dst[k] = src[j]
                    j += 1
                    k += 1
                lo = hi
            src, dst = dst, src
            width *= 2
        return dis, ntie

    return njit_bound(tau, counting_order=counting_order_)


__all__ = ["available", "tau_counts"]
