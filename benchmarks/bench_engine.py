"""Engine benchmarks (issue 2). Run on demand: ``python benchmarks/bench_engine.py [--quick]``.

Every number is reported as a ratio against a reference measured in the same run:

1. closed-form f_heat (T = 14) at N = 10 … 10⁶ and on a 1,671,587 × 14 panel, against one
   ``np.sum`` pass over the same array (target ≤ 5×);
2. the path integral (K = 30, Gauss–Legendre) at N = 10⁶ on f_heat, against Captum
   ``IntegratedGradients`` on the same f, K and input, and against a plain batched torch loop
   (targets: ≥ 5× faster than Captum, ≤ 1.5× the plain loop, ≤ 0.5 GB peak); each measured in a
   fresh subprocess so peak RSS is its own;
3. Table K-convergence: relative L¹ error and time vs K at N = 10⁴, midpoint and Gauss–Legendre.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_bytes() -> int:
    """This process's high-water RSS (VmHWM; unlike ru_maxrss it is not inherited across exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _features(n: int, t: int, seed: int = 0) -> np.ndarray:
    return np.abs(np.random.default_rng(seed).normal(size=(t, n, 3)))


def closed_form_table(sizes: list[int], repeats: int) -> list[dict]:
    from aumann.attribution import Panel, attribute, indicators

    f = indicators.get("heat")
    rows = []
    for n, t in [(n, 14) for n in sizes] + [(1_671_587, 14)]:
        z = _features(n, t)
        panel = Panel(z)
        ref = _best(lambda z=z: np.sum(z), repeats)
        ours = _best(lambda panel=panel: attribute(f, panel), repeats)
        rows.append({"N": n, "T": t, "closed_form_s": ours, "np_sum_s": ref, "ratio": ours / ref})
        print(f"  closed-form heat N={n:>9,} T={t}: {ours * 1e3:9.3f} ms  np.sum {ref * 1e3:8.3f} ms  "
              f"ratio {ours / ref:5.2f}", flush=True)
        del z, panel
    return rows


# ---------------------------------------------------------------------- path integral, one per subprocess
def _one_path(kind: str, n: int, k: int) -> dict:
    import torch

    from aumann.attribution import AumannShapley, Panel, attribute, indicators

    torch.set_num_threads(int(os.environ.get("AUMANN_BENCH_THREADS", 0)) or max(1, os.cpu_count() or 1))
    z = _features(n, 1)[0]
    f = indicators.get("heat")
    x = torch.as_tensor(z)
    nodes, weights = np.polynomial.legendre.leggauss(k)
    nodes, weights = (nodes + 1) / 2, weights / 2

    def ours():  # the generic autograd integrator, the like-for-like comparison with Captum
        method = AumannShapley(steps=k, closed_form=False, pooled_fast_path=False)
        return attribute(f, Panel(z), method=method).phi[0]

    def ours_pooled():  # heat declares a linear-ψ pooled form: integrate along the path of the means
        return attribute(f, Panel(z), method=AumannShapley(steps=k, closed_form=False)).phi[0]

    def plain():
        g = torch.zeros_like(x)
        for tau, w in zip(nodes, weights, strict=True):
            zz = (x * float(tau)).requires_grad_(True)
            (gr,) = torch.autograd.grad(f(zz), zz)
            g.add_(gr, alpha=float(w))
        return (x * g).sum(-1).numpy()

    def captum():
        from captum.attr import IntegratedGradients

        ig = IntegratedGradients(lambda inp: f(inp))
        a = ig.attribute(x[None], baselines=torch.zeros_like(x)[None], n_steps=k, method="gausslegendre")
        return a[0].sum(-1).detach().numpy()

    fn = {"ours": ours, "ours_pooled": ours_pooled, "plain": plain, "captum": captum}[kind]
    rss0 = _rss_bytes()
    t = time.perf_counter()
    phi = fn()
    seconds = time.perf_counter() - t
    peak = _peak_bytes() - rss0
    t = time.perf_counter()
    fn()
    seconds = min(seconds, time.perf_counter() - t)
    closed = attribute(f, Panel(z)).phi[0]
    return {"kind": kind, "N": n, "K": k, "seconds": seconds, "peak_extra_bytes": max(peak, 0),
            "max_abs_err_vs_closed": float(np.abs(phi - closed).max())}


def path_table(n: int, k: int) -> list[dict]:
    rows = []
    for kind in ("ours", "ours_pooled", "plain", "captum"):
        out = subprocess.run([sys.executable, __file__, "--one", kind, "--n", str(n), "--k", str(k)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            rows.append({"kind": kind, "error": out.stderr[-300:]})
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"  path K={k} N={n:,} {kind:>11}: {row['seconds']:.3f} s  peak +{row['peak_extra_bytes'] / 2**30:.2f} GB"
              f"  max|φ−closed| {row['max_abs_err_vs_closed']:.1e}", flush=True)
    return rows


def k_convergence(n: int, ks: list[int], repeats: int) -> list[dict]:
    from aumann.attribution import AumannShapley, Panel, attribute, indicators

    f = indicators.get("heat")
    panel = Panel(_features(n, 1))
    exact = attribute(f, panel).phi
    rows = []
    for rule in ("midpoint", "gauss-legendre"):
        for k in ks:
            # the generic autograd integrator (heat's pooled fast path would make K almost free)
            m = AumannShapley(steps=k, rule=rule, closed_form=False, pooled_fast_path=False)
            res = attribute(f, panel, method=m)
            sec = _best(lambda m=m: attribute(f, panel, method=m), repeats)
            err = float(np.abs(res.phi - exact).sum() / np.abs(exact).sum())
            rows.append({"rule": rule, "K": k, "rel_l1_error": err, "seconds": sec,
                         "rel_efficiency_gap": float(res.relative_efficiency_gap.max())})
            print(f"  {rule:>14} K={k:>4}: rel L1 error {err:.2e}  time {sec * 1e3:8.2f} ms", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    ap.add_argument("--out", type=Path, default=None, help="write results.json here")
    ap.add_argument("--one", choices=("ours", "ours_pooled", "plain", "captum"), help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's); 1 avoids OpenMP wake-up costs on a busy box")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
        os.environ["AUMANN_BENCH_THREADS"] = str(args.threads)
    if args.one:
        print(json.dumps(_one_path(args.one, args.n, args.k)))
        return
    repeats = 2 if args.quick else 5
    sizes = [10, 100, 1000, 10_000, 100_000] + ([] if args.quick else [1_000_000])
    print("1. closed-form f_heat vs one np.sum pass over the same (T, N, 3) array")
    closed = closed_form_table(sizes, repeats)
    print(f"2. path integral K={args.k} on f_heat, N={args.n:,}: ours vs plain torch loop vs Captum IG")
    path = path_table(args.n, args.k)
    times = {r["kind"]: r.get("seconds") for r in path}
    if all(times.values()):
        print(f"  ours / plain = {times['ours'] / times['plain']:.2f} (target ≤ 1.5);"
              f"  captum / ours = {times['captum'] / times['ours']:.1f} (target ≥ 5);"
              f"  captum / ours_pooled = {times['captum'] / times['ours_pooled']:.0f}")
    print("3. Table K-convergence (N = 10^4, f_heat)")
    kconv = k_convergence(10_000, [5, 10, 20, 30, 50, 100, 300], repeats)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_engine.json").write_text(
            json.dumps({"closed_form": closed, "path": path, "k_convergence": kconv}, indent=2))


if __name__ == "__main__":
    main()
