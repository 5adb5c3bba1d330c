"""Sampled Shapley with the Aumann–Shapley control variate against plain sampling (issue 25).

    python benchmarks/bench_cv.py                          # variance, midscale, cascade, weak, big (≈ 10 min)
    python benchmarks/bench_cv.py --only variance,weak     # some sections
    python benchmarks/bench_cv.py --only resimulation      # the re-simulation game (long: ≈ 30 min)

Every number is a ratio against plain :class:`~aumann.attribution.SampledShapley` run in the same
process on the same game (same permutation count, same seed), with the load average printed before and
after each section (the machine is shared; seconds are pessimistic, ratios much less so).

Sections:

* ``variance`` — variance per permutation, plain / CV (se² ratio at the same m; median and 10 % quantile
  over agents) on heat, var, lin at N = 10⁴ (T = 1, zero baseline), without and with antithetic pairs,
  and the time per permutation (the control's cost). lin's marginals do not depend on the coalition
  (δ_i/N whatever S), so both estimators are exact there: plain's variance is 0 and the ratio is undefined.
* ``midscale`` — MidScale-Social's study indicator (propagation risk, pooled) on the masking game at t*
  with the study's per-agent baselines (N = 1000).
* ``cascade`` — MegaScale-Social's network cascade indicator on the masking game at t* (N = 10⁴).
* ``weak`` — where the control is weak: kinks (gini; MidScale's original, non-smooth indicator) and a
  steep sigmoid threshold, and what the fallback to β = 0 costs.
* ``big`` — the stderr that plain m = 1000 reaches on 10⁶ × 14 heat: plain is run with ``--big-m``
  permutations per step and its per-agent standard errors are extrapolated to m = 1000 by se ∝ 1/√m
  (its seconds linearly in m); the CV is run with as few permutations as its pilot needs and must reach,
  on every step, a largest standard error no bigger than plain's extrapolated largest at m = 1000.
* ``reference`` — the study's ``τ vs Shapley`` reference: plain m = 1000 against the CV at m = 1000,
  100 and 16 on MidScale-Social's masking game at t* (noise ceilings, standard errors, seconds).
* ``resimulation`` — MidScale-Social N = 200, the re-simulation game (every coalition a fork): Kendall
  τ against a long plain-sampling reference, the noise ceiling τ(reference A, reference B), and the
  forks the plain estimator needs for the CV's τ (interpolated along plain's τ-vs-forks curve), for the
  first-order control and for the step-map control.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from _env import header, set_threads

RESULTS: dict[str, Any] = {}


def _ratio_stats(plain_se: np.ndarray, cv_se: np.ndarray) -> dict[str, float]:
    ok = plain_se > 0
    r = (plain_se[ok] / np.maximum(cv_se[ok], 1e-300)) ** 2
    if not r.size:
        return {"median": float("nan"), "q10": float("nan"), "agents": 0}
    return {"median": float(np.median(r)), "q10": float(np.quantile(r, 0.1)), "q90": float(np.quantile(r, 0.9)),
            "agents": int(r.size)}


def _compare(label: str, f: Any, panel: Any, m: int, baseline: Any = "zero", antithetic: bool = False,
             **kw: Any) -> dict[str, Any]:
    from aumann.attribution import SampledShapley, SampledShapleyCV, attribute

    for method in (SampledShapley, SampledShapleyCV):  # warm-up: imports and first-call costs are not timed
        attribute(f, panel, method=method(permutations=4, antithetic=False, **kw), baseline=baseline, rng=0)
    t0 = time.perf_counter()
    plain = attribute(f, panel, method=SampledShapley(permutations=m, antithetic=antithetic, **kw),
                      baseline=baseline, rng=1)
    tp = time.perf_counter() - t0
    t0 = time.perf_counter()
    cv = attribute(f, panel, method=SampledShapleyCV(permutations=m, antithetic=antithetic, **kw),
                   baseline=baseline, rng=1)
    tc = time.perf_counter() - t0
    info = cv.provenance["per_step"]
    stats = _ratio_stats(plain.stderr.ravel(), cv.stderr.ravel())
    exact = bool(np.all(plain.stderr <= 1e-12 * np.maximum(1e-300, np.abs(plain.phi).max())))
    row = {"case": label, "m": m, "antithetic": antithetic, "variance_ratio_median": stats["median"],
           "variance_ratio_q10": stats["q10"], "time_ratio_cv_over_plain": tc / max(tp, 1e-9),
           "plain_seconds": tp, "cv_seconds": tc, "control": info.get("control"),
           "beta_nonzero": info.get("beta_nonzero"), "plain_exact": exact,
           "max_relative_efficiency_gap": float(cv.relative_efficiency_gap.max())}
    shown = "both exact (plain variance 0)" if exact else (f"variance ×{stats['median']:,.1f} (median), "
                                                            f"×{stats['q10']:,.1f} (10% of agents below)")
    print(f"  {label:<44} m={m:<5}{' anti' if antithetic else '     '} {shown}; time CV/plain "
          f"{tc / max(tp, 1e-9):.2f} ({tp:.2f} s plain); control {info.get('control')}, "
          f"β≠0 for {info.get('beta_nonzero', 0):.0%}", flush=True)
    return row


def section_variance(args: argparse.Namespace) -> list[dict[str, Any]]:
    from aumann.attribution import Panel

    header("variance per permutation at N = 10⁴ (heat, var, lin; zero baseline)")
    z = np.abs(np.random.default_rng(0).normal(size=(1, args.n, 3))) + 0.05
    panel = Panel(z)
    rows = [_compare(f"{name} N={args.n:,}", name, panel, args.m, antithetic=anti)
            for name in ("heat", "var", "lin") for anti in (False, True)]
    header("after")
    return rows


def _study_step(name: str, agents: int, steps: int) -> dict[str, Any]:
    """A run of a scenario and its study's t*, per-agent baseline and one-step panel."""
    from aumann import scenarios
    from aumann.scenarios.base import target_step
    from aumann.simulators import indicator_values

    sc = scenarios.get(name)
    cfg = sc.load_config(agents=agents, steps=steps)
    run = sc.simulate(cfg, rng=0, keep_from=0)
    f, f_orig = sc.indicators(cfg)
    panel = run.panel
    ts = target_step(indicator_values(f, panel))
    z0_all = sc.baselines(run, cfg, agent_ids=panel.agent_ids)
    z0 = np.ascontiguousarray(z0_all[ts] if z0_all.ndim == 3 else z0_all, dtype=np.float64)
    return {"scenario": sc, "config": cfg, "run": run, "f": f, "f_original": f_orig, "t": ts, "z0": z0,
            "panel": panel.select_steps([ts])}


