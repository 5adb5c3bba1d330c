"""Engine benchmarks (issues 2 and 15). Run on demand: ``python benchmarks/bench_engine.py [--quick] [--threads 1]``.

Every number is reported as a ratio against a reference measured in the same run, next to the load
average and the thread settings (the first line of the output; again at the end):

1. closed-form f_heat (T = 14) at N = 10 … 10⁶, on a 1,671,587 × 14 panel and at N = 10⁶, T = 1 (f_lin too
   at N = 10⁶, T = 14 and T = 1),
   ``attribute(heat, panel)`` on a prebuilt Panel — everything it does counted (output allocation,
   Σφ for the efficiency gap and the finiteness check, provenance) — against one ``np.sum`` pass
   over the same array, the two timed alternately (target ≤ 3×);
2. the fixed cost of an ``attribute()`` call at N ≤ 10³ (target ≤ 0.05 ms), in CPU time of this
   thread (wall time on a shared machine mostly measures the neighbours) and as a multiple of one
   ``np.sum`` call on the same small array;
3. the path integral (K = 30, Gauss–Legendre) at N = 10⁶ on f_heat through the generic autograd
   integrator, against Captum ``IntegratedGradients`` on the same f, K and input, and against a plain
   torch loop (targets: ≥ 5× faster than Captum, ≤ 1× the plain loop, ≤ 0.5 GB peak); each measured
   in a fresh subprocess so peak RSS is its own;
4. Table K-convergence: relative L¹ error and time vs K at N = 10⁴, midpoint and Gauss–Legendre.
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
from _env import header, set_threads


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


def _alternating(fn, ref, repeats: int) -> tuple[float, float, float, float]:
    """Best-of-``repeats`` wall and CPU seconds of ``fn`` and ``ref``, timed alternately (both see the
    same neighbours). CPU time (all threads of this process) leaves out the time the process waited
    for a core, which on a shared machine is most of the wall time of a short call."""
    best_f = best_r = cpu_f = cpu_r = float("inf")
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        ref()
        best_r, cpu_r = min(best_r, time.perf_counter() - t), min(cpu_r, time.process_time() - c)
        t, c = time.perf_counter(), time.process_time()
        fn()
        best_f, cpu_f = min(best_f, time.perf_counter() - t), min(cpu_f, time.process_time() - c)
    return best_f, best_r, cpu_f, cpu_r


def closed_form_table(sizes: list[int], repeats: int) -> list[dict]:
    """Closed-form heat vs one np.sum pass, with the compiled kernels and without (``AUMANN_NUMBA=0``:
    the numpy/BLAS path), each timed alternately with its own np.sum reference."""
    from aumann.attribution import Panel, attribute, indicators, jit

    variants = ["numba", "numpy"] if jit.kernels() is not None else ["numpy"]
    big = max(sizes)
    rows = []
    for n, t, name in ([(n, 14, "heat") for n in sizes] + [(1_671_587, 14, "heat"), (big, 1, "heat"),
                                                            (big, 14, "lin"), (big, 1, "lin")]):
        f = indicators.get(name)
        z = _features(n, t)
        panel = Panel(z)
        for variant in variants:
            os.environ["AUMANN_NUMBA"] = "1" if variant == "numba" else "0"
            attribute(f, panel)  # compile / warm up outside the timing
            ours, ref, ours_cpu, ref_cpu = _alternating(lambda panel=panel, f=f: attribute(f, panel),
                                                        lambda z=z: np.sum(z), repeats)
            rows.append({"indicator": name, "N": n, "T": t, "kernels": variant, "closed_form_s": ours, "np_sum_s": ref,
                         "ratio": ours / ref, "closed_form_cpu_s": ours_cpu, "np_sum_cpu_s": ref_cpu,
                         "cpu_ratio": ours_cpu / ref_cpu, "load": os.getloadavg()[0]})
            print(f"  closed-form {name} N={n:>9,} T={t:>2} [{variant}]: {ours * 1e3:9.3f} ms  "
                  f"np.sum {ref * 1e3:8.3f} ms"
                  f"  ratio {ours / ref:5.2f} (target ≤ 3); CPU {ours_cpu * 1e3:8.2f} / {ref_cpu * 1e3:7.2f} ms, "
                  f"ratio {ours_cpu / ref_cpu:5.2f}  load {os.getloadavg()[0]:.2f}", flush=True)
        os.environ.pop("AUMANN_NUMBA", None)
        del z, panel
    return rows


def overhead_table(repeats: int) -> list[dict]:
    """Fixed cost per call at small N: CPU time of this thread, best of many batches of calls."""
    from aumann.attribution import Panel, attribute, indicators

    def per_call(fn, calls: int = 200) -> float:
        best = float("inf")
        for _ in range(repeats * 8):
            t = time.thread_time()
            for _ in range(calls):
                fn()
            best = min(best, (time.thread_time() - t) / calls)
        return best

    rows = []
    for name in ("heat", "lin"):
        f = indicators.get(name)
        for n in (10, 100, 1000):
            panel = Panel(_features(n, 1))
            z = panel.values
            attribute(f, panel)
            ours, ref = per_call(lambda f=f, panel=panel: attribute(f, panel)), per_call(lambda z=z: np.sum(z))
            rows.append({"indicator": name, "N": n, "cpu_us_per_call": ours * 1e6, "np_sum_us": ref * 1e6,
                         "ratio": ours / ref, "load": os.getloadavg()[0]})
            print(f"  attribute({name}) N={n:>5}: {ours * 1e6:7.1f} µs per call (CPU; target ≤ 50)  "
                  f"= {ours / ref:5.1f}× one np.sum call ({ref * 1e6:.2f} µs)  load {os.getloadavg()[0]:.2f}",
                  flush=True)
    return rows


# ---------------------------------------------------------------------- path integral, one per subprocess
def _one_path(kind: str, n: int, k: int) -> dict:
    import torch

    from aumann.attribution import AumannShapley, Panel, attribute, indicators

    if os.environ.get("AUMANN_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["AUMANN_BENCH_THREADS"]))
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
            "max_abs_err_vs_closed": float(np.abs(phi - closed).max()), "torch_threads": torch.get_num_threads(),
            "load": os.getloadavg()[0]}


def path_table(n: int, k: int) -> list[dict]:
    import importlib.util

    rows = []
    for kind in ("ours", "ours_pooled", "plain", "captum"):
        if kind == "captum" and importlib.util.find_spec("captum") is None:
            print("  path: Captum is not installed (pip install -c constraints.txt -e '.[bench]'); its row is skipped",
                  flush=True)
            rows.append({"kind": kind, "error": "captum not installed"})
            continue
        out = subprocess.run([sys.executable, __file__, "--one", kind, "--n", str(n), "--k", str(k)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            rows.append({"kind": kind, "error": out.stderr[-300:]})
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"  path K={k} N={n:,} {kind:>11}: {row['seconds']:.3f} s  peak +{row['peak_extra_bytes'] / 2**30:.2f} GB"
              f"  max|φ−closed| {row['max_abs_err_vs_closed']:.1e}  load {row['load']:.2f}", flush=True)
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
    ap.add_argument("--only", choices=("closed", "overhead", "path", "kconv"), action="append",
                    help="run only these parts (repeatable)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's); 1 avoids OpenMP wake-up costs on a busy box")
    args = ap.parse_args()
    set_threads(args.threads)
    if args.one:
        print(json.dumps(_one_path(args.one, args.n, args.k)))
        return
    parts = set(args.only or ("closed", "overhead", "path", "kconv"))
    env = header("bench_engine")
    repeats = 3 if args.quick else 7
    sizes = [10, 100, 1000, 10_000, 100_000] + ([] if args.quick else [1_000_000])
    results: dict = {"env_before": env}
    if "closed" in parts:
        print("1. closed-form f_heat (and f_lin at the largest N) vs one np.sum pass over the same (T, N, 3) array")
        results["closed_form"] = closed_form_table(sizes, repeats)
    if "overhead" in parts:
        print("2. fixed cost of attribute() at small N (closed form)")
        results["overhead"] = overhead_table(repeats)
    if "path" in parts:
        print(f"3. path integral K={args.k} on f_heat, N={args.n:,}: ours vs plain torch loop vs Captum IG")
        path = results["path"] = path_table(args.n, args.k)
        times = {r["kind"]: r.get("seconds") for r in path}
        if times.get("ours") and times.get("plain"):
            print(f"  ours / plain = {times['ours'] / times['plain']:.2f} (target ≤ 1)", end="")
            if times.get("captum") and times.get("ours_pooled"):
                print(f";  captum / ours = {times['captum'] / times['ours']:.1f} (target ≥ 5);"
                      f"  captum / ours_pooled = {times['captum'] / times['ours_pooled']:.0f}", end="")
            print()
    if "kconv" in parts:
        print("4. Table K-convergence (N = 10^4, f_heat)")
        results["k_convergence"] = k_convergence(10_000, [5, 10, 20, 30, 50, 100, 300], repeats)
    results["env_after"] = header("bench_engine done")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_engine.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
