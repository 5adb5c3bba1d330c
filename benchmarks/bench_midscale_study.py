"""Benchmark: the whole MidScale-Social study (the README's main job) against its 5-minute target.

Runs ``run_study`` on MidScale-Social with the config's defaults (10 runs, N = 1000, T = 30, sampled
Shapley with 1000 permutations for the reference and again for the noise ceiling, deletion forks,
ablations) in a temporary directory, and prints the wall time per stage and in total, the ratio to
the 5-minute target, and — as a reference measured in the same process — the cost of one
sampled-Shapley permutation evaluated the slow way (one f evaluation per coalition, no running sums)
extrapolated to 1000 permutations × 10 runs, i.e. what the study would cost without the pooled fast path.

Usage::

    python benchmarks/bench_midscale_study.py [--runs 10] [--permutations 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--permutations", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (the target is 2 cores)")
    args = ap.parse_args()

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from aumann import scenarios
    from aumann.attribution import MaskedIndicatorGame, Problem
    from aumann.studies.faithfulness import run_study

    sc = scenarios.get("midscale-social")
    # plain sampling as the reference: its stage holds the reference and ceiling runs this benchmark compares
    cfg = sc.load_config(runs=args.runs, study={"permutations": args.permutations,
                                                "reference_estimator": "sampled_shapley"})
    stages: dict[str, float] = defaultdict(float)
    last = {"t": time.perf_counter(), "msg": None}

    def tick(_r: int, msg: str) -> None:
        now = time.perf_counter()
        if last["msg"] is not None:
            stages[last["msg"]] += now - last["t"]
        last.update(t=now, msg=None if msg == "done" else msg)

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        res = run_study(sc, cfg, out_dir=out, progress=tick)
    total = time.perf_counter() - t0

    # reference: the plain (non-pooled) evaluation of one permutation on one run's t* game
    run = sc.simulate(sc.load_config(runs=1), rng=0, keep_from=0)
    f = sc.indicator(cfg)
    ts = res.records[0]["t_star"]
    z0 = sc.baseline_features(run.before(ts), cfg)
    game = MaskedIndicatorGame(Problem.build(f, run.panel.select_steps([ts]), z0), 0)
    slow = game.kernel(fast=False)
    perm = np.random.default_rng(0).permutation(cfg.agents)[None]
    s0 = time.perf_counter()
    slow.prefix_marginals(perm, reverse=False)
    per_perm = time.perf_counter() - s0
    plain_total = per_perm * args.permutations * 2 * args.runs  # reference + ceiling runs

    print(f"MidScale-Social study: N={cfg.agents}, T={cfg.steps}, runs={args.runs}, permutations={args.permutations}, "
          f"torch threads={args.threads}")
    for k, v in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<32s} {v:8.1f} s")
    print(f"  {'total':<32s} {total:8.1f} s   target 300 s   ratio total/target = {total / 300:.2f}")
    print(f"sampled Shapley without running sums: {per_perm * 1e3:.1f} ms/permutation → "
          f"{plain_total:.0f} s for the study's {2 * args.runs * args.permutations} permutations "
          f"(pooled fast path speed-up ≈ {plain_total / max(stages['sampled Shapley (plain)'], 1e-9):.0f}×)")


if __name__ == "__main__":
    main()