def section_midscale(args: argparse.Namespace) -> list[dict[str, Any]]:
    header("MidScale-Social study indicator (masking game at t*, study baselines, N = 1000)")
    s = _study_step("midscale-social", 1000, 30)
    rows = [_compare("midscale propagation_risk (study)", s["f"], s["panel"], args.m, baseline=s["z0"],
                     antithetic=anti) for anti in (False, True)]
    header("after")
    return rows


def section_cascade(args: argparse.Namespace) -> list[dict[str, Any]]:
    from aumann.scenarios.megascale_social.indicators import cascade_indicator

    header(f"MegaScale-Social network cascade indicator (masking game at t*, N = {args.cascade_n:,})")
    s = _study_step("megascale-social", args.cascade_n, 12)
    fc = cascade_indicator(s["run"].model.world, s["config"])
    rows = [_compare(f"megascale cascade_pressure N={args.cascade_n:,}", fc, s["panel"], args.m, baseline=s["z0"],
                     antithetic=anti) for anti in (False, True)]
    rows.append(_compare(f"megascale propagation_risk N={args.cascade_n:,}", s["f"], s["panel"], args.m,
                         baseline=s["z0"]))
    header("after")
    return rows


def section_weak(args: argparse.Namespace) -> list[dict[str, Any]]:
    import torch

    from aumann.attribution import AgentwiseIndicator, Panel

    header("where the control is weak: kinks and thresholds")
    rng = np.random.default_rng(1)
    z = np.abs(rng.normal(size=(1, 2000, 3))) + 0.05
    panel = Panel(z)
    small = Panel(z[:, :500])
    base = np.abs(rng.normal(size=(500, 3)))  # a per-agent baseline: gini's path is no longer a ray
    rows = [_compare("gini N=500 zero baseline (homogeneous)", "gini", small, 32),
            _compare("gini N=500 per-agent baseline", "gini", small, 32, baseline=base)]
    for k in (4.0, 40.0, 400.0):
        thr = AgentwiseIndicator(lambda x: x.mean(-1, keepdim=True) / x.shape[-2],
                                 rho=lambda s, k=k: torch.sigmoid(k * (s[..., 0] - 0.45)), name=f"sigmoid{k:g}")
        rows.append(_compare(f"sigmoid(k(mean−θ)) k={k:g} N=2,000", thr, panel, args.m))
    s = _study_step("midscale-social", 300, 30)
    rows.append(_compare("midscale original (non-smooth) N=300", s["f_original"], s["panel"], 24, baseline=s["z0"]))
    header("after")
    return rows


