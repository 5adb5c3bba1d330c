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
    """Run alone in a fresh process too: the first measured point also pays autograd's first-use set-up
    (~7 MiB of resident set), which once made a tiny budget a MemoryBudgetError depending on test order."""
    z = np.abs(rng.normal(size=(3, 400, 3)))
    batches: list[int] = []

    def f(x):
        batches.append(x.shape[0] if x.dim() == 3 else 1)
        return torch.log1p(x.mean(-2).prod(-1))

    whole = attribute(f, Panel(z), method=AumannShapley(steps=16))
    largest = max(batches)
    assert largest >= 16  # at least one step's 16 points in one batch
    batches.clear()
    chunked = attribute(f, Panel(z), method=AumannShapley(steps=16, memory_budget=2**18))
    assert max(batches) < 16  # each step's 16 points in several batches
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


def _network_game(n: int, seed: int = 3):
    import scipy.sparse as sp

    from aumann.attribution import NetworkQuadratic

    A = sp.random(n, n, density=0.05, random_state=seed)
    A = A + A.T
    A.setdiag(0)
    A.eliminate_zeros()
    return NetworkQuadratic(sp.csr_matrix(A), lambda z: z[..., 0] * z[..., 1] + 0.3 * z[..., 2] ** 2, scale=0.5)


@needs_cuda
@pytest.mark.parametrize("name", ["heat", "var", "network"])
@pytest.mark.parametrize("antithetic", [False, True])
def test_control_variate_and_network_walks_on_cuda_equal_cpu_on_the_same_draws(name, antithetic, rng):
    """The estimators whose host paths run compiled kernels (paired products, edge walks, the control
    variate's slopes) fall back to torch on the GPU; the same permutations give the same estimate."""
    from aumann.attribution import SampledShapleyCV

    n = 300
    f = _network_game(n) if name == "network" else name
    z = np.abs(rng.normal(size=(2, n, 3)))
    for method in (SampledShapley(permutations=40, antithetic=antithetic),
                   SampledShapleyCV(permutations=40, antithetic=antithetic)):
        cpu = attribute(f, Panel(z), method=method, rng=5)
        gpu = attribute(f, Panel(z), method=method, rng=5, device="cuda")
        np.testing.assert_allclose(gpu.phi, cpu.phi, rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(gpu.stderr, cpu.stderr, rtol=1e-7, atol=1e-13)
        assert gpu.provenance["device"].startswith("cuda") and cpu.provenance["device"] == "cpu"


@needs_cuda
def test_network_path_integral_and_masked_players_on_cuda_equal_cpu(rng):
    n = 400
    f = _network_game(n, seed=4)
    z = np.abs(rng.normal(size=(3, n, 3)))
    alive = rng.random((3, n)) > 0.2
    for method in (AumannShapley(steps=16), SampledShapley(permutations=20, antithetic=True)):
        cpu = attribute(f, Panel(z, alive=alive), method=method, rng=2)
        gpu = attribute(f, Panel(z, alive=alive), method=method, rng=2, device="cuda")
        np.testing.assert_allclose(gpu.phi, cpu.phi, rtol=1e-9, atol=1e-13)
        assert np.all(gpu.phi[~alive] == 0)
