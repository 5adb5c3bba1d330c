"""device=: resolution and typed errors (everywhere), CPU/GPU agreement (only where CUDA exists)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from aumann.attribution import (
    AumannShapley,
    LeaveOneOut,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    attribute,
)
from aumann.attribution.device import memory_budget, pick_device, resolve_device
from aumann.errors import MethodError

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="no CUDA device on this machine (GPU tests run only where one exists)")


def test_default_and_explicit_cpu():
    assert resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert pick_device(None, None) == torch.device("cpu")
    assert pick_device("cpu", torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu0", "cuda:abc", "cuda:-1", "", 3, 1.5])
def test_malformed_devices_are_method_errors_naming_the_device(bad):
    with pytest.raises(MethodError, match="device"):
        resolve_device(bad)
    with pytest.raises(MethodError):
        attribute("heat", Panel(np.ones((2, 3))), device=bad)


@pytest.mark.parametrize("kind", ["meta", "mps", "xpu"])
def test_unsupported_device_types(kind):
    with pytest.raises(MethodError, match=f"unsupported device '{kind}"):
        resolve_device(kind)


@pytest.mark.skipif(CUDA, reason="checks the message on machines without CUDA")
def test_cuda_without_cuda_is_a_typed_error_and_initialises_nothing():
    with pytest.raises(MethodError, match="CUDA is not available"):
        attribute("heat", Panel(np.ones((2, 3))), device="cuda")
    with pytest.raises(MethodError, match="'cuda:1'"):
        SampledShapley(permutations=4, device="cuda:1")
    assert not torch.cuda.is_initialized()


def test_call_and_method_devices_must_agree(monkeypatch):
    a, b = torch.device("cuda", 0), torch.device("cuda", 1)
    monkeypatch.setattr("aumann.attribution.device.resolve_device", lambda d: d)
    with pytest.raises(MethodError, match="disagrees"):
        pick_device(a, b)
    assert pick_device(None, b) == b and pick_device(a, None) == a


def test_memory_budget_sizing(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert memory_budget(cpu, None, 256 * 2**20) == 256 * 2**20
    assert memory_budget(gpu, 12345678, 256 * 2**20) == 12345678  # an explicit budget wins everywhere
    for free, want in [(10 * 2**30, 5 * 2**30), (100 * 2**30, 8 * 2**30), (2**20, 2**26)]:
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device, free=free: (free, 80 * 2**30))
        assert memory_budget(gpu, None, 256 * 2**20) == want


def test_device_cpu_changes_nothing(rng):
    z = np.abs(rng.normal(size=(2, 30, 3)))
    panel = Panel(z)
    f = lambda x: torch.tanh(x[..., 0] * x[..., 1]).mean(-1)  # noqa: E731 — generic autograd path
    for method in (AumannShapley(steps=12), SampledShapley(permutations=20), LeaveOneOut(),
                   SampledBanzhaf(samples=30)):
        ref = attribute(f, panel, method=method, rng=3)
        on_cpu = attribute(f, panel, method=method, rng=3, device="cpu")
        np.testing.assert_array_equal(ref.phi, on_cpu.phi)
        assert on_cpu.provenance["device"] == "cpu"


def test_small_memory_budget_chunks_points_without_changing_results(rng):
    z = np.abs(rng.normal(size=(3, 400, 3)))
    f = lambda x: torch.log1p(x.mean(-2).prod(-1))  # noqa: E731
    whole = attribute(f, Panel(z), method=AumannShapley(steps=16))
    chunked = attribute(f, Panel(z), method=AumannShapley(steps=16, memory_budget=2**16))
    np.testing.assert_allclose(chunked.phi, whole.phi, rtol=1e-12, atol=1e-18)
    with pytest.raises(MethodError, match="memory_budget"):
        AumannShapley(memory_budget=1000)


# ---------------------------------------------------------------------- CUDA (skipped without a GPU)
@needs_cuda
@pytest.mark.parametrize("baseline", ["zero", "mean"])
def test_path_integral_on_cuda_equals_cpu(baseline, rng):
    z = np.abs(rng.normal(size=(3, 2000, 3)))
    f = lambda x: torch.tanh(x[..., 0] * x[..., 1]).mean(-1) + x.mean(-2).prod(-1)  # noqa: E731
    m = AumannShapley(steps=24, closed_form=False, pooled_fast_path=False)
    cpu = attribute(f, Panel(z), method=m, baseline=baseline, per_feature=True)
    gpu = attribute(f, Panel(z), method=m, baseline=baseline, per_feature=True, device="cuda")
    np.testing.assert_allclose(gpu.phi, cpu.phi, rtol=1e-10, atol=1e-16)
    np.testing.assert_allclose(gpu.phi_features, cpu.phi_features, rtol=1e-10, atol=1e-16)
    assert gpu.provenance["device"].startswith("cuda")


@needs_cuda
@pytest.mark.parametrize("name", ["heat", "var", "lin"])
@pytest.mark.parametrize("antithetic", [False, True])
def test_running_sum_kernels_on_cuda_equal_cpu_on_the_same_draws(name, antithetic, rng):
    z = np.abs(rng.normal(size=(2, 500, 3)))
    m = SampledShapley(permutations=40, antithetic=antithetic)
    cpu = attribute(name, Panel(z), method=m, rng=7)
    gpu = attribute(name, Panel(z), method=m, rng=7, device="cuda")
    np.testing.assert_allclose(gpu.phi, cpu.phi, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(gpu.stderr, cpu.stderr, rtol=1e-8, atol=1e-15)
    loo_cpu = attribute(name, Panel(z), method=LeaveOneOut())
    loo_gpu = attribute(name, Panel(z), method=LeaveOneOut(device="cuda"))
    np.testing.assert_allclose(loo_gpu.phi, loo_cpu.phi, rtol=1e-10, atol=1e-15)