def section_big(args: argparse.Namespace) -> dict[str, Any]:
    from aumann.attribution import Panel, SampledShapley, SampledShapleyCV, attribute

    header(f"time to plain m=1000's stderr on {args.big_n:,} × {args.big_t} heat")
    z = np.abs(np.random.default_rng(0).normal(size=(args.big_t, args.big_n, 3)))
    panel = Panel(z)
    t0 = time.perf_counter()
    plain = attribute("heat", panel, method=SampledShapley(permutations=args.big_m), rng=0)
    tp = time.perf_counter() - t0
    se1000 = plain.stderr * np.sqrt(args.big_m / 1000.0)  # se ∝ 1/√m
    target = se1000.max(axis=1)  # per step: plain's largest standard error at m = 1000
    tp1000 = tp * 1000.0 / args.big_m
    print(f"  plain m={args.big_m}: {tp:.1f} s → m=1000 projected {tp1000:.0f} s (issue: 6,663 s measured)", flush=True)
    t0 = time.perf_counter()
    cv = attribute("heat", panel, method=SampledShapleyCV(permutations=args.big_cv_m), rng=0)
    tc = time.perf_counter() - t0
    reached = cv.stderr.max(axis=1) <= target
    share = float(np.mean(cv.stderr <= se1000))
    print(f"  CV m={args.big_cv_m}: {tc:.1f} s; reaches plain m=1000's largest stderr on {int(reached.sum())}/"
          f"{args.big_t} steps (CV/plain largest se {np.max(cv.stderr.max(axis=1) / target):.3g}); "
          f"{share:.1%} of agents below their own plain m=1000 se; ≤ 300 s: {tc <= 300}; "
          f"{tp1000 / tc:.0f}× faster than plain projected", flush=True)
    header("after")
    return {"n": args.big_n, "t": args.big_t, "plain_m": args.big_m, "plain_seconds": tp,
            "plain_m1000_projected_seconds": tp1000, "cv_m": args.big_cv_m, "cv_seconds": tc,
            "steps_reached": int(reached.sum()), "agents_below_own_plain_se": share,
            "largest_se_ratio": float(np.max(cv.stderr.max(axis=1) / target)),
            "variance_reduction": cv.provenance["per_step"].get("variance_reduction")}


