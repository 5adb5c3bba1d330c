"""LLM agents at real latency: wall time vs the ideal, client CPU per decision, workers vs serial.

    python benchmarks/bench_llm.py                      # everything (about 20-30 min on 2 cores)
    python benchmarks/bench_llm.py --section runs       # EconAgent + SocialLLM (both modes), N = 20 and 200
    python benchmarks/bench_llm.py --section cpu --old /tmp/aumann-old   # CPU per decision, this tree vs another
    python benchmarks/bench_llm.py --section today --old /tmp/aumann-old # the old one-by-one path, N = 200
    python benchmarks/bench_llm.py --section workers    # a 4-run study, --workers 2 vs serial
    python benchmarks/bench_llm.py --section study      # full `aumann run --runs 1` (forks included)

The server is ``tests/llm_loopback.py`` in a separate process (so its CPU is not the client's):
latency ``--latency`` ± ``--jitter`` (uniform; default 200 ± 50 ms), a concurrency cap of 64,
``--errors`` (default 1 %) injected 429 (``Retry-After: 0.1``) / 503 replies. The client uses
``--concurrency`` (default 32), backoff 0.1 s.

**Ideal** wall time of a run = Σ over its dependent batches of ⌈requests sent in the batch /
concurrency⌉ × mean latency (a sequential phase contributes one round per request): the backend
counts these rounds (``usage.rounds``). **Ratio** = ideal / measured wall (1.0 = the ideal; the
target is ≥ 0.7). ``today`` measures the previous code's path (one request at a time) on the same
server. ``--old DIR`` is a source tree of the previous version, e.g.
``git archive ec8219b | tar -x -C /tmp/aumann-old``. Every row records the 1-minute load average:
the machines are shared, so a loaded machine inflates wall times.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def server(latency: float, jitter: float, errors: float, cap: int = 64):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.llm_loopback", "--port", str(port), "--latency",
                             str(latency), "--jitter", str(jitter), "--max-concurrency", str(cap), "--error-rate",
                             str(errors), "--retry-after", "0.1"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/stats", timeout=1).read()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def stats(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read())


def load() -> float:
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------------- one simulated run
def simulate_run(url: str, name: str, n: int, steps: int, conc: int, interaction: str | None) -> dict:
    from aumann import scenarios
    from aumann.simulators.llm import OpenAIBackend

    sc = scenarios.get(name)
    over = {"agents": n, "steps": steps, "runs": 1}
    if interaction:
        over["interaction"] = interaction
    cfg = sc.load_config(**over)
    b = OpenAIBackend(model="bench", base_url=url, concurrency=conc, max_retries=8, backoff=0.1, backoff_max=1.0)
    before = stats(url)["requests"]
    la = load()
    t0 = time.perf_counter()
    sc.simulate(cfg, rng=0, backend=b)
    wall = time.perf_counter() - t0
    b.close()
    requests = stats(url)["requests"] - before
    return {"scenario": name, "mode": interaction or "-", "N": n, "T": steps, "requests": requests,
            "decisions": b.usage.decisions, "rounds": b.usage.rounds, "retries": b.usage.retries, "wall_s": wall,
            "planned": b.usage.planned_calls, "load": la}


def warm_up() -> None:
    """Import every scenario's modules (Mesa, torch, ...) before timing: wall times are the request path's."""
    from aumann import scenarios

    for name in ("econagent", "social-llm"):
        sc = scenarios.get(name)
        sc.simulate(sc.load_config(agents=4, steps=2, runs=1), rng=0)


def section_runs(args) -> list[dict]:
    rows = []
    warm_up()
    with server(args.latency, args.jitter, args.errors) as url:
        for name, mode in (("econagent", None), ("social-llm", "synchronous"), ("social-llm", "sequential")):
            for n in (20, 200):
                steps = args.econ_steps if name == "econagent" else args.social_steps
                r = simulate_run(url, name, n, steps, args.concurrency, mode)
                r["ideal_s"] = r["rounds"] * args.latency
                r["ratio"] = r["ideal_s"] / r["wall_s"]
                rows.append(r)
                print(_row(r), flush=True)
    return rows


def section_heldout(args) -> list[dict]:
    """The issue-23 throughput check: a loopback server at 250 ms, SocialLLM synchronous, N = 100, T = 10,
    concurrency 32. Requests sent must equal the distinct requests (identical ones in flight coalesced)."""
    warm_up()
    rows = []
    with server(0.25, 0.0, 0.0, cap=256) as url:
        r = simulate_run(url, "social-llm", 100, 10, 32, "synchronous")
        r["ideal_s"] = r["rounds"] * 0.25
        r["ratio"] = r["ideal_s"] / r["wall_s"]
        rows.append(r)
        print(_row(r), f"(distinct requests planned: {r['planned']}, server saw {r['requests']})", flush=True)
    return rows


def _row(r: dict) -> str:
    return (f"| {r['scenario']} | {r['mode']} | {r['N']} | {r['T']} | {r['requests']} | {r['rounds']} | "
            f"{r['ideal_s']:.1f} | {r['wall_s']:.1f} | {r['ratio']:.2f} | {r['load']} |")


# ---------------------------------------------------------------------- the previous code's path
_TODAY = """
import sys, time, json
from aumann import scenarios
from aumann.simulators.llm import OpenAIBackend
sc = scenarios.get("social-llm")
cfg = sc.load_config(agents=int(sys.argv[2]), steps=int(sys.argv[3]), runs=1)
b = OpenAIBackend(model="bench", base_url=sys.argv[1], max_retries=8, backoff=0.1, backoff_max=1.0, concurrency=32)
t0 = time.perf_counter()
sc.simulate(cfg, rng=0, backend=b)
print(json.dumps({"wall_s": time.perf_counter() - t0, "decisions": b.usage.decisions}))
"""


def section_today(args) -> list[dict]:
    if not args.old:
        print("--section today needs --old DIR (a source tree of the previous version)")
        return []
    rows = []
    warm_up()
    with server(args.latency, args.jitter, args.errors) as url:
        before = stats(url)["requests"]
        la = load()
        out = subprocess.run([sys.executable, "-c", _TODAY, url, str(args.today_n), str(args.today_steps)],
                             env={**os.environ, "PYTHONPATH": args.old}, cwd=args.old, capture_output=True, text=True,
                             check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        res.update({"requests": stats(url)["requests"] - before, "N": args.today_n, "T": args.today_steps, "load": la})
        new = simulate_run(url, "social-llm", args.today_n, args.today_steps, args.concurrency, "synchronous")
        res["new_synchronous_wall_s"] = new["wall_s"]
        res["new_synchronous_requests"] = new["requests"]
        res["speedup"] = res["wall_s"] / new["wall_s"]
        seq = simulate_run(url, "social-llm", args.today_n, args.today_steps, args.concurrency, "sequential")
        res["new_sequential_wall_s"] = seq["wall_s"]
        res["speedup_sequential"] = res["wall_s"] / seq["wall_s"]
        rows.append(res)
        print(json.dumps(res), flush=True)
    return rows


# ---------------------------------------------------------------------- client CPU per decision
_CPU = """
import json, os, sys, tempfile, time
from pydantic import BaseModel
from aumann.simulators.llm import OpenAIBackend, ResponseCache
class Post(BaseModel):
    post: bool = False
