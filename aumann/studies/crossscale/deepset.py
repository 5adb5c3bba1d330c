"""A learned DeepSet indicator attributed at full scale (paper, Appendix Q).

f_deep(z) = head( [ mean_i ψ(z_i) , log(mean_i z_i + 1e-8) ] ),  ψ(z) = tanh(W2 tanh(W1 z + b1) + b2),
head(x) = w4 · tanh(W3 x + b3) + b4.

It is pooled — a function of agent means only — with psi(z) = concat(ψ(z), z) and rho = head ∘
(identity on the ψ-means, log(· + 1e-8) on the z-means), and declares that as its
:class:`~aumann.attribution.PooledForm`. The tanh head makes it nonlinear across agents
(Definition 2), so Theorem 1 (i) does not apply.

Training (Adam, MSE, seeded ``torch.Generator``) regresses the standardised shifted log of f_heat,
y = (log(f_heat + shift) − μ) / σ, on sub-panels of the topic's window panel drawn half uniformly
and half from the visibility pool, sizes {64, 256, 1024} (agents drawn with replacement: a training
convenience). Attribution: the engine's path integral with τ = u⁴ and K = 120
(``AumannShapley(steps=120, power=4)``), on ``DeepSetSettings.device`` (``"cuda"`` for a GPU; the
indicator follows its input onto the device); the log-mean channel makes the zero-baseline integrand
sharp near τ ≈ 0, which the substitution resolves. Reported: efficiency gap, the deepset table
(FULL, BIAS_v and RAND at N = 100: tier shares and ε), training fidelity, and the attribution time
against K forward+backward passes of the network measured in the same run.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aumann.attribution import AumannShapley, Indicator, PooledForm, attribute
from aumann.attribution.device import CPU, resolve_device
from aumann.attribution.result import group_shares
from aumann.checks import as_torch
from aumann.data.bluesky.counts import RawCounts
from aumann.errors import ZeroDeltaVError
from aumann.io import write_json, write_text
from aumann.seeding import torch_generator
from aumann.studies.crossscale.protocols import build_pools, sample
from aumann.studies.crossscale.residual import best_scalar
from aumann.tiers import TIER_LABELS, tier_codes

EPS_LOG = 1e-8
DTYPE = torch.float32  # float32 network: 2–5× faster on CPU; gaps stay far below 0.3 %
SHIFT = 1e-3


class DeepSetNet(torch.nn.Module):
    """Encoder ψ, mean pooling + log-mean channel, tanh head (float32 unless ``dtype`` says otherwise)."""

    def __init__(self, d: int, width: int, generator: torch.Generator, dtype: torch.dtype = DTYPE) -> None:
        super().__init__()
        self.dtype = dtype
        self.l1 = torch.nn.Linear(d, width, dtype=dtype)
        self.l2 = torch.nn.Linear(width, width, dtype=dtype)
        self.l3 = torch.nn.Linear(width + d, width, dtype=dtype)
        self.l4 = torch.nn.Linear(width, 1, dtype=dtype)
        with torch.no_grad():  # drawn in float32 whatever the dtype: the same seed gives the same network
            for lin in (self.l1, self.l2, self.l3, self.l4):
                bound = 1.0 / np.sqrt(lin.in_features)
                lin.weight.copy_((torch.rand(lin.weight.shape, generator=generator, dtype=DTYPE) * 2 - 1)
                                 * bound)
                lin.bias.copy_((torch.rand(lin.bias.shape, generator=generator, dtype=DTYPE) * 2 - 1) * bound)

    def encoder(self, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.l2(torch.tanh(self.l1(z))))

    def psi(self, z: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.encoder(z), z], dim=-1)

    def rho(self, m: torch.Tensor) -> torch.Tensor:
        h = m.shape[-1] - self.l1.in_features
        x = torch.cat([m[..., :h], torch.log(m[..., h:] + EPS_LOG)], dim=-1)
        return self.l4(torch.tanh(self.l3(x)))[..., 0]

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.rho(self.psi(z).mean(dim=-2))


class DeepSetIndicator(Indicator):
    """The trained network as a batched indicator ``f(z[..., N, D]) -> [...]`` (pooled).

    It follows its input: on a tensor that lives on a GPU (``attribute(..., device="cuda")``) it
    evaluates a copy of the network on that device (made once per device; the host network is
    left where it is).
    """

    name = "deepset"

    def __init__(self, net: DeepSetNet) -> None:
        self.net = net.eval()
        for p in self.net.parameters():
            p.requires_grad_(False)
        self._nets: dict[torch.device, DeepSetNet] = {next(net.parameters()).device: self.net}
        self.pooled = PooledForm(psi=lambda z: self.on(z.device).psi(z.to(net.dtype)),
                                 rho=lambda m: self.on(m.device).rho(m.to(net.dtype)))

    def on(self, device: torch.device) -> DeepSetNet:
        """The network on ``device`` (a copy, made on first use)."""
        net = self._nets.get(device)
        if net is None:
            net = self._nets[device] = copy.deepcopy(self.net).to(device)
        return net

    def forward(self, z: torch.Tensor, context: Any = None) -> torch.Tensor:
        net = self.on(z.device)
        return net(z.to(net.dtype))


def _heat(values: np.ndarray) -> np.ndarray:
    """f_heat of panels (B, n, D)."""
    return np.log1p(np.prod(values.mean(axis=1), axis=-1))


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Temporarily run torch intra-op work on ``n`` threads (restored afterwards).

    Training steps are tiny (≤ 16k rows × width 16); extra threads only add synchronisation, and on
    a busy 2-core machine they slow each step down ~10×.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def train(values: np.ndarray, pool: np.ndarray, settings: Any) -> tuple[DeepSetNet, dict[str, Any]]:
    """Train the DeepSet on random/biased sub-panels of ``values`` (U, D); returns (net, report)."""
    with _torch_threads(1):
        return _train(values, pool, settings)


def _train(values: np.ndarray, pool: np.ndarray, settings: Any) -> tuple[DeepSetNet, dict[str, Any]]:
    gen = torch_generator(settings.seed)
    rng = np.random.default_rng(settings.seed)
    u, d = values.shape
    net = DeepSetNet(d, settings.width, gen)
    opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
    x_all = as_torch(values, dtype=DTYPE)

    def batch(n: int, b: int, biased: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        idx = np.where(biased[:, None], pool[rng.integers(0, pool.size, (b, n))], rng.integers(0, u, (b, n)))
        return x_all[as_torch(idx)], _heat(values[idx])

    calib = np.concatenate([batch(n, 64, np.arange(64) % 2 == 0)[1] for n in settings.sizes])
    mu, sd = float(np.log(calib + SHIFT).mean()), float(np.log(calib + SHIFT).std() + 1e-12)
    # f does not vary over the calibration subsets (e.g. no topic activity): R² is undefined
    constant_target = float(np.ptp(calib.astype(np.float64))) <= 1e-12 * max(1.0, float(np.abs(calib).max()))
    t0 = time.perf_counter()
    losses = []
    for step in range(settings.train_steps):
        n = settings.sizes[step % len(settings.sizes)]
        z, f = batch(n, settings.batch, rng.random(settings.batch) < 0.5)
        y = as_torch((np.log(f + SHIFT) - mu) / sd, dtype=DTYPE)
        loss = torch.mean((net(z) - y) ** 2)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    train_s = time.perf_counter() - t0
    fid = {}
    with torch.no_grad():
        for label, flag in (("random", False), ("biased", True)):
            ys, ps = [], []
            for n in settings.sizes:
                z, f = batch(n, 64, np.full(64, flag))
                ys.append((np.log(f + SHIFT) - mu) / sd)
                ps.append(net(z).numpy())
            yv, pv = np.concatenate(ys), np.concatenate(ps)
            spread = float(np.sum((yv - yv.mean()) ** 2))
            # R² is undefined when the targets do not vary: reported as null, not as -inf or noise
            fid[label] = None if constant_target or spread <= 0 else float(1 - np.sum((yv - pv) ** 2) / spread)
    return net, {"train_seconds": train_s, "steps": settings.train_steps, "final_loss": float(np.mean(losses[-50:])),
                 "heldout_r2": fid, "target": {"shift": SHIFT, "mu": mu, "sd": sd}}


def _reference_passes(f: DeepSetIndicator, values: np.ndarray, k: int, measured: int,
                      device: torch.device = CPU) -> float:
    """Seconds for k forward+backward passes of the network on the full panel (on ``device``).

    ``measured`` (≤ k) passes at evenly spaced path points are timed and scaled to k (each pass
    costs the same: same shapes, same operations).
    """
    x = as_torch(values[None], dtype=f.net.dtype).to(device)
    m = max(1, min(k, measured))
    t0 = time.perf_counter()
    for j in range(m):
        z = (x * ((j + 0.5) / m)).requires_grad_(True)
        torch.autograd.grad(f(z).sum(), z)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) * k / m


#: the wall-clock members of run_deepset's result (and ``train_seconds`` of its ``training``): how long, not a
#: result. ``deepset.json`` and the study's ``summary.json`` leave them out (the same counts and settings give
#: the same bytes); the study records them in ``manifest.json`` (``deepset_seconds``)
WALL_CLOCK = ("attribution_seconds", "reference_seconds_K_fwd_bwd", "time_ratio")


def without_wall_clock(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (:func:`run_deepset`'s) less its wall-clock members."""
    out = {k: v for k, v in result.items() if k not in WALL_CLOCK}
    if isinstance(out.get("training"), dict):
        out["training"] = {k: v for k, v in out["training"].items() if k != "train_seconds"}
    return out