def section_resimulation(args: argparse.Namespace) -> dict[str, Any]:
    from aumann.attribution import SampledShapley
    from aumann.attribution.metrics import kendall_tau
    from aumann.evaluation import DeletionOracle, resimulation_game, resimulation_shapley_cv

    header(f"re-simulation game, MidScale-Social N = {args.resim_n}")
    s = _study_step("midscale-social", args.resim_n, 30)
    sc, cfg, mb = s["scenario"], s["config"], s["run"].before(s["t"])
    n = args.resim_n
    oracle = DeletionOracle(sc, cfg, mb, s["f"], s["f_original"])
    game = resimulation_game(oracle, n)

    def plain(m: int, seed: int) -> np.ndarray:
        return SampledShapley(permutations=m).attribute_game(game, rng=seed).phi[0]

    t0 = time.perf_counter()
    ref_a, ref_b = plain(args.resim_ref, 101), plain(args.resim_ref, 202)
    ceiling = float(kendall_tau(ref_a, ref_b))
    print(f"  references: 2 × m={args.resim_ref} ({2 * (args.resim_ref * (n - 1) + 2):,} forks, "
          f"{time.perf_counter() - t0:.0f} s); noise ceiling τ(A, B) = {ceiling:.3f}", flush=True)
    curve = []
    for m in args.resim_ms:
        taus = [float(kendall_tau(plain(m, 10 + r), ref_a)) for r in range(args.resim_reps)]
        curve.append({"m": m, "forks": m * (n - 1) + 2, "tau": float(np.mean(taus))})
        print(f"  plain m={m:<4} forks {m * (n - 1) + 2:>7,}  τ vs A {np.mean(taus):.3f}", flush=True)
    forks = np.array([c["forks"] for c in curve], dtype=float)
    taus = np.array([c["tau"] for c in curve])

    def plain_forks_for(tau: float) -> float:
        """Forks plain needs for τ (log-linear interpolation along its curve; beyond it: extrapolated ≥)."""
        if tau <= taus[0]:
            return float(forks[0])
        if tau > taus[-1]:
            return float("inf")
        return float(np.exp(np.interp(tau, np.maximum.accumulate(taus), np.log(forks))))

    out: dict[str, Any] = {"n": n, "ceiling": ceiling, "reference_m": args.resim_ref, "plain": curve, "cv": []}
    variants = [("aumann-shapley", m, None) for m in args.resim_ms[:3]] + [("step-map", args.resim_map_forks_m,
                                                                             args.resim_map_m)]
    for control, m, mm in variants:
        t0 = time.perf_counter()
        taus_cv, forks_cv = [], []
        for r in range(args.resim_reps):
            est = resimulation_shapley_cv(sc, mb, cfg, permutations=m, control=control, map_permutations=mm,
                                          rng=10 + r, oracle=oracle)
            forks_cv.append(int(est.provenance["forks"]))
            taus_cv.append(float(kendall_tau(est.phi[0], ref_a)))
        tau = float(np.mean(taus_cv))
        need = plain_forks_for(tau)
        if not np.isfinite(need):  # beyond plain's curve: at least its last point, and beyond a reference's
            need = float(forks[-1]) if tau <= ceiling else float(args.resim_ref * (n - 1) + 2)  # own τ(A, B)
        row = {"control": control, "m": m, "map_permutations": mm, "forks": int(np.mean(forks_cv)), "tau": tau,
               "within_0.05_of_ceiling": tau >= ceiling - 0.05, "plain_forks_for_same_tau": need,
               "fork_ratio_at_most": float(np.mean(forks_cv)) / need, "plain_need_is_lower_bound": tau > taus[-1],
               "seconds_per_run": (time.perf_counter() - t0) / args.resim_reps}
        out["cv"].append(row)
        print(f"  CV {control:<15} m={m:<4} forks {row['forks']:>7,}  τ vs A {tau:.3f} (ceiling − 0.05 = "
              f"{ceiling - 0.05:.3f}: {'yes' if row['within_0.05_of_ceiling'] else 'no'}); plain needs "
              f"{'>' if row['plain_need_is_lower_bound'] else ''}{need:,.0f} forks for that τ → fork ratio "
              f"{'<' if row['plain_need_is_lower_bound'] else ''}{row['fork_ratio_at_most']:.3f}; "
              f"{row['seconds_per_run']:.0f} s/run", flush=True)
    header("after")
    return out


