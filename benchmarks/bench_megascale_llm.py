"""Benchmark: a recorded MegaScale-Social LLM run against a loopback server, then its offline replay.

1. start ``llm_loopback_server.LoopbackLLM`` (127.0.0.1, ``--latency`` seconds per request, default 0.2;
   it answers like a deterministic LLM from the prompt text);
2. **record**: ``aumann run megascale-social --agents N --steps 30 --runs 1 --no-plots --backend openai
   --model loopback --base-url URL --concurrency 64 --cache C --cache-mode record`` — wall time, requests
   the server saw, ``llm_usage`` (target at N = 10⁶: ≤ 300 s wall);
3. stop the server; **replay**: the same command with ``--cache-mode replay`` and a base URL where nothing
   listens — any request would fail — into a second directory;
4. compare: ``faithfulness.csv`` byte for byte, every array of ``runs/run-000.npz`` and the panel, and
   ``llm_usage.calls`` of the replay (must be 0).

The reference measured in the same run is the ideal LLM time of the record: (distinct requests /
concurrency) × latency. Usage::

    python benchmarks/bench_megascale_llm.py --agents 1000000 [--latency 0.2] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _run(args: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "AUMANN_LLM_API_KEY")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "aumann.cli", "run", "megascale-social", *args],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"aumann run failed ({proc.returncode})")
    return time.perf_counter() - t0


def main() -> None:
    from llm_loopback_server import LoopbackLLM

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--latency", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[])
    args = ap.parse_args()
    print(f"load average {os.getloadavg()} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cache = tmp / "mega-llm.sqlite"
        common = ["--agents", str(args.agents), "--steps", str(args.steps), "--runs", "1", "--no-plots",
                  "--backend", "openai", "--model", "loopback", "--concurrency", str(args.concurrency),
                  "--cache", str(cache), *args.extra]
        with LoopbackLLM(latency=args.latency) as srv:
            wall_rec = _run([*common, "--base-url", srv.base_url, "--cache-mode", "record", "--out", str(tmp / "rec")])
            sent = srv.requests
        dead = f"http://127.0.0.1:{_free_port()}/v1"
        wall_rep = _run([*common, "--base-url", dead, "--cache-mode", "replay", "--out", str(tmp / "rep")])
        m_rec = json.loads((tmp / "rec" / "manifest.json").read_text())
        m_rep = json.loads((tmp / "rep" / "manifest.json").read_text())
        same_csv = (tmp / "rec" / "faithfulness.csv").read_bytes() == (tmp / "rep" / "faithfulness.csv").read_bytes()
        a, b = np.load(tmp / "rec" / "runs" / "run-000.npz"), np.load(tmp / "rep" / "runs" / "run-000.npz")
        same_arrays = sorted(a.files) == sorted(b.files) and all(np.array_equal(a[k], b[k]) for k in a.files)
        pa, pb = np.load(tmp / "rec" / "panels" / "run-000.npz"), np.load(tmp / "rep" / "panels" / "run-000.npz")
        same_panel = all(np.array_equal(pa[k], pb[k]) for k in pa.files)
        cache_mb = cache.stat().st_size / 2**20
    ideal = sent / args.concurrency * args.latency
    print(f"record: {wall_rec:.1f} s wall (target 300 s), {sent} request(s) to the server "
          f"(ideal LLM time {ideal:.1f} s at concurrency {args.concurrency}, latency {args.latency} s); "
          f"cache {cache_mb:.1f} MiB")
    print("record llm_usage:", json.dumps(m_rec.get("llm_usage")))
    print(f"replay: {wall_rep:.1f} s wall; llm_usage.calls = {m_rep.get('llm_usage', {}).get('calls')}; "
          f"faithfulness.csv identical: {same_csv}; run arrays identical: {same_arrays}; panel identical: "
          f"{same_panel}")
    print(f"policy: record {m_rec.get('policy')!r}, replay {m_rep.get('policy')!r}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
