"""Sampled Shapley on f_heat at scale, measured end to end (issue 15: m = 1000, N = 10⁶, T = 14).

    python benchmarks/bench_sampled.py                       # the full run (long: minutes to an hour)
    python benchmarks/bench_sampled.py --n 100000 --m 100    # a quick look
    python benchmarks/bench_sampled.py --device cuda         # on a GPU (permutations still drawn on the host)
    python benchmarks/bench_sampled.py --common              # the same permutations for all steps (lockstep)
    python benchmarks/bench_sampled.py --per-step --src DIR  # CPU s per permutation-step: before (DIR), compiled, numpy

Reference measured in the same run: the bare host work every permutation needs whatever the
kernel — ``rng.permutation(N)`` plus one numpy gather of the (3, N) table along it — timed on a few
permutations and scaled to m·T. The ratio is total time / reference (the kernel's overhead over
drawing and gathering). Also printed: seconds against the 300 s target, the load average before and
after, and the thread settings.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _env import header, set_threads


def reference_seconds(n: int, m: int, t: int, probe: int = 6) -> float:
    rng = np.random.default_rng(123)
    table = np.abs(rng.normal(size=(3, n)))
    best = np.inf
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(probe):
            np.take(table, rng.permutation(n), axis=1)
        best = min(best, (time.perf_counter() - t0) / probe)
    return best * m * t


_PER_STEP = r"""
import json, os, sys, time
if os.environ.get("AUMANN_BENCH_SRC"):  # another source tree (e.g. the commit before the change)
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, os.environ["AUMANN_BENCH_SRC"])
import numpy as np
from aumann.attribution import Panel, SampledShapley, attribute
n, anti, m1, m2, rounds = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
panel = Panel(np.abs(np.random.default_rng(0).normal(size=(1, n, 3))))
attribute("heat", panel, method=SampledShapley(permutations=4, antithetic=anti), rng=0)  # warm up / compile
best = {m1: np.inf, m2: np.inf}
for _ in range(rounds):
    for m in (m1, m2):
        c0 = time.process_time()
        attribute("heat", panel, method=SampledShapley(permutations=m, antithetic=anti), rng=0)
        best[m] = min(best[m], time.process_time() - c0)
slope = (best[m2] - best[m1]) / (m2 - m1)
print(json.dumps({"marginal": slope, "fixed": best[m1] - m1 * slope}))
"""


def per_step(n: int, rounds: int, antithetic: bool, src: str | None) -> dict:
    """CPU seconds per permutation-step of sampled Shapley on f_heat at N = n, T = 1: the marginal cost
    (m = 20 minus m = 4, everything counted: the draws in their background thread, the kernel, the
    moments), each variant in a fresh process: the code before this work (``src``, run as it was, OpenMP
    spinning included), this code with the compiled kernels, and this code with ``AUMANN_NUMBA=0``."""
    import os
    import subprocess
    import sys

    variants = [("compiled", {}), ("numpy/torch path (AUMANN_NUMBA=0)", {"AUMANN_NUMBA": "0"})]
    if src:
        variants.insert(0, ("before (--src)", {"AUMANN_BENCH_SRC": src}))
    out = {}
    for name, extra in variants:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "AUMANN_NUMBA")}
        env.update(extra)
        proc = subprocess.run([sys.executable, "-c", _PER_STEP, str(n), "1" if antithetic else "0", "4", "20",
                               str(rounds)], env=env, capture_output=True, text=True, check=True)
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  N={n:,}{' antithetic' if antithetic else ''} [{name}]: {out[name]['marginal'] * 1e3:.1f} ms CPU per "
              f"permutation-step (fixed {out[name]['fixed']:.2f} s)  load {os.getloadavg()[0]:.2f}", flush=True)
    # against the code before (--src) when given, else against the numpy/torch path of this code
    ref = "before (--src)" if src else "numpy/torch path (AUMANN_NUMBA=0)"
    target = "target ≥ 3" if src else "the target, ≥ 3, is against the code before this work: --src DIR"
    print(f"  → {out[ref]['marginal'] / out['compiled']['marginal']:.2f}× fewer CPU seconds per permutation-step "
          f"than {ref} ({target})", flush=True)
    return {"n": n, "antithetic": antithetic, "variants": out, "load": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--t", type=int, default=14)
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--antithetic", action="store_true")
    ap.add_argument("--common", action="store_true", help="SampledShapley(common_permutations=True)")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--device", default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--per-step", action="store_true", help="CPU s per permutation-step, compiled vs numpy/torch")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--src", default=None, help="--per-step: also run this source tree (the code before the change)")
    args = ap.parse_args()
    set_threads(args.threads)
    if args.per_step:
        env0 = header(f"sampled Shapley: CPU seconds per permutation-step, N={args.n:,}")
        rows = [per_step(args.n, args.rounds, anti, args.src) for anti in (False, True)]
        env1 = header("after")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "bench_sampled_per_step.json").write_text(json.dumps(
                {"rows": rows, "env_before": env0, "env_after": env1}, indent=2))
        return
    from aumann.attribution import Panel, SampledShapley, attribute

    env0 = header(f"sampled Shapley m={args.m} N={args.n:,} T={args.t} on f_heat"
                  f"{' (common permutations)' if args.common else ''}")
    z = np.abs(np.random.default_rng(0).normal(size=(args.t, args.n, 3)))
    panel = Panel(z)
    ref = reference_seconds(args.n, args.m, args.t)
    print(f"  reference (permutation + gather, m·T = {args.m * args.t}, projected from a few): {ref:.1f} s",
          flush=True)
    t0 = time.perf_counter()
    c0 = time.process_time()
    method = SampledShapley(permutations=args.m, antithetic=args.antithetic, common_permutations=args.common)
    res = attribute("heat", panel, method=method, rng=0, device=args.device, progress=args.progress)
    sec = time.perf_counter() - t0
    cpu = time.process_time() - c0
    env1 = header("after")
    print(f"  sampled Shapley: {sec:.1f} s wall ({cpu:.1f} s CPU), {sec / ref:.2f}× the reference, "
          f"{sec / 300:.2f}× the 300 s target; max relative efficiency gap {res.relative_efficiency_gap.max():.1e}",
          flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_sampled.json").write_text(json.dumps({
            "n": args.n, "t": args.t, "m": args.m, "common": args.common, "seconds": sec, "cpu_seconds": cpu,
            "reference_seconds": ref, "ratio": sec / ref, "env_before": env0, "env_after": env1}, indent=2))


if __name__ == "__main__":
    main()