def section_reference(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The study's reference row (``τ vs Shapley``): plain m = 1000 against the CV at m = 1000 and fewer,
    on MidScale-Social's masking game at t* (N = 1000): noise ceilings τ(seed A, seed B), standard errors,
    seconds, and the τ of the Aumann–Shapley row against each reference."""
    from aumann.attribution import AumannShapley, SampledShapley, SampledShapleyCV, attribute
    from aumann.attribution.metrics import kendall_tau

    header("the study's reference: plain vs CV on MidScale-Social's masking game (N = 1000)")
    s = _study_step("midscale-social", 1000, 30)
    ours = attribute(s["f"], s["panel"], method=AumannShapley(steps=32, closed_form=False), baseline=s["z0"]).phi[0]
    rows = []
    for label, make, m in (("plain", SampledShapley, 1000), ("cv", SampledShapleyCV, 1000),
                           ("cv", SampledShapleyCV, 100), ("cv", SampledShapleyCV, 16)):
        t0 = time.perf_counter()
        a = attribute(s["f"], s["panel"], method=make(permutations=m), baseline=s["z0"], rng=11)
        sec = time.perf_counter() - t0
        b = attribute(s["f"], s["panel"], method=make(permutations=m), baseline=s["z0"], rng=22)
        row = {"estimator": label, "m": m, "seconds": sec, "median_stderr": float(np.median(a.stderr)),
               "ceiling_tau": float(kendall_tau(a.phi[0], b.phi[0])), "tau_aumann_shapley": float(
                   kendall_tau(ours, a.phi[0]))}
        rows.append(row)
        print(f"  {label:<5} m={m:<5} {sec:7.2f} s  median se {row['median_stderr']:.3e}  ceiling τ(A,B) "
              f"{row['ceiling_tau']:.4f}  τ(aumann_shapley, ref) {row['tau_aumann_shapley']:.4f}", flush=True)
    header("after")
    return rows


SECTIONS = {"variance": section_variance, "midscale": section_midscale, "cascade": section_cascade,
            "weak": section_weak, "big": section_big, "resimulation": section_resimulation,
            "reference": section_reference}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="variance,midscale,cascade,weak,big,reference",
                    help=f"comma-separated sections of {sorted(SECTIONS)}")
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--m", type=int, default=64, help="permutations of the variance comparisons")
    ap.add_argument("--cascade-n", type=int, default=10_000)
    ap.add_argument("--big-n", type=int, default=1_000_000)
    ap.add_argument("--big-t", type=int, default=14)
    ap.add_argument("--big-m", type=int, default=4, help="plain permutations per step (extrapolated to 1000)")
    ap.add_argument("--big-cv-m", type=int, default=8, help="CV permutations per step")
    ap.add_argument("--resim-n", type=int, default=200)
    ap.add_argument("--resim-ref", type=int, default=300, help="permutations of each plain reference")
    ap.add_argument("--resim-ms", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16, 32, 64, 128])
    ap.add_argument("--resim-reps", type=int, default=2)
    ap.add_argument("--resim-map-forks-m", type=int, default=4)
    ap.add_argument("--resim-map-m", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    set_threads(args.threads)
    env = header("bench_cv: SampledShapleyCV vs SampledShapley (ratios from one run)")
    RESULTS["env"] = env
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        if name not in SECTIONS:
            raise SystemExit(f"unknown section {name!r}; choose from {sorted(SECTIONS)}")
        RESULTS[name] = SECTIONS[name](args)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_cv.json").write_text(json.dumps(RESULTS, indent=2, default=float))


if __name__ == "__main__":
    main()
