"""Benchmark: the whole Bluesky study grid on the SYNTHETIC 1.67 M-user panel (no --deepset).

Run:  python benchmarks/bench_bluesky_study.py [--users 1671587] [--out /tmp/bsky-bench] [--deepset]

Prints wall time of `synth` and of the study grid against the 10-minute goal (ratio), and the
acceptance numbers (flip cells, RAND shift, ε per indicator, residual-law deviation; with --deepset
also the efficiency gap and the attribution time against K forward+backward passes measured in the
same run). The goal lives here, never in a timed test. The machine's load average is printed too:
timings on a shared 2-core box are upper bounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

GOAL_SECONDS = 600.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=1_671_587)
    ap.add_argument("--out", type=Path, default=Path("/tmp/aumann-bsky-bench"))
    ap.add_argument("--deepset", action="store_true")
    ap.add_argument("--keep", action="store_true", help="reuse finished cells (resume) instead of a fresh run")
    args = ap.parse_args()

    from aumann.data.bluesky.synth import SynthConfig, generate, write_synth
    from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale

    counts_dir, study_dir = args.out / "counts", args.out / "study"
    if not args.keep and study_dir.exists():
        shutil.rmtree(study_dir)
    t0 = time.perf_counter()
    counts = generate(SynthConfig(users=args.users, seed=0))
    write_synth(counts, counts_dir)
    synth_s = time.perf_counter() - t0
    del counts
    t0 = time.perf_counter()
    s = run_crossscale(counts_dir, study_dir, CrossScaleConfig(deepset=args.deepset), progress=False)
    study_s = time.perf_counter() - t0
    grid_s = s["timings"]["grid_seconds"]
    print(f"load average: {os.getloadavg()}  (cores: {os.cpu_count()})")
    print(f"synth ({args.users:,} users): {synth_s:.1f} s")
    print(f"study grid: {grid_s:.1f} s; whole study command: {study_s:.1f} s; "
          f"ratio to the {GOAL_SECONDS:.0f} s goal: {study_s / GOAL_SECONDS:.2f}")
    keys = ("flip_cells_positive", "bias_v_mean_shift_pp", "rand_mean_shift_pp", "rand_mean_abs_shift_pp",
            "epsilon", "residual_law_max_deviation", "degenerate_runs")
    print(json.dumps({k: s.get(k) for k in keys}, indent=1))
    if "deepset" in s:
        d = s["deepset"]
        print(f"deepset: efficiency gap {100 * d['efficiency_gap_relative']:.4f} % (target ≤ 0.3 %); attribution "
              f"{d['attribution_seconds']:.1f} s vs K fwd+bwd {d['reference_seconds_K_fwd_bwd']:.1f} s: ratio "
              f"{d['time_ratio']:.2f} (target ≤ 1.2); training {d['training']['train_seconds']:.1f} s")


if __name__ == "__main__":
    main()
