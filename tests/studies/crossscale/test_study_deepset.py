"""The learned DeepSet indicator (Appendix Q): pooled declaration, batching, training determinism,
path-integral efficiency with τ = u⁴ and K = 120, and the --deepset study output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aumann.attribution import AumannShapley, Panel, attribute
from aumann.data.bluesky.synth import SynthConfig, generate
from aumann.seeding import torch_generator
from aumann.studies.crossscale.deepset import (
    WALL_CLOCK,
    DeepSetIndicator,
    DeepSetNet,
    run_deepset,
    train,
    wall_clock,
)
from aumann.studies.crossscale.study import CrossScaleConfig, DeepSetSettings


@pytest.fixture(scope="module")
def values() -> np.ndarray:
    rng = np.random.default_rng(0)
    z = np.abs(rng.normal(1.0, 1.0, size=(3000, 3)))
    z[:, 1:] *= rng.random((3000, 2)) < 0.2  # sparse activity, like topic features
    return z.astype(np.float32)


def test_pooled_form_reproduces_the_network_and_batches() -> None:
    f = DeepSetIndicator(DeepSetNet(3, 8, torch_generator(1)))
    z = torch.rand(2, 4, 50, 3)
    out = f(z)
    assert out.shape == (2, 4)
    pooled = f.pooled.rho(f.pooled.psi(z).mean(dim=-2))
    torch.testing.assert_close(out, pooled)
    # nonlinear across agents: the value of a union is not the size-weighted mean of the parts
    a, b = torch.rand(1, 30, 3), 3 * torch.rand(1, 30, 3)
    union = f(torch.cat([a, b], dim=1))
    assert not torch.allclose(union, (f(a) + f(b)) / 2, atol=1e-4)


def test_training_is_deterministic_and_fits(values) -> None:
    s = DeepSetSettings(width=8, train_steps=60, batch=8, sizes=[64, 256])
    pool = np.argsort(-values.sum(1))[:150]
    net1, rep1 = train(values, pool, s)
    net2, rep2 = train(values, pool, s)
    for p1, p2 in zip(net1.parameters(), net2.parameters()):
        assert torch.equal(p1, p2)
    assert rep1["final_loss"] == rep2["final_loss"] and np.isfinite(rep1["final_loss"])
    assert set(rep1["heldout_r2"]) == {"random", "biased"}


def test_u4_substitution_keeps_the_efficiency_gap_small(values) -> None:
    s = DeepSetSettings(width=8, train_steps=60, batch=8, sizes=[64, 256])
    net, _ = train(values, np.arange(100), s)
    panel = Panel(values[:400], features=["a", "b", "c"])
    res = attribute(DeepSetIndicator(net), panel, method=AumannShapley(steps=120, power=4))
    assert res.relative_efficiency_gap[0] <= 3e-3


def test_run_deepset_writes_the_table(tmp_path) -> None:
    counts = generate(SynthConfig(users=5000, seed=2))
    cfg = CrossScaleConfig(seeds=[0, 1], deepset=True,
                      deepset_settings=DeepSetSettings(width=8, train_steps=40, batch=8, sizes=[64, 256], steps=60))
    out = run_deepset(counts, tmp_path, cfg, log=lambda *_: None)
    assert out["synthetic"] is True and (tmp_path / "deepset.md").read_text().startswith("> **SYNTHETIC")
    assert set(out["table"]) == {"FULL", "BIAS_visibility", "RAND"}
    assert sum(out["table"]["FULL"]["R"].values()) == pytest.approx(100.0, abs=0.5)
    assert out["efficiency_gap_relative"] <= 3e-3
    assert out["time_ratio"] > 0 and out["reference_seconds_K_fwd_bwd"] > 0


def test_deepset_json_holds_no_wall_clock_so_two_runs_write_the_same_bytes(tmp_path) -> None:
    """deepset.json (and the study's summary.json, which carries the same dict) held train_seconds,
    attribution_seconds, reference_seconds_K_fwd_bwd and time_ratio: the same counts and settings wrote other
    bytes on every run. They are the manifest's (deepset_seconds) now; run_deepset still returns them."""
    counts = generate(SynthConfig(users=2000, seed=2))
    cfg = CrossScaleConfig(seeds=[0], deepset=True,
                      deepset_settings=DeepSetSettings(width=8, train_steps=20, batch=8, sizes=[64], steps=20))
    files = []
    for name in ("a", "b"):
        out = run_deepset(counts, tmp_path / name, cfg, log=lambda *_: None)
        assert out["time_ratio"] > 0 and out["training"]["train_seconds"] > 0  # returned, for the caller
        files.append((tmp_path / name / "deepset.json").read_bytes())
    assert files[0] == files[1]
    stored = json.loads(files[0])
    assert not set(WALL_CLOCK) & set(stored) and "train_seconds" not in stored["training"]
    assert set(wall_clock(out)) == {"train_seconds", *WALL_CLOCK}


def test_the_indicator_follows_its_input_and_its_pooled_form_takes_float64() -> None:
    net = DeepSetNet(3, 8, torch_generator(4), dtype=torch.float64)
    f = DeepSetIndicator(net)
    assert f.on(torch.device("cpu")) is f.net
    z = torch.rand(2, 40, 3, dtype=torch.float64)
    torch.testing.assert_close(f(z), f.pooled.rho(f.pooled.psi(z).mean(dim=-2)), rtol=1e-12, atol=1e-12)
    res = attribute(f, Panel(z.numpy()), method=AumannShapley(steps=60, power=4), device="cpu")
    assert res.relative_efficiency_gap.max() <= 1e-3


def test_a_bad_device_fails_before_training(tmp_path) -> None:
    from aumann.errors import MethodError

    counts = generate(SynthConfig(users=500, seed=2))
    cfg = CrossScaleConfig(seeds=[0], deepset=True, deepset_settings=DeepSetSettings(device="gpu0"))
    with pytest.raises(MethodError, match="gpu0"):
        run_deepset(counts, tmp_path, cfg, log=lambda *_: None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_deepset_attribution_on_cuda_equals_cpu() -> None:
    f = DeepSetIndicator(DeepSetNet(3, 8, torch_generator(4), dtype=torch.float64))
    z = np.abs(np.random.default_rng(1).normal(1.0, 1.0, size=(2, 3000, 3)))
    method = AumannShapley(steps=120, power=4)
    cpu = attribute(f, Panel(z), method=method)
    gpu = attribute(f, Panel(z), method=method, device="cuda")
    np.testing.assert_allclose(gpu.phi, cpu.phi, rtol=1e-10, atol=1e-16)
