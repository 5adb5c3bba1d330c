"""The engine on a torch device (issue 15, GPU): the generic path integral at N = 10⁶ and 10⁷.

    python benchmarks/bench_device.py --device cuda                 # N = 10⁶ and 10⁷, K = 30, T = 1
    python benchmarks/bench_device.py --device cuda --n 1000000     # one size

For each N, on a float32 panel (T steps × N agents × 3 features), the generic autograd path integral
(`AumannShapley(steps=K)`, an indicator with no closed form and no pooled form) is timed end to end
through `attribute(..., device=...)` — the panel starts on the host and the result comes back to it,
as a user sees it. References measured in the same run:

* a plain torch loop on the same device: the K forward + backward passes written by hand on a panel
  already on the device (the ideal: no transfers, no checks, no result assembly);
* the unavoidable transfers: the panel host → device and φ device → host (pageable memory), so that
  "plain loop + transfers" is the ideal for a panel that lives on the host, as a user's does;
* the same `attribute` call on the host CPU (`device="cpu"`), with the machine's thread count printed;
* agreement: the device result against the CPU result in float64 on a smaller N (relative 1e-10).

The ratios (ours / plain loop, CPU / ours) are what to compare across machines. Never a test.

    python benchmarks/bench_device.py --device cuda --network --n 1000000   # a network indicator

``--network``: the same path integral for ``NetworkQuadratic`` (f = log(1 + c rᵀ A r) on a random graph of
about 10 edges per agent, r = z₀ z₁), whose A x runs on the device with the graph copied there once; the
reference is the same call with A x done on the host (each of the K forward and backward products sends
the batch to the host and back, as before 27 Nov), plus the host CPU. Agreement: device vs CPU, float64.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from _env import header, set_threads


def indicator(z: torch.Tensor) -> torch.Tensor:
    """A C² indicator with no closed form: tanh of the mean pairwise product of features 0 and 1."""
    return torch.tanh((z[..., 0] * z[..., 1]).mean(-1) + 0.1 * z[..., 2].square().mean(-1))


def plain_loop(z: np.ndarray, k: int, device: str) -> float:
    """The ideal: Gauss–Legendre K points, one batched forward + backward per step, panel on device."""
    nodes, weights = np.polynomial.legendre.leggauss(k)
    tau = torch.as_tensor((nodes + 1) / 2, dtype=torch.float32, device=device)
    w = torch.as_tensor(weights / 2, dtype=torch.float32, device=device)
    x = torch.as_tensor(z, device=device)
    sync(device)
    t0 = time.perf_counter()
    out = torch.empty(x.shape[:2], device=device)
    for t in range(x.shape[0]):
        pts = (tau[:, None, None] * x[t][None]).requires_grad_(True)
        (g,) = torch.autograd.grad(indicator(pts).sum(), pts)
        out[t] = (x[t] * torch.einsum("k,knd->nd", w, g)).sum(-1)
    sync(device)
    return time.perf_counter() - t0


def transfers(z: np.ndarray, device: str) -> float:
    """Seconds to move the panel to the device and a φ-sized (T, N) result back."""
    sync(device)
    t0 = time.perf_counter()
    x = torch.as_tensor(z).to(device)
    x[..., 0].contiguous().cpu()
    sync(device)
    return time.perf_counter() - t0


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def ours(z: np.ndarray, k: int, device: str) -> tuple[float, object]:
    from aumann.attribution import AumannShapley, Panel, attribute

    panel = Panel(z)
    sync(device)
    t0 = time.perf_counter()
    res = attribute(indicator, panel, AumannShapley(steps=k), device=device)
    sync(device)
    return time.perf_counter() - t0, res


def finish(out: Path | None, name: str, rel: float, rows: list, env0: dict) -> None:
    """Print the machine after the runs; with ``--out``, write the results file ``name`` there."""
    env1 = header("after")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(
            {"agreement_rel": rel, "rows": rows, "env_before": env0, "env_after": env1}, indent=2))


def network_indicator(n: int, seed: int = 2):
    """NetworkQuadratic on a random symmetric graph of about 10 edges per agent, r = z₀ z₁ (degree 2)."""
    import scipy.sparse as sp

    from aumann.attribution.network import NetworkQuadratic

    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, n, 5 * n), rng.integers(0, n, 5 * n)
    keep = i != j
    A = sp.coo_matrix((np.full(int(keep.sum()), 0.1), (i[keep], j[keep])), shape=(n, n)).tocsr()
    A = (A + A.T).tocsr()
    A.sort_indices()
    return NetworkQuadratic(A, lambda z: z[..., 0] * z[..., 1], scale=1.0 / n, degree=2, check=False)


def host_round_trip(A, x: torch.Tensor) -> torch.Tensor:
    """A x as the network indicator did it on a device before 27 Nov: the batch to the host and back."""
    n = x.shape[-1]
    xn = x.detach().reshape(-1, n).to(torch.float64).cpu().numpy()
    y = (A @ xn.T).T
    return torch.from_numpy(np.ascontiguousarray(y)).to(device=x.device, dtype=x.dtype).reshape(*x.shape)


def network_main(args) -> None:
    from aumann.attribution import AumannShapley, Panel, attribute
    from aumann.attribution import network as nw

    env0 = header(f"network path integral K={args.k} T={args.t} on {args.device}")
    f = network_indicator(5_000)
    z = np.abs(np.random.default_rng(1).normal(size=(2, 5_000, 3)))
    dev = attribute(f, Panel(z), AumannShapley(steps=args.k), device=args.device)
    cpu = attribute(f, Panel(z), AumannShapley(steps=args.k), device="cpu")
    rel = float(np.max(np.abs(dev.phi - cpu.phi)) / np.max(np.abs(cpu.phi)))
    print(f"  agreement float64 N=5,000: max |φ_dev − φ_cpu| / max |φ_cpu| = {rel:.2e} (target ≤ 1e-10)", flush=True)
    rows = []
    apply = nw._apply
    for n in args.n or [1_000_000]:
        f = network_indicator(n)
        z = np.abs(np.random.default_rng(0).normal(size=(args.t, n, 3))).astype(np.float32)
        panel = Panel(z)

        def timed(device: str, f=f, panel=panel) -> tuple[float, object]:
            sync(device)
            t0 = time.perf_counter()
            res = attribute(f, panel, AumannShapley(steps=args.k), device=device)
            sync(device)
            return time.perf_counter() - t0, res

        timed(args.device)  # warm-up: CUDA context, the graph's copy on the device
        sec, res = min((timed(args.device) for _ in range(2)), key=lambda p: p[0])
        nw._apply = lambda A, x: host_round_trip(A, x) if x.device.type != "cpu" else apply(A, x)
        try:
            old, res_old = min((timed(args.device) for _ in range(2)), key=lambda p: p[0])
        finally:
            nw._apply = apply
        same = float(np.max(np.abs(res.phi - res_old.phi)) / np.max(np.abs(res_old.phi)))
        row = {"n": n, "nnz": int(f.A.nnz), "ours_s": sec, "host_round_trip_s": old, "speedup": old / sec,
               "rel_diff_vs_round_trip": same, "max_rel_efficiency_gap": float(res.relative_efficiency_gap.max())}
        msg = (f"  N={n:,} ({f.A.nnz:,} edges): ours {sec:.3f} s, A x on the host {old:.3f} s → {old / sec:.1f}× "
               f"faster; φ differs by {same:.1e} relative; efficiency gap {row['max_rel_efficiency_gap']:.1e}")
        if args.cpu:
            c, _ = timed("cpu")
            row["cpu_s"] = c
            msg += f"; host CPU ({torch.get_num_threads()} threads) {c:.2f} s → device {c / sec:.1f}× faster"
        print(msg, flush=True)
        rows.append(row)
    finish(args.out, "bench_device_network.json", rel, rows, env0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, action="append", help="agents (repeatable; default 10⁶ and 10⁷)")
    ap.add_argument("--t", type=int, default=1)
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--cpu", action="store_true", help="also time device='cpu' (slow at 10⁷)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--network", action="store_true", help="a network indicator (NetworkQuadratic) instead")
    args = ap.parse_args()
    set_threads(args.threads)
    if args.network:
        network_main(args)
        return
    env0 = header(f"path integral K={args.k} T={args.t} on {args.device}")
    rows = []

    # agreement first (float64, small N): the device result equals the host result
    z64 = np.abs(np.random.default_rng(1).normal(size=(2, 20_000, 3)))
    _, r_dev = ours(z64, args.k, args.device)
    _, r_cpu = ours(z64, args.k, "cpu")
    rel = float(np.max(np.abs(r_dev.phi - r_cpu.phi)) / np.max(np.abs(r_cpu.phi)))
    print(f"  agreement float64 N=20,000: max |φ_dev − φ_cpu| / max |φ_cpu| = {rel:.2e} (target ≤ 1e-10)", flush=True)

    for n in args.n or [1_000_000, 10_000_000]:
        z = np.abs(np.random.default_rng(0).normal(size=(args.t, n, 3))).astype(np.float32)
        ours(z[:, :1000], args.k, args.device)  # warm-up: CUDA context, kernels
        plain_loop(z[:, :1000], args.k, args.device)
        ref = min(plain_loop(z, args.k, args.device) for _ in range(2))
        move = min(transfers(z, args.device) for _ in range(2))
        sec, res = min((ours(z, args.k, args.device) for _ in range(2)), key=lambda p: p[0])
        row = {"n": n, "t": args.t, "k": args.k, "ours_s": sec, "plain_loop_s": ref, "ratio_vs_plain": sec / ref,
               "transfers_s": move, "ratio_vs_plain_and_transfers": sec / (ref + move),
               "max_rel_efficiency_gap": float(res.relative_efficiency_gap.max())}
        msg = (f"  N={n:,}: ours {sec:.3f} s, plain torch loop on {args.device} {ref:.3f} s → {sec / ref:.2f}× "
               f"(target ≤ 1×); transfers {move:.3f} s → {sec / (ref + move):.2f}× plain loop + transfers; "
               f"efficiency gap {row['max_rel_efficiency_gap']:.1e}")
        if args.cpu:
            cpu, _ = ours(z, args.k, "cpu")
            row["cpu_s"] = cpu
            msg += f"; host CPU ({torch.get_num_threads()} threads) {cpu:.2f} s → device {cpu / sec:.1f}× faster"
        print(msg, flush=True)
        rows.append(row)
    finish(args.out, "bench_device.json", rel, rows, env0)


if __name__ == "__main__":
    main()
