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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, action="append", help="agents (repeatable; default 10⁶ and 10⁷)")
    ap.add_argument("--t", type=int, default=1)
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--cpu", action="store_true", help="also time device='cpu' (slow at 10⁷)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    set_threads(args.threads)
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
    env1 = header("after")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_device.json").write_text(json.dumps(
            {"agreement_rel": rel, "rows": rows, "env_before": env0, "env_after": env1}, indent=2))


if __name__ == "__main__":
    main()
