"""Wall-clock runtime of every method on f_heat as N grows (paper Table wallclock, Figure runtime).

    python benchmarks/bench_wallclock.py --out results/wallclock            # N = 10 … 10⁶, T = 14
    python benchmarks/bench_wallclock.py --quick --out /tmp/wc             # N ≤ 10⁴, smaller caps
    python benchmarks/bench_wallclock.py --big --out /tmp/wc               # also one full m = 1000 run at N = 10⁶

Panel: synthetic |N(0, 1)| features (T, N, D = 3), zero baseline; the game is baseline masking on all N
agents for every method (Captum and SHAP get the same game: an agent's three features masked together).
Methods: ours (closed form; path integral K = 30), leave-one-out, sampled Shapley (m permutations),
sampled Banzhaf (m MSR samples), exact Shapley/Banzhaf (N = 10 only), Captum ShapleyValueSampling
(n_samples = m, perturbations_per_eval = 64; N ≤ 10⁴) and SHAP PermutationExplainer (m/2 antithetic
pairs = m permutations; N ≤ 10³).

A cell whose projected cost exceeds ``--cap`` seconds is measured on fewer permutations/samples and one
step, and extrapolated linearly in m and T (marked ``*``), as in the paper. References measured in the
same run: one ``np.sum`` pass over the panel (LOO target: ≤ 50×) and one bare numpy
permute + gather + cumsum pass over the (N, 3) array (sampled Shapley target: ≤ 2.5× per permutation).
Prints a Markdown table and writes ``wallclock.csv``, ``runtime.png`` and ``targets.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from aumann.attribution import (
    AumannShapley,
    ExactBanzhaf,
    ExactShapley,
    LeaveOneOut,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    attribute,
    indicators,
)

HEAT = indicators.get("heat")


def timed(fn: Callable[[], object], repeats: int = 1) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def per_unit_cost(run: Callable[[int], object], small: int, large: int) -> tuple[float, float]:
    """(fixed, per-unit) seconds from two runs, so the extrapolation excludes setup cost."""
    t1, t2 = timed(lambda: run(small), 2), timed(lambda: run(large), 2)  # best of two: the machine is shared
    per = max(t2 - t1, 1e-9) / (large - small)
    return max(t1 - per * small, 0.0), per


def ours_cells(z: np.ndarray, repeats: int) -> dict[str, float]:
    p = Panel(z)
    return {"ours_closed": timed(lambda: attribute(HEAT, p), repeats),
            "ours_path30": timed(lambda: attribute(HEAT, p, method=AumannShapley(steps=30, closed_form=False,
                                                                              pooled_fast_path=False)), 1),
            "loo": timed(lambda: attribute(HEAT, p, method=LeaveOneOut()), repeats)}


def sampled_cell(z: np.ndarray, make: Callable[[int], object], m: int, cap: float, probe: tuple[int, int]
                 ) -> tuple[float, bool]:
    """Seconds for m units on all T steps; measured if the projection fits the cap, else extrapolated."""
    T = z.shape[0]
    one = Panel(z[:1])
    fixed, per = per_unit_cost(lambda k: attribute(HEAT, one, method=make(k), rng=0), *probe)
    projected = T * (fixed + per * m)
    if projected <= cap:
        return timed(lambda: attribute(HEAT, Panel(z), method=make(m), rng=0)), False
    return projected, True


def captum_cell(z: np.ndarray, m: int, cap: float) -> tuple[float, bool]:
    from captum.attr import ShapleyValueSampling

    T, N, D = z.shape
    mask = torch.arange(N).view(1, N, 1).expand(1, N, D).contiguous()
    svs = ShapleyValueSampling(lambda x: HEAT(x))
    x = torch.as_tensor(z[:1])

    def run(k: int) -> None:
        svs.attribute(x, baselines=0.0, feature_mask=mask, n_samples=k, perturbations_per_eval=64)

    run(1)  # warm-up (first-call overhead is not the method's cost)
    t1 = timed(lambda: run(1))
    if t1 * m * T <= cap:
        return timed(lambda: [svs.attribute(torch.as_tensor(z[t:t + 1]), baselines=0.0, feature_mask=mask,
                                            n_samples=m, perturbations_per_eval=64) for t in range(T)]), False
    k = min(m, int(cap / max(t1, 1e-9) / 4))
    return (timed(lambda: run(k)) / k if k > 1 else t1) * m * T, True


def shap_cell(z: np.ndarray, m: int, cap: float) -> tuple[float, bool]:
    import shap

    T, N, _ = z.shape
    zt = [torch.as_tensor(z[t]) for t in range(T)]

    def explain(t: int, pairs: int) -> None:
        def model(u: np.ndarray) -> np.ndarray:  # u: (B, N) presence; zero baseline masking
            return HEAT(torch.as_tensor(u)[..., None] * zt[t]).numpy()
        explainer = shap.PermutationExplainer(model, shap.maskers.Independent(np.zeros((1, N)), max_samples=1))
        explainer(np.ones((1, N)), max_evals=pairs * (2 * N + 1), silent=True)

    explain(0, 1)  # warm-up: SHAP compiles its kernels on the first call
    t1 = timed(lambda: explain(0, 1))
    pairs = max(1, m // 2)
    if t1 * pairs * T <= cap:
        return timed(lambda: [explain(t, pairs) for t in range(T)]), False
    k = min(pairs, int(cap / max(t1, 1e-9) / 4))
    return (timed(lambda: explain(0, k)) / k if k > 1 else t1) * pairs * T, True


def references(z: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    N = z.shape[1]
    rows = np.ascontiguousarray(z[0])  # (N, 3)
    cols = np.ascontiguousarray(z[0].T)  # (3, N): the faster layout, the one the fast path uses
    by_rows = timed(lambda: np.cumsum(np.take(rows, rng.permutation(N), axis=0), axis=0), 5)
    by_cols = timed(lambda: np.cumsum(np.take(cols, rng.permutation(N), axis=1), axis=1), 5)
    return {"np_sum_panel": timed(lambda: np.sum(z), 5), "np_sum_step": timed(lambda: np.sum(z[0]), 5),
            "perm_gather_cumsum": min(by_rows, by_cols)}


def permutation_cost(z: np.ndarray, antithetic: bool = False) -> float:
    """Marginal seconds per permutation of SampledShapley on one step (setup excluded)."""
    one = Panel(z[:1])
    small, large = (4, 24)
    _, per = per_unit_cost(lambda k: attribute(HEAT, one, method=SampledShapley(permutations=k,
                                                                                antithetic=antithetic), rng=0),
                           small, large)
    return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/wallclock"))
    ap.add_argument("--ns", type=str, default="10,100,1000,10000,100000,1000000")
    ap.add_argument("--T", type=int, default=14)
    ap.add_argument("--m", type=int, default=1000)
    ap.add_argument("--cap", type=float, default=20.0, help="seconds per cell before extrapolating")
    ap.add_argument("--peer-cap", type=float, default=20.0, help="seconds per Captum/SHAP cell")
    ap.add_argument("--quick", action="store_true", help="N ≤ 10⁴ and smaller caps")
    ap.add_argument("--big", action="store_true", help="also run m = 1000 permutations at N = 10⁶ on one step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: on a shared, loaded machine two OpenMP threads make "
                         "small torch ops 1000× slower while they wait for each other)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ns = [int(float(n)) for n in args.ns.split(",")]
    if args.quick:
        ns = [n for n in ns if n <= 10_000]
        args.cap, args.peer_cap = min(args.cap, 5.0), min(args.peer_cap, 5.0)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    T, m = args.T, args.m
    rows, targets = [], {}
    for N in ns:
        z = np.abs(rng.normal(size=(T, N, 3)))
        row: dict[str, object] = {"N": N, **ours_cells(z, 3)}
        ext: list[str] = []
        for key, make, probe in (
                ("sampled_shapley", lambda k: SampledShapley(permutations=k), (4, 24) if N >= 10**5 else (10, 60)),
                ("sampled_banzhaf", lambda k: SampledBanzhaf(samples=k), (40, 200))):
            row[key], e = sampled_cell(z, make, m, args.cap, probe)
            if e:
                ext.append(key)
        if N <= 12:
            row["exact_shapley"] = timed(lambda z=z: attribute(HEAT, Panel(z), method=ExactShapley()), 3)
            row["exact_banzhaf"] = timed(lambda z=z: attribute(HEAT, Panel(z), method=ExactBanzhaf()), 3)
        if N <= 10_000:  # one Captum permutation at N = 10⁵ already takes minutes (O(N²) per permutation)
            row["captum_svs"], e = captum_cell(z, m, args.peer_cap)
            if e:
                ext.append("captum_svs")
        if N <= 1000:  # SHAP's per-evaluation overhead makes even one permutation pair take minutes beyond
            row["shap_permutation"], e = shap_cell(z, m, args.peer_cap)
            if e:
                ext.append("shap_permutation")
        row["extrapolated"] = ";".join(ext)
        row.update(references(z, rng))
        rows.append(row)
        print(f"N={N:>8}: " + ", ".join(f"{k}={v:.3g}" for k, v in row.items() if isinstance(v, float)), flush=True)
        if N == 10_000:  # equal N and m against Captum (one step, m = 10)
            zz = z[:1]
            ours10 = timed(lambda zz=zz: attribute(HEAT, Panel(zz), method=SampledShapley(permutations=10), rng=0), 3)
            cap10, e = captum_cell(zz, 10, max(args.peer_cap, 120.0))
            targets["captum_vs_ours_N1e4_m10"] = {"ours_s": ours10, "captum_s": cap10, "captum_extrapolated": e,
                                                  "speedup": cap10 / ours10}
        if N == max(ns):
            ref = row["perm_gather_cumsum"]
            per = permutation_cost(z)
            per_anti = permutation_cost(z, antithetic=True)
            targets["permutation_cost"] = {
                "N": N, "per_permutation_s": per, "per_permutation_antithetic_s": per_anti,
                "reference_permute_gather_cumsum_s": ref, "ratio": per / ref, "ratio_antithetic": per_anti / ref,
                "m1000_one_step_projected_s": per * 1000, "m1000_T_steps_projected_s": per * 1000 * T}
            targets["loo"] = {"N": N, "loo_s": row["loo"], "np_sum_panel_s": row["np_sum_panel"],
                              "ratio_vs_panel_sum": row["loo"] / row["np_sum_panel"],
                              "ratio_per_step": row["loo"] / T / row["np_sum_step"]}
            if args.big and N >= 10**6:
                t = timed(lambda z=z: attribute(HEAT, Panel(z[:1]), method=SampledShapley(permutations=1000), rng=0))
                targets["sampled_shapley_m1000_N1e6_one_step_measured_s"] = t
    cols = ["N", "ours_closed", "ours_path30", "loo", "sampled_shapley", "sampled_banzhaf", "exact_shapley",
            "exact_banzhaf", "captum_svs", "shap_permutation", "extrapolated", "np_sum_panel", "perm_gather_cumsum"]
    with open(args.out / "wallclock.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (args.out / "targets.json").write_text(json.dumps(targets, indent=2))
    print(f"\nWall-clock seconds, f_heat, T = {T}, D = 3, m = {m}, torch threads = {args.threads} "
          "(* extrapolated from a shorter run)\n")
    print("| " + " | ".join(cols[:10]) + " |")
    print("|" + "---|" * 10)
    for r in rows:
        ext = str(r["extrapolated"]).split(";")
        cells = [str(r["N"])]
        for c in cols[1:10]:
            v = r.get(c)
            cells.append("infeasible" if v is None and c.startswith("exact") else "—" if v is None
                         else f"{v:.2g}{'*' if c in ext else ''}")
        print("| " + " | ".join(cells) + " |")
    print("\nTargets:", json.dumps(targets, indent=2))
    plot(rows, args.out / "runtime.png", T, m)


def plot(rows: list[dict], path: Path, T: int, m: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    labels = {"ours_closed": "ours (closed form)", "ours_path30": "ours (path, K=30)", "loo": "leave-one-out",
              "sampled_shapley": f"sampled Shapley (m={m})", "sampled_banzhaf": f"sampled Banzhaf (m={m})",
              "exact_shapley": "exact Shapley", "captum_svs": "Captum SVS", "shap_permutation": "SHAP permutation"}
    for key, label in labels.items():
        pts = [(r["N"], r[key], key in str(r["extrapolated"]).split(";")) for r in rows if r.get(key) is not None]
        if not pts:
            continue
        xs, ys, ex = zip(*pts)
        line, = ax.loglog(xs, ys, "-", label=label)
        ax.scatter([x for x, e in zip(xs, ex) if not e], [y for y, e in zip(ys, ex) if not e], color=line.get_color())
        ax.scatter([x for x, e in zip(xs, ex) if e], [y for y, e in zip(ys, ex) if e], facecolors="none",
                   edgecolors=line.get_color())
    ax.set_xlabel("agents N")
    ax.set_ylabel("wall-clock seconds")
    ax.set_title(f"f_heat, T={T} (hollow: extrapolated)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


if __name__ == "__main__":
    main()
