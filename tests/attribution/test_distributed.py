"""Attribution that scales out: blocks of steps and of permutations on an executor give the
single-process bits; blocked estimators agree with exact Shapley/Banzhaf within their standard errors."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.attribution import (
    AumannShapley,
    ExactBanzhaf,
    ExactShapley,
    LeaveOneOut,
    Panel,
    SampledBanzhaf,
    SampledShapley,
    attribute,
    indicators,
)
from aumann.errors import MethodError


class ListExecutor:
    """The tiniest executor: anything with ``map(fn, items)`` (runs here, in item order)."""

    def __init__(self, workers: int = 3) -> None:
        self.max_workers = workers
        self.calls = 0

    def map(self, fn, items):
        self.calls += 1
        return [fn(it) for it in items]


def _same(a, b) -> bool:
    arrays = ("phi", "delta_v", "f_values", "f_baseline", "stderr", "phi_features")
    return all((getattr(a, k) is None and getattr(b, k) is None) or
               (getattr(a, k).tobytes() == getattr(b, k).tobytes()) for k in arrays) \
        and a.n_evals == b.n_evals and a.efficiency_gap.tobytes() == b.efficiency_gap.tobytes()


PANEL = Panel(np.abs(np.random.default_rng(0).normal(size=(7, 30, 3))))
METHODS = [SampledShapley(24), SampledShapley(24, antithetic=True), SampledShapley(16, common_permutations=True),
           SampledBanzhaf(40), SampledBanzhaf(8, estimator="marginal"), LeaveOneOut(), AumannShapley(),
           AumannShapley(closed_form=False, steps=8),
           AumannShapley(steps=2, tol=1e-12, max_steps=16, closed_form=False), SampledShapley(40, block_size=8)]


@pytest.mark.parametrize("method", METHODS, ids=repr)
@pytest.mark.parametrize("baseline", ["zero", "previous"])
@pytest.mark.parametrize("indicator", ["heat", "gini"])
def test_step_blocks_on_an_executor_give_the_single_process_bits(method, baseline, indicator):
    f = indicators.get(indicator)
    a = attribute(f, PANEL, method, baseline=baseline, rng=5)
    for workers in (1, 3, 16):
        ex = ListExecutor(workers)
        b = attribute(f, PANEL, method, baseline=baseline, rng=5, executor=ex)
        assert _same(a, b), f"{method!r} on {workers} workers differs from one process"
        assert b.provenance["seed"] == 5 and b.provenance["baseline"] == a.provenance["baseline"]
        # the saved file is the same bytes too (run records carry its checksum): no trace of the executor
        strip = (lambda p: {k: v for k, v in p.items() if k != "seconds"})  # noqa: E731
        assert strip(b.provenance) == strip(a.provenance)


def _dies_late() -> Panel:
    """Every agent alive in the first steps; agent 3 dies at step 4 (and agent 0 never changes)."""
    z = np.abs(np.random.default_rng(2).normal(size=(7, 12, 3)))
    z[:, 0] = z[0, 0]
    alive = np.ones((7, 12), bool)
    alive[4:, 3] = False
    return Panel(z, alive=alive)


@pytest.mark.parametrize("method", [SampledShapley(16), SampledBanzhaf(24), ExactShapley(), LeaveOneOut(),
                                    AumannShapley(closed_form=False, steps=4)], ids=repr)
def test_provenance_of_a_panel_whose_first_block_has_no_dead_agent(method):
    """A note one block sets (``baseline_alive``: an agent dead in a later block) is kept, not only the first
    block's notes: the provenance (and so the saved file) is the single-process run's."""
    panel = _dies_late()
    a = attribute("gini", panel, method, baseline="previous", rng=5)
    assert a.provenance["baseline_alive"] == "run"
    b = attribute("gini", panel, method, baseline="previous", rng=5, executor=ListExecutor(3))
    assert _same(a, b)
    strip = (lambda p: {k: v for k, v in p.items() if k != "seconds"})  # noqa: E731
    assert strip(b.provenance) == strip(a.provenance)
    assert list(b.provenance) == list(a.provenance)  # in the same order: the same bytes once saved


def test_which_methods_fan_out():
    for method, fans in ((SampledShapley(8), True), (LeaveOneOut(), True), (AumannShapley(closed_form=False), True),
                         (AumannShapley(), False)):  # heat's closed form: one streaming pass, kept in the driver
        ex = ListExecutor(3)
        attribute("gini" if fans else "heat", PANEL, method, rng=0, executor=ex)
        assert (ex.calls > 0) == fans, method


def test_the_callers_generator_advances_as_in_one_process():
    g1, g2 = np.random.default_rng(11), np.random.default_rng(11)
    a = attribute("heat", PANEL, SampledShapley(10), rng=g1)
    b = attribute("heat", PANEL, SampledShapley(10), rng=g2, executor=ListExecutor(4))
    assert _same(a, b)
    assert g1.integers(2**62) == g2.integers(2**62)  # the next draw is the same too


def test_step_blocks_through_a_process_pool():
    from aumann.simulators import LocalExecutor

    with LocalExecutor(2, mp_context="fork") as pool:
        for method in (SampledShapley(20, antithetic=True), AumannShapley(closed_form=False, steps=6)):
            a = attribute("gini", PANEL, method, rng=3)
            assert _same(a, attribute("gini", PANEL, method, rng=3, executor=pool))


def test_a_panel_laid_out_agent_major_keeps_its_layout_and_its_bits():
    """Recorders lay (T, N, D) out N-major; kernels reduce in memory order, so blocks keep the layout
    (in the driver and on the wire) and give the single-process bits."""
    from aumann.simulators import LocalExecutor

    z = np.abs(np.random.default_rng(4).normal(size=(30, 5, 3)))  # (N, T, D) in memory
    panel = Panel(z.transpose(1, 0, 2))
    assert not panel.values.flags.c_contiguous
    with LocalExecutor(2, mp_context="fork") as pool:
        for method in (AumannShapley(closed_form=False, steps=6), SampledShapley(12)):
            a = attribute("gini", panel, method, rng=1)
            for ex in (ListExecutor(16), pool):
                assert _same(a, attribute("gini", panel, method, rng=1, executor=ex)), (method, ex)


GAME = Panel(np.abs(np.random.default_rng(1).normal(size=(1, 9, 2))))


@pytest.mark.parametrize(("method", "exact"), [
    (SampledShapley(3000, block_size=400), ExactShapley()),
    (SampledShapley(3000, block_size=256, fast=False), ExactShapley()),
    (SampledBanzhaf(6000, block_size=1000), ExactBanzhaf()),
    (SampledBanzhaf(2000, estimator="marginal", block_size=300), ExactBanzhaf()),
], ids=repr)
def test_permutation_blocks_estimate_the_exact_values_and_do_not_depend_on_the_executor(method, exact):
    f = indicators.get("var")
    ref = attribute(f, GAME, exact).phi[0]
    here = attribute(f, GAME, method, rng=7)
    there = attribute(f, GAME, method, rng=7, executor=ListExecutor(3))
    assert _same(here, there)
    z = np.abs(here.phi[0] - ref) / here.stderr[0]
    assert z.max() < 4.5, z  # 9 agents, a fixed seed: within the standard errors
    info = here.provenance["per_step"]
    assert info["block_size"] == method.block_size and info["blocks"] > 1
    if isinstance(method, SampledShapley):
        assert abs(here.phi.sum() - here.delta_v[0]) < 1e-12  # every permutation is efficient, so every block is


def test_a_stopping_rule_is_checked_after_each_block_in_order():
    m = SampledShapley(5000, block_size=200, stderr_tol=0.01)
    f = indicators.get("var")
    a = attribute(f, GAME, m, rng=2)
    b = attribute(f, GAME, m, rng=2, executor=ListExecutor(4))
    assert _same(a, b)
    info = a.provenance["per_step"]
    assert info["stopped"] == "stderr_tol" and info["permutations"] < 5000
    assert a.stderr.max() < 0.01


def test_block_size_is_validated_and_recorded_only_when_set():
    with pytest.raises(MethodError, match="block_size"):
        SampledShapley(10, block_size=1)
    assert "block_size" not in attribute("heat", PANEL, SampledShapley(10), rng=0).provenance
    assert attribute("heat", PANEL, SampledShapley(10, block_size=4), rng=0).provenance["block_size"] == 4


class DeadPool:
    """An executor whose pool has died: every map raises."""

    max_workers = 3

    def map(self, fn, items):
        raise OSError("pool died")


@pytest.mark.parametrize("method", [SampledShapley(permutations=8), SampledShapley(permutations=8, block_size=4),
                                    AumannShapley(closed_form=False, steps=8)],
                         ids=["step_blocks", "permutation_blocks", "path_blocks"])
def test_an_executor_that_fails_is_an_executor_error_not_the_indicators(method):
    # the blocks run inside the indicator's error boundary: a dead pool was reported as "indicator 'var' raised
    # OSError: pool died", and an executor without map as a bare AttributeError (or again as the indicator's)
    from aumann.errors import ExecutorError, IndicatorError

    panel = Panel(np.abs(np.random.default_rng(0).normal(size=(2, 5, 2))) + 0.1)
    with pytest.raises(ExecutorError, match=r"executor DeadPool failed .*OSError: pool died") as info:
        attribute("var", panel, method=method, executor=DeadPool(), rng=0)
    assert not isinstance(info.value, IndicatorError)
    with pytest.raises(MethodError, match="executor must have a map"):
        attribute("var", panel, method=method, executor=3, rng=0)
    with pytest.raises(MethodError, match="executor must have a map"):  # even where no block would be shipped
        attribute("var", panel, method=AumannShapley(), executor="ray", rng=0)


def test_a_lambda_a_process_pool_cannot_ship_is_an_executor_error():
    from concurrent.futures import ProcessPoolExecutor

    from aumann.errors import ExecutorError

    panel = Panel(np.abs(np.random.default_rng(0).normal(size=(2, 5, 2))) + 0.1)
    with ProcessPoolExecutor(max_workers=1) as pool, pytest.raises(ExecutorError, match=r"Pickl|pickle"):
        attribute(lambda z: (z**2).mean((-1, -2)), panel, method=SampledShapley(permutations=4), executor=pool, rng=0)
