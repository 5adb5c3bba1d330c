"""The network-quadratic game's permutation walk at scale (f_casc's sampled Shapley in MegaScale-Social).

    python benchmarks/bench_network_walk.py                   # 10⁷ agents (~3 GB, a minute)
    python benchmarks/bench_network_walk.py --agents 1000000

One antithetic unit (a permutation of the active players walked forwards and backwards) on a
preferential-attachment network (m = 3, the MegaScale default) with a third of the agents active,
two ways, in the same run:

* ``generic``: each direction walked on its own (``prefix_marginals``), then added and halved;
* ``fused``: ``antithetic_units`` (both walks from one pass over the edges, the unit scattered once);
* ``fused, two at once``: two permutations per call, walked on two threads where a core is idle (what the
  sampled-Shapley estimator does for games this big), per unit.

Reference: one random gather of the active players' ``own`` along the permutation (``own[order]``),
the least any walk does. Both are printed as multiples of it, with the same-bits check and the load.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _env import header


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=float, default=1e7)
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    from aumann.attribution.network import NetworkQuadraticKernel
    from aumann.attribution.pooled import GameKernel
    from aumann.scenarios.megascale_social.network import barabasi_albert

    n = int(args.agents)
    header(f"network walk, N = {n:,}")
    rng = np.random.default_rng(0)
    A = barabasi_albert(n, 3, rng).symmetric()
    r = rng.random(n) * (rng.random(n) < 1 / 3)
    kernel, _ = NetworkQuadraticKernel(A, r, np.zeros(n), scale=100.0 / A.nnz).restricted()
    parent = kernel.parent
    print(f"active players {kernel.n:,}, edges among them {parent.ei.size:,}")
    perms = [rng.permutation(kernel.n).astype(np.int32)[None] for _ in range(args.repeat + 1)]

    def timed_on(items, fn) -> float:
        fn(items[0])
        t0 = time.perf_counter()
        for p in items[1:]:
            fn(p)
        return (time.perf_counter() - t0) / (len(items) - 1)

    def timed(fn) -> float:
        return timed_on(perms, fn)

    ref = timed(lambda p: parent.own[p[0]])
    generic = timed(lambda p: GameKernel.antithetic_units(kernel, p))
    fused = timed(kernel.antithetic_units)
    pairs = [np.concatenate([p, q]) for p, q in zip(perms, perms[1:] + perms[:1])]
    two = timed_on(pairs, kernel.antithetic_units) / 2
    same = np.array_equal(GameKernel.antithetic_units(kernel, perms[0]).numpy(),
                          kernel.antithetic_units(perms[0]).numpy())
    print(f"reference (one gather of own) {ref * 1e3:8.1f} ms")
    print(f"generic (two walks)           {generic * 1e3:8.1f} ms = {generic / ref:5.1f} × reference")
    print(f"fused                         {fused * 1e3:8.1f} ms = {fused / ref:5.1f} × reference "
          f"({generic / fused:.2f}× faster; same bits: {same})")
    print(f"fused, two at once            {two * 1e3:8.1f} ms = {two / ref:5.1f} × reference "
          f"({generic / two:.2f}× faster than generic), per unit")
    header("after")


if __name__ == "__main__":
    main()
