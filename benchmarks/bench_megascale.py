"""Benchmark: MegaScale-Social at 10⁴ … 10⁷ agents (offline policy, 2 cores), against its targets.

Sections (each in a fresh subprocess, so peak RSS is its own; wall, CPU = user + sys, peak RSS from
``/usr/bin/time -v`` when available, else from ``resource``):

* ``--scan`` — simulation only at N = 10⁴, 10⁵, 10⁶ (T steps): build + simulate time, decisions per
  step (mean, max), distinct backend requests. Targets: simulation ≤ 10 s at 10⁶; decisions per step
  ≤ 1,000 and flat from 10⁵ to 10⁶.
* ``--e2e`` — the command ``aumann run megascale-social --agents N --steps 30 --runs 1 --no-plots``
  (scenario defaults at that N) and its stage times from ``manifest.json``. Targets at 10⁶: ≤ 180 s
  (never above 300 s), ≤ 3 GB peak.
* The reference measured in the same run: one ``np.sum`` pass over a float32 (30, N, 6) array (the
  panel's size) — the ratio "end to end / one pass over the panel" is what to compare across machines.

The load average is printed before and after each section: on a shared machine, re-measure when it
is high (wall times there are mostly waiting; CPU time is the better guide).

Usage::

    python benchmarks/bench_megascale.py --scan
    python benchmarks/bench_megascale.py --e2e --agents 1000000
    python benchmarks/bench_megascale.py --e2e --agents 10000000 --extra --set=llm_ablation=false
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SIM = r"""
import json, sys, time, resource
import numpy as np
from aumann import scenarios
n, T = int(sys.argv[1]), int(sys.argv[2])
sc = scenarios.get("megascale-social")
cfg = sc.load_config(agents=n, steps=T)
t0 = time.perf_counter(); c0 = time.process_time()
from aumann.scenarios.megascale_social.model import MegaScaleSocial
m = MegaScaleSocial(cfg, rng=0)
t1 = time.perf_counter()
from aumann.simulators import simulate
panel = simulate(m, T, sc.make_recorder(cfg))
t2 = time.perf_counter(); c2 = time.process_time()
led = m.decider.ledger.as_dict()
per = led["decisions_per_step"]
print(json.dumps({"n": n, "steps": T, "build_s": t1 - t0, "simulate_s": t2 - t1, "total_s": t2 - t0,
                  "cpu_s": c2 - c0, "decisions_mean": float(np.mean(per)), "decisions_max": int(max(per)),
                  "decisions_per_step": per, "backend_requests": led["backend_requests"],
                  "edges": int(m.world.network.nnz), "panel_MiB": panel.values.nbytes / 2**20,
                  "peak_MiB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# `aumann run` in a subprocess, with every stage's CPU seconds recorded beside its wall seconds (the
# study's StageTimer is wrapped; on a shared machine CPU time is what the code costs, wall time mostly
# measures the neighbours)
_DRIVER = r"""
import atexit, json, os, sys, time
if os.environ.get("AUMANN_BENCH_SRC"):  # measure another checkout's code (e.g. the commit before a change)
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, os.environ["AUMANN_BENCH_SRC"])
import aumann.progress as P
cpu, state = {}, {"name": None, "t": 0.0, "last": None, "io": (0, 0, 0.0, 0.0)}
faults = {}  # per stage: major page faults and bytes read from the disk (the waits a wall >> CPU stage hides)
_TICK = os.sysconf("SC_CLK_TCK")
def _io():  # (major faults, bytes read, and the whole machine's iowait and steal seconds: /proc/stat)
    majflt = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[9])
    rb = next((int(x.split()[1]) for x in open("/proc/self/io") if x.startswith("read_bytes:")), 0)
    f = open("/proc/stat").readline().split()
    return majflt, rb, int(f[5]) / _TICK, int(f[8]) / _TICK
def _close():
    if state["name"] is not None:
        cpu[state["name"]] = cpu.get(state["name"], 0.0) + time.process_time() - state["t"]
        now, was = _io(), state["io"]
        acc = faults.setdefault(state["name"], [0, 0, 0.0, 0.0])
        for i in range(4):
            acc[i] += now[i] - was[i]
def _open(name):
    state["name"], state["t"], state["io"] = name, time.process_time(), _io()
def start(self, name, _orig=P.StageTimer.start):
    _close(); _open(name); _orig(self, name)
def stop(self, _orig=P.StageTimer.stop):  # stopped twice at the end: the second stop keeps the last stage's name
    _close(); state["last"], state["name"] = state["name"] or state["last"], None; _orig(self)
P.StageTimer.start, P.StageTimer.stop = start, stop
import aumann.studies.report as R
def write_outputs(*a, _orig=R.write_outputs, **k):  # the report, after every run: its own row in the table
    _close(); _open("(report: tables, manifest, pages)")
    try:
        return _orig(*a, **k)
    finally:
        _close(); state["last"], state["name"] = state["name"], None
R.write_outputs = write_outputs
import threading
rss_peak, rss_when, t_start = {}, {}, time.perf_counter()
def _sample():  # the resident set every 50 ms, kept per stage (outside a stage: "(after <the last one>)")
    page = os.sysconf("SC_PAGE_SIZE") / 2**20
    while True:
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * page
        key = state["name"] or (f"(after {state['last']})" if state["last"] else "(before the first stage)")
        if rss > rss_peak.get(key, 0.0):
            rss_peak[key], rss_when[key] = rss, time.perf_counter() - t_start
        time.sleep(0.05)
threading.Thread(target=_sample, daemon=True).start()
def _dump():
    _close()
    hwm = [int(line.split()[1]) / 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:")]
    with open(os.environ["AUMANN_BENCH_STAGE_CPU"], "w") as fh:
        json.dump({"cpu": cpu, "faults": faults, "rss_peak_MiB": rss_peak, "rss_peak_at_s": rss_when,
                   "vmhwm_MiB": hwm[0] if hwm else None}, fh)
atexit.register(_dump)
from aumann.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def _timed(cmd: list[str], env: dict | None = None) -> tuple[str, dict]:
    """Run ``cmd`` (under /usr/bin/time -v when present); (stdout, {wall_s, cpu_s, peak_MiB})."""
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    t0 = time.perf_counter()
    proc = subprocess.run(timer + cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        # the command's own error line first: its tail is /usr/bin/time's report and the (long) timed command
        own = [line for line in proc.stderr.splitlines() if line.startswith(("aumann:", "Traceback"))]
        sys.stderr.write(proc.stderr[-4000:] + "".join(f"\n{line}" for line in own) + "\n")
        shown = " ".join(c for c in cmd if "\n" not in c)  # without the timing wrapper's script
        raise SystemExit(f"command failed ({proc.returncode}): {shown}"
                         + (f"\n{own[-1]}" if own else ""))
    stats = {"wall_s": wall}
    err = proc.stderr
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    if m:
        stats["peak_MiB"] = int(m.group(1)) / 1024
    u = re.search(r"User time \(seconds\): ([\d.]+)", err)
    s = re.search(r"System time \(seconds\): ([\d.]+)", err)
    if u and s:
        stats["cpu_s"] = float(u.group(1)) + float(s.group(1))
    return proc.stdout, stats


def reference_pass(n: int) -> float:
    import numpy as np

    z = np.ones((30, n, 6), dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        z.sum(dtype=np.float64)
        best = min(best, time.perf_counter() - t)
    return best


def scan(sizes: list[int], steps: int) -> None:
    print(f"## decisions per step and simulation time (offline policy, T = {steps}); {_load()}")
    print("| N | build s | simulate s | CPU s | decisions/step mean | max | distinct requests | panel MiB | peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in sizes:
        out, st = _timed([sys.executable, "-c", _SIM, str(n), str(steps)])
        r = json.loads(out.strip().splitlines()[-1])
        print(f"| {n:,} | {r['build_s']:.1f} | {r['simulate_s']:.1f} | {st.get('cpu_s', r['cpu_s']):.1f} | "
              f"{r['decisions_mean']:.0f} | {r['decisions_max']} | {r['backend_requests']} | {r['panel_MiB']:.0f} | "
              f"{st.get('peak_MiB', r['peak_MiB']):.0f} |", flush=True)
    print(_load())


def e2e(n: int, extra: list[str], src: str | None = None) -> None:
    print(f"## end to end: aumann run megascale-social --agents {n} --steps 30 --runs 1 --no-plots "
          f"{' '.join(extra)}{f' (code: {src})' if src else ''}; {_load()}")
    ref = reference_pass(n)
    with tempfile.TemporaryDirectory() as tmp:
        cpu_file = Path(tmp) / "stage_cpu.json"
        cmd = [sys.executable, "-c", _DRIVER, "run", "megascale-social", "--agents", str(n), "--steps", "30",
               "--runs", "1", "--no-plots", "--out", str(Path(tmp) / "out"), *extra]
        env = {**os.environ, "AUMANN_BENCH_STAGE_CPU": str(cpu_file)}
        if src:
            env["AUMANN_BENCH_SRC"] = src
        _, st = _timed(cmd, env=env)
        man = json.loads((Path(tmp) / "out" / "manifest.json").read_text())
        stage = json.loads(cpu_file.read_text()) if cpu_file.exists() else {}
        run0 = Path(tmp) / "out" / "runs" / "run-000.json"
        rec = json.loads(run0.read_text()) if run0.exists() else {}
        stage_cpu, stage_rss = stage.get("cpu", {}), stage.get("rss_peak_MiB", {})
    print(f"wall {st['wall_s']:.1f} s (target 180 s, limit 300 s; ratio {st['wall_s'] / 180:.2f}), "
          f"CPU {st.get('cpu_s', float('nan')):.1f} s, peak {st.get('peak_MiB', float('nan')):.0f} MiB (target 3072)")
    sampled = max(stage_rss.values(), default=float("nan"))
    print(f"peak resident set: {st.get('peak_MiB', float('nan')):.0f} MiB (time -v), kernel high-water mark VmHWM "
          f"{stage.get('vmhwm_MiB') or float('nan'):.0f} MiB, largest 50 ms sample {sampled:.0f} MiB")
    print(f"reference: one np.sum pass over the (30, N, 6) float32 panel {ref * 1e3:.1f} ms → "
          f"end to end = {st['wall_s'] / ref:.0f} passes (wall), {st.get('cpu_s', float('nan')) / ref:.0f} (CPU)")
    print("| stage | wall s | CPU s | peak RSS in the stage, MiB | major faults | read from disk, MiB "
          "| machine iowait s | machine steal s |")
    print("|---|---|---|---|---|---|---|---|")
    stages = man.get("stage_seconds") or {}
    flt = stage.get("faults", {})
    nan4 = (float("nan"),) * 4
    for k, v in sorted(stages.items(), key=lambda kv: -kv[1]):
        mf, rb, iow, stl = flt.get(k, nan4)
        print(f"| {k} | {v:.1f} | {stage_cpu.get(k, float('nan')):.1f} | {stage_rss.get(k, float('nan')):.0f} | "
              f"{mf:,.0f} | {rb / 2**20:,.0f} | {iow:.1f} | {stl:.1f} |")
    for k in sorted(set(stage_rss) - set(stages)):
        at = stage.get("rss_peak_at_s", {}).get(k)
        mf, rb, iow, stl = flt.get(k, nan4)
        print(f"| {k} | – | {stage_cpu.get(k, float('nan')):.1f} | {stage_rss[k]:.0f}"
              f"{f' (at {at:.0f} s)' if at is not None else ''} | {mf:,.0f} | {rb / 2**20:,.0f} | {iow:.1f} | "
              f"{stl:.1f} |")
    usage = man.get("llm_usage") or {}
    print("llm_usage:", json.dumps({k: usage.get(k) for k in ("decisions", "fork_decisions", "calls", "cache_hits",
                                                               "decisions_per_step_max", "backend_requests")}))
    cv, ref = rec.get("sampled_shapley_cv") or {}, rec.get("reference") or {}
    if cv:  # what the control-variate row's permutation count bought: its median standard error beside plain's
        print(f"sampled_shapley_cv: {cv.get('permutations')} permutations, median stderr {cv.get('median_stderr'):.3g} "
              f"(plain sampling at {(man.get('config') or {}).get('study', {}).get('permutations')}: "
              f"{cv.get('reference_median_stderr'):.3g}); reference {ref.get('method')}, ceiling τ "
              f"{(rec.get('ceiling') or {}).get('kendall_tau')}")
    large = (man.get("config") or {}).get("large")
    if large:
        print("reductions at large N (manifest config.large):", json.dumps(large))
    print(_load())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scan", action="store_true")
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--agents", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--src", default=None,
                    help="run this source tree's aumann instead (e.g. `git archive <commit> aumann | tar -x -C DIR`)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more arguments for aumann run")
    args = ap.parse_args()
    if not (args.scan or args.e2e):
        args.scan = args.e2e = True
    if args.scan:
        scan([int(s) for s in args.sizes.split(",")], args.steps)
    if args.e2e:
        e2e(args.agents, args.extra, args.src)


if __name__ == "__main__":
    main()
