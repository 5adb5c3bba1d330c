"""Serial vs a private local Ray instance vs a two-node loopback Ray cluster (issue 24).

    python benchmarks/bench_cluster.py sampled                     # sampled Shapley, N = 10⁶, T = 14 (m = 16)
    python benchmarks/bench_cluster.py sampled --n 100000 --m 8    # a quick look
    python benchmarks/bench_cluster.py blocks --m 64               # one step, permutation blocks (block_size)
    python benchmarks/bench_cluster.py study --runs 4              # the main job (aumann run midscale-social)
    python benchmarks/bench_cluster.py study --reference /work/ref/midscale-social-seed0   # all 10 runs, checked

Every configuration computes the same thing and the script checks the bits agree: ``serial`` (one
process), ``ray-local`` (``--executor ray``: a private local instance with every CPU) and
``two-node`` (tests/ray_cluster.py: ``ray start --head`` + ``ray start --address`` on loopback, the
worker in its own mount namespace where allowed, one CPU each unless ``--node-cpus``). Times are
wall seconds and ratios to the serial run of the same invocation, next to the load average (on a
shared 2-core machine the three configurations share the same two cores: the ratios show the
overhead of going through Ray, not a speed-up). The projection to 10⁸ agents scales the measured
per-(permutation × step × agent) cost linearly in N and divides by the cores of a cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _env import header

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.ray_cluster


def _cluster(cpus: int):
    from tests.ray_cluster import LoopbackCluster

    root = Path(tempfile.mkdtemp(prefix="aumann-bench-cluster-"))
    return LoopbackCluster(root / "logs", head_cpus=cpus, worker_cpus=cpus, object_store=2 * 2**30), root


def bench_attribution(args: argparse.Namespace, blocks: bool) -> dict:
    from aumann.attribution import Panel, SampledShapley, attribute
    from aumann.simulators import RayExecutor

    t = 1 if blocks else args.t
    z = np.abs(np.random.default_rng(0).normal(size=(t, args.n, 3)))
    panel = Panel(z)
    method = SampledShapley(args.m, block_size=args.block) if blocks else SampledShapley(args.m)
    what = (f"sampled Shapley m={args.m} N={args.n:,} T={t} on f_heat"
            + (f", permutation blocks of {args.block}" if blocks else ", step blocks"))
    env0 = header(what)
    out: dict = {"what": what, "env_before": env0, "seconds": {}}
    t0 = time.perf_counter()
    ref = attribute("heat", panel, method, rng=1)
    out["seconds"]["serial"] = time.perf_counter() - t0
    print(f"  serial      {out['seconds']['serial']:8.1f} s", flush=True)
    with RayExecutor() as ex:  # a private local instance, every CPU
        ex.cluster_cpus()
        t0 = time.perf_counter()
        res = attribute("heat", panel, method, rng=1, executor=ex)
        out["seconds"]["ray-local"] = time.perf_counter() - t0
    assert res.phi.tobytes() == ref.phi.tobytes(), "ray-local differs from serial"
    sec = out["seconds"]
    print(f"  ray-local   {sec['ray-local']:8.1f} s  ({sec['ray-local'] / sec['serial']:.2f}x serial; no start-up)",
          flush=True)
    cluster, root = _cluster(args.node_cpus)
    try:
        cluster.start()
        os.environ.update(cluster.env)
        with RayExecutor(address=cluster.address) as ex:
            ex.cluster_cpus()
            t0 = time.perf_counter()
            res = attribute("heat", panel, method, rng=1, executor=ex)
            out["seconds"]["two-node"] = time.perf_counter() - t0
            out["nodes_used"] = len(ex.task_hosts)
        assert res.phi.tobytes() == ref.phi.tobytes(), "two-node differs from serial"
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"  two-node    {sec['two-node']:8.1f} s  ({sec['two-node'] / sec['serial']:.2f}x serial; "
          f"{out['nodes_used']} node(s) ran blocks; private worker: {cluster.private})", flush=True)
    unit = out["seconds"]["serial"] / (args.m * t * args.n)
    out["serial_seconds_per_perm_step_agent"] = unit
    for cores in (64, 512):
        proj = unit * 1000 * 14 * 1e8 / cores
        print(f"  projection: m=1000, T=14, N=10^8 on {cores} cores ≈ {proj / 3600:.1f} h "
              f"(linear in N, perfect split over steps/blocks; the panel, 10^8×14×3 float64 = 33.6 GB, "
              f"travels once per step block)")
        out[f"projection_hours_{cores}_cores"] = proj / 3600
    out["env_after"] = header("after")
    return out


def bench_study(args: argparse.Namespace) -> dict:
    from aumann.cli import main

    env0 = header(f"aumann run midscale-social --runs {args.runs}: serial vs --executor ray vs two-node")
    out: dict = {"what": f"midscale-social runs={args.runs}", "env_before": env0, "seconds": {}}
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="aumann-bench-study-"))
    work.mkdir(parents=True, exist_ok=True)
    base = ["run", "midscale-social", "--runs", str(args.runs), "--no-plots", "--static"]
    try:
        for name, extra in (("serial", []), ("ray-local", ["--executor", "ray"])):
            t0 = time.perf_counter()
            assert main([*base, "--out", str(work / name), *extra]) == 0
            out["seconds"][name] = time.perf_counter() - t0
            print(f"  {name:10s} {out['seconds'][name]:8.1f} s", flush=True)
        cluster, root = _cluster(args.node_cpus)
        try:
            cluster.start()
            os.environ.update(cluster.env)
            t0 = time.perf_counter()
            assert main([*base, "--out", str(work / "two-node"), "--ray-address", cluster.address]) == 0
            out["seconds"]["two-node"] = time.perf_counter() - t0
        finally:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)
        print(f"  two-node   {out['seconds']['two-node']:8.1f} s", flush=True)
        same = all((work / "serial" / f).read_bytes() == (work / k / f).read_bytes()
                   for k in ("ray-local", "two-node") for f in ["faithfulness.csv"]
                   + [f"runs/run-{r:03d}.json" for r in range(args.runs)])
        out["identical_outputs"] = same
        print(f"  faithfulness.csv and run records identical across the three: {same}")
        for k in ("ray-local", "two-node"):
            print(f"  {k}: {out['seconds'][k] / out['seconds']['serial']:.2f}x serial (start-up included)")
        if args.reference is not None:
            ref = Path(args.reference) / "faithfulness.csv"
            out["matches_reference"] = {k: (work / k / "faithfulness.csv").read_bytes() == ref.read_bytes()
                                        for k in ("serial", "ray-local", "two-node")}
            print(f"  faithfulness.csv byte-identical to {ref}: {out['matches_reference']}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    out["env_after"] = header("after")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("sampled", "blocks", "study"))
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--t", type=int, default=14)
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--block", type=int, default=8, help="permutations per block (blocks)")
    ap.add_argument("--runs", type=int, default=10, help="runs of the main job (study)")
    ap.add_argument("--node-cpus", type=int, default=1, help="CPUs each loopback node offers")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    ap.add_argument("--keep", type=Path, default=None, help="study: keep the three run directories here")
    ap.add_argument("--reference", type=Path, default=None,
                    help="study: a run directory whose faithfulness.csv the three must equal byte for byte")
    args = ap.parse_args()
    res = bench_study(args) if args.what == "study" else bench_attribution(args, blocks=args.what == "blocks")
    if args.out is not None:
        args.out.write_text(json.dumps(res, indent=1, default=float), encoding="utf-8")


if __name__ == "__main__":
    main()