N = int(sys.argv[2])
d = tempfile.mkdtemp()
b = OpenAIBackend(model="m", base_url=sys.argv[1], concurrency=32, cache=ResponseCache(os.path.join(d, "c.sqlite")))
reqs = [{"messages": [{"role": "system", "content": "You decide for a social-media user."},
                      {"role": "user", "content": "Your post preference is 0.55. Your current belief is 0.12. "
                       "Decide whether to publish a post this round. Answer with JSON." + str(i)}],
         "schema": Post, "seed": i} for i in range(N)]
out = {}
for what in ("miss", "hit"):
    c0, t0 = time.process_time(), time.perf_counter()
    for k in range(0, N, 200):
        b.decide_many(reqs[k:k + 200])
    out[what + "_ms"] = (time.process_time() - c0) / N * 1000
    out[what + "_wall_s"] = time.perf_counter() - t0
print(json.dumps(out))
"""


def section_cpu(args) -> list[dict]:
    rows = []
    trees = [("this tree", str(ROOT))] + ([("previous", args.old)] if args.old else [])
    with server(0.0, 0.0, 0.0, cap=256) as url:
        for label, tree in trees:
            la = load()
            out = subprocess.run([sys.executable, "-c", _CPU, url, str(args.cpu_n)], env={**os.environ,
                                 "PYTHONPATH": tree}, cwd=tree, capture_output=True, text=True, check=True)
            res = {"code": label, **json.loads(out.stdout.strip().splitlines()[-1]), "load": la}
            rows.append(res)
            print(json.dumps(res), flush=True)
    return rows


# ---------------------------------------------------------------------- workers and full studies
def _aumann(argv: list[str], env: dict | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aumann.cli", *argv], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, **(env or {})})
    return time.perf_counter() - t0


def section_workers(args) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.workers_llm_only:
            return _workers_llm(args, tmp, rows)
        cfg = Path(tmp) / "w.toml"
        cfg.write_text("agents = 20\nsteps = 30\nruns = 4\nseed = 1\n[study]\npermutations = 200\n")
        for label, extra in (("serial", []), ("--workers 2", ["--workers", "2"])):
            la = load()
            wall = _aumann(["run", "social-llm", "--config", str(cfg), "--out", f"{tmp}/{label[-1]}", "--no-plots",
                            *extra])
            rows.append({"what": f"offline social-llm, 4 runs, {label}", "wall_s": wall, "load": la})
            print(rows[-1], flush=True)
        a = sorted((Path(tmp) / "l" / "runs").glob("*.json"))
        b = sorted((Path(tmp) / "2" / "runs").glob("*.json"))
        same = [x.read_bytes() for x in a] == [y.read_bytes() for y in b]
        rows.append({"what": "run files identical", "value": same})
        print(rows[-1], flush=True)
        return _workers_llm(args, tmp, rows)


def _workers_llm(args, tmp: str, rows: list[dict]) -> list[dict]:
    latency = args.workers_latency or args.latency
    with server(latency, args.jitter * latency / args.latency, args.errors) as url:
        mode = args.workers_interaction
        cfg2 = Path(tmp) / "l.toml"
        cfg2.write_text(f'agents = 20\nsteps = 10\nruns = 4\nseed = 1\ninteraction = "{mode}"\n'
                        "[study]\npermutations = 50\nrandom_orderings = 5\nablations = false\n")
        for label, extra in (("serial", []), ("--workers 2", ["--workers", "2"])):
            la = load()
            wall = _aumann(["run", "social-llm", "--config", str(cfg2), "--out", f"{tmp}/llm-{mode}{label[-1]}",
                            "--no-plots", "--backend", "openai", "--model", "bench", "--base-url", url,
                            "--concurrency", str(args.concurrency), *extra])
            rows.append({"what": f"LLM social-llm {mode} N=20 T=10, 4 runs, {latency:g} s latency, {label}",
                         "wall_s": wall, "load": la})
            print(rows[-1], flush=True)
    return rows


def section_study(args) -> list[dict]:
    rows = []
    with server(args.latency, args.jitter, args.errors) as url, tempfile.TemporaryDirectory() as tmp:
        for name, extra_cfg in (("social-llm", 'interaction = "synchronous"\n'), ("econagent", "")):
            cfg = Path(tmp) / f"{name}.toml"
            cfg.write_text(f"agents = 20\nsteps = {args.social_steps}\nruns = 1\nseed = 0\n{extra_cfg}")
            out = Path(tmp) / name
            before = stats(url)["requests"]
            la = load()
            wall = _aumann(["run", name, "--config", str(cfg), "--out", str(out), "--no-plots", "--backend", "openai",
                            "--model", "bench", "--base-url", url, "--concurrency", str(args.concurrency)])
            u = json.loads((out / "manifest.json").read_text())["llm_usage"]
            ledger = json.loads((out / "llm-usage.json").read_text())["usage"]
            req = stats(url)["requests"] - before
            ideal = ledger["rounds"] * args.latency + -(-u["fork_calls"] // args.concurrency) * args.latency
            rows.append({"what": f"aumann run {name} (N=20, T={args.social_steps}, 1 run, forks included)",
                         "wall_s": wall, "server_requests": req, "calls": u["calls"], "fork_calls": u["fork_calls"],
                         "usage_matches_server": u["calls"] + u["fork_calls"] == req, "ideal_s": ideal, "load": la})
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", choices=("all", "runs", "cpu", "today", "workers", "study", "heldout"),
                    default="all")
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--jitter", type=float, default=0.05)
    ap.add_argument("--errors", type=float, default=0.01)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--econ-steps", type=int, default=6)
    ap.add_argument("--social-steps", type=int, default=5)
    ap.add_argument("--today-n", type=int, default=200)
    ap.add_argument("--today-steps", type=int, default=2)
    ap.add_argument("--cpu-n", type=int, default=2000)
    ap.add_argument("--workers-latency", type=float, default=None, help="latency of the LLM part of --section workers")
    ap.add_argument("--workers-llm-only", action="store_true", help="--section workers: only the LLM study")
    ap.add_argument("--workers-interaction", default="synchronous", choices=("synchronous", "sequential"))
    ap.add_argument("--old", default=None, help="source tree of the previous version (for cpu and today)")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    results = {}
    print(f"latency {args.latency} ± {args.jitter} s, {args.errors:.0%} injected 429/503, concurrency "
          f"{args.concurrency}, {os.cpu_count()} CPU(s), load {load()}", flush=True)
    if args.section in ("all", "cpu"):
        results["cpu"] = section_cpu(args)
    if args.section in ("all", "runs"):
        print("| scenario | mode | N | T | requests | rounds | ideal s | wall s | ratio | load |\n"
              "|---|---|---|---|---|---|---|---|---|---|", flush=True)
        results["runs"] = section_runs(args)
    if args.section in ("all", "heldout"):
        print("| scenario | mode | N | T | requests | rounds | ideal s | wall s | ratio | load |\n"
              "|---|---|---|---|---|---|---|---|---|---|", flush=True)
        results["heldout"] = section_heldout(args)
    if args.section in ("all", "today"):
        results["today"] = section_today(args)
    if args.section in ("all", "workers"):
        results["workers"] = section_workers(args)
    if args.section in ("all", "study"):
        results["study"] = section_study(args)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
