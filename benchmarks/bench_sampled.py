"""Sampled Shapley on f_heat at scale, measured end to end (issue 15: m = 1000, N = 10⁶, T = 14).

    python benchmarks/bench_sampled.py                       # the full run (long: minutes to an hour)
    python benchmarks/bench_sampled.py --n 100000 --m 100    # a quick look
    python benchmarks/bench_sampled.py --device cuda         # on a GPU (permutations still drawn on the host)
    python benchmarks/bench_sampled.py --common              # the same permutations for all steps (lockstep)
    python benchmarks/bench_sampled.py --per-step            # CPU s per permutation-step, compiled vs numpy (issue 26)

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


def per_step(n: int, m: int, rounds: int, antithetic: bool) -> dict:
    """CPU seconds per permutation-step of sampled Shapley on f_heat at N = n, T = 1, everything counted
    (the draws in their background thread included), with the compiled kernels and with ``AUMANN_NUMBA=0``
    (the numpy/torch path of before), alternated ``rounds`` times; best of each. Also the bare draw:
    ``rng.permutation(n)`` vs the compiled draw of the same permutations."""
    import os

    from aumann.attribution import Panel, SampledShapley, attribute, jit_sampling

    z = np.abs(np.random.default_rng(0).normal(size=(1, n, 3)))
    panel = Panel(z)
    method = SampledShapley(permutations=m, antithetic=antithetic)
    best = {"numba": np.inf, "numpy": np.inf}
    attribute("heat", panel, method=SampledShapley(permutations=4), rng=0)  # compile / warm up
    for _ in range(rounds):
        for variant in ("numpy", "numba"):
            os.environ["AUMANN_NUMBA"] = "1" if variant == "numba" else "0"
            c0 = time.process_time()
            attribute("heat", panel, method=method, rng=0)
            best[variant] = min(best[variant], (time.process_time() - c0) / m)
    os.environ.pop("AUMANN_NUMBA", None)
    rng = np.random.default_rng(1)
    out = np.empty((4, n), dtype=np.int32)
    jit_sampling.draw_permutations(rng, out[:1])
    c0 = time.process_time()
    for _ in range(4):
        rng.permutation(n)
    draw_np = (time.process_time() - c0) / 4
    c0 = time.process_time()
    jit_sampling.draw_permutations(rng, out)
    draw_jit = (time.process_time() - c0) / 4
    row = {"n": n, "m": m, "antithetic": antithetic, "cpu_s_per_permutation_step_numba": best["numba"],
           "cpu_s_per_permutation_step_numpy": best["numpy"], "ratio": best["numpy"] / best["numba"],
           "draw_cpu_s_numpy": draw_np, "draw_cpu_s_numba": draw_jit, "load": os.getloadavg()[0]}
    print(f"  N={n:,} m={m}{' antithetic' if antithetic else ''}: CPU per permutation-step "
          f"{best['numpy'] * 1e3:.1f} ms (numpy/torch, before) → {best['numba'] * 1e3:.1f} ms (compiled): "
          f"{row['ratio']:.2f}× fewer (target ≥ 3); the draw alone {draw_np * 1e3:.1f} → {draw_jit * 1e3:.1f} ms  "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    return row


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
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    set_threads(args.threads)
    if args.per_step:
        env0 = header(f"sampled Shapley: CPU seconds per permutation-step, N={args.n:,}")
        m = min(args.m, 32)
        rows = [per_step(args.n, m, args.rounds, anti) for anti in (False, True)]
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