def wall_clock(result: dict[str, Any]) -> dict[str, Any]:
    """The wall-clock members of :func:`run_deepset`'s ``result`` (``train_seconds`` among them)."""
    out = {k: result[k] for k in WALL_CLOCK if k in result}
    training = result.get("training")
    if isinstance(training, dict) and "train_seconds" in training:
        out = {"train_seconds": training["train_seconds"], **out}
    return out


def run_deepset(counts: RawCounts, out: str | os.PathLike[str], cfg: Any, log: Any = print) -> dict[str, Any]:
    """Train, attribute at full scale and on the study's N = 100 subsets; write ``deepset.json`` (what the counts
    and settings determine, the same bytes on every run) and ``deepset.md``. Returns the result with its wall-clock
    members too (:data:`WALL_CLOCK`, ``training.train_seconds``)."""
    s = cfg.deepset_settings
    device = resolve_device(s.device)  # a bad device fails before training, not after
    out = Path(out)
    panel = counts.window_panel(s.topic)
    panel = panel.astype(np.float32)
    values = panel.values[0]
    posts = counts.topic_matrix(s.topic, "posts")
    replies = counts.topic_matrix(s.topic, "replies_received").sum(0)
    if not posts.any():
        raise ZeroDeltaVError(f"deepset topic {s.topic!r} has no activity in the counts: nothing to learn or attribute")
    pools = build_pools(s.topic, counts.followers(), posts.sum(0), replies, pool_fraction=cfg.pool_fraction,
                        active_count=int(np.median((posts > 0).sum(1))), k_min=cfg.k_min)
    net, report = train(values, pools.pool("BIAS_visibility"), s)
    f = DeepSetIndicator(net)
    method = AumannShapley(steps=s.steps, power=s.power, device=device)
    log(f"deepset: trained in {report['train_seconds']:.1f} s; attributing {panel.N:,} agents with K={s.steps}, "
        f"tau=u^{s.power:g} on {device}")
    t0 = time.perf_counter()
    res = attribute(f, panel, method=method)
    attr_s = time.perf_counter() - t0
    ref_s = _reference_passes(f, values, s.steps, s.reference_passes, device)
    dv = float(res.delta_v[0])
    if dv == 0.0:
        raise ZeroDeltaVError(f"deepset topic {s.topic!r}: Δv = 0 on the full panel; shares are undefined")
    share = res.phi[0] / dv
    code = tier_codes(np.asarray(panel.groups["tier"]))
    labels = np.asarray(TIER_LABELS)

    def tier_shares(sh: np.ndarray, c: np.ndarray) -> list[float]:
        return [100 * r for r in group_shares(sh, labels[c], total=1.0, groups=TIER_LABELS).values()]

    rows: dict[str, Any] = {"FULL": {"R": dict(zip(TIER_LABELS, tier_shares(share, code))), "eps": None}}
    n_subset = min(s.n_subset, panel.N)
    for protocol in ("BIAS_visibility", "RAND"):
        rs, eps, degenerate = [], [], 0
        for seed in cfg.seeds:
            S = sample(pools, protocol, n_subset, seed)
            r = attribute(f, panel.take_agents(S), method=method)
            if r.delta_v[0] == 0:  # no activity in S: shares undefined, counted instead of dividing by zero
                degenerate += 1
                continue
            sh = r.phi[0] / r.delta_v[0]
            rs.append(tier_shares(sh, code[S]))
            try:
                eps.append(best_scalar(sh, share[S])[1])
            except ZeroDeltaVError:
                degenerate += 1
        if not rs or not eps:
            rows[protocol] = {"R": None, "eps": None, "degenerate_seeds": degenerate}
            continue
        rs_a = np.asarray(rs)
        rows[protocol] = {"R": {k: float(rs_a[:, i].mean()) for i, k in enumerate(TIER_LABELS)},
                          "R_std": {k: float(rs_a[:, i].std(ddof=1)) if len(rs) > 1 else 0.0
                                    for i, k in enumerate(TIER_LABELS)},
                          "eps": float(np.mean(eps)), "eps_std": float(np.std(eps, ddof=1)) if len(eps) > 1 else 0.0,
                          "degenerate_seeds": degenerate}
    result = {
        "synthetic": bool(counts.meta.get("synthetic", False)), "topic": s.topic, "users": panel.N,
        "settings": s.model_dump(), "training": report,
        # |Σφ − Δv| / |Δv| with Σφ accumulated in float64 (the float32 sum can hide the gap)
        "efficiency_gap_relative": float(abs(res.phi[0].astype(np.float64).sum() - dv) / abs(dv)),
        "device": str(device), "attribution_seconds": attr_s, "reference_seconds_K_fwd_bwd": ref_s,
        "time_ratio": attr_s / ref_s,
        "reference_passes_timed": max(1, min(s.steps, s.reference_passes)),
        "table": rows,
    }
    write_json(out / "deepset.json", without_wall_clock(result))
    md = ("> **SYNTHETIC panel** — not real Bluesky data.\n\n" if result["synthetic"] else "") + \
        f"DeepSet on {s.topic}: tier shares (%) and ε; efficiency gap " \
        f"{100 * result['efficiency_gap_relative']:.3f} %\n\n" \
        "| panel | R_top | R_mid | R_tail | ε |\n|---|---|---|---|---|\n"
    for name, r in rows.items():
        std = r.get("R_std", {k: None for k in TIER_LABELS})
        cells = ["–" if r["R"] is None else f"{r['R'][k]:.1f}" + (f" ± {std[k]:.1f}" if std[k] is not None else "")
                 for k in TIER_LABELS]
        eps_txt = "–" if r["eps"] is None else f"{r['eps']:.3f} ± {r['eps_std']:.3f}"
        md += f"| {name} | " + " | ".join(cells) + f" | {eps_txt} |\n"
    write_text(out / "deepset.md", md)
    return result


__all__ = ["WALL_CLOCK", "DeepSetIndicator", "DeepSetNet", "run_deepset", "train", "wall_clock",
           "without_wall_clock"]
