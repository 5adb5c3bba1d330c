"""A FeatureRecorder's buffer grown by births is checked against the machine's memory before it grows.

Scenario.check_size sees the population at the start; the recorder keeps one row per agent ever seen for every
step, so a model whose agents are born each step grows it past that check (20,000 births a step over 2,000 steps:
numpy asked for 2.4 GiB at the 8th capture, and a growth the kernel grants but the machine cannot hold ends in the
OOM killer). Here the machine's memory is patched down to a few hundred kB.
"""

from __future__ import annotations

import pytest

import aumann.simulators.recorder as recorder
from aumann.errors import MemoryBudgetError
from aumann.simulators import ArrayRecorder, FeatureRecorder, simulate


class Agent:
    __slots__ = ("__weakref__", "unique_id", "w")

    def __init__(self, i: int) -> None:
        self.unique_id, self.w = i, 1.0


class Births:
    """10 agents, then ``births`` more every step."""

    def __init__(self, births: int) -> None:
        self.pop = [Agent(i) for i in range(10)]
        self.births = births


def step(model: Births) -> None:
    n = len(model.pop)
    model.pop.extend(Agent(n + k) for k in range(model.births))


def record(births: int, steps: int = 100):
    return simulate(Births(births), steps=steps, step=step,
                    recorder=FeatureRecorder({"w": "w"}, agents=lambda m: m.pop))


def test_births_past_the_memory_are_a_typed_error_naming_the_capture(monkeypatch):
    # 100 steps x 9 bytes a row: 900 bytes an agent; 400 kB hold ~440 rows (old and new buffer together)
    monkeypatch.setattr(recorder, "memory_bytes", lambda: 400_000, raising=False)
    with pytest.raises(MemoryBudgetError, match=r"outgrows this machine's memory at capture \d+: [\d,]+ agents seen"):
        record(births=50)


def test_a_run_that_fits_only_without_doubling_grows_to_what_it_needs(monkeypatch):
    # 10 then 110 agents (capture 0), 210 (capture 1): doubling 110 -> 220 rows would hold (110 + 220) * 18 bytes
    # (2 steps) = 5,940; exactly 110 + 210 rows = 5,760 fit
    monkeypatch.setattr(recorder, "memory_bytes", lambda: 5_800, raising=False)
    panel = record(births=100, steps=2)
    assert panel.values.shape == (2, 210, 1)
    assert panel.alive is not None and panel.alive.sum() == 110 + 210


def test_a_recording_that_cannot_fit_from_its_first_capture_is_refused_before_it_steps(monkeypatch):
    # 100 steps x 10 agents x 9 bytes = 9,000 bytes: refused at the start, before the model takes a step
    monkeypatch.setattr(recorder, "memory_bytes", lambda: 8_999, raising=False)
    model = Births(births=0)
    stepped: list[int] = []
    with pytest.raises(MemoryBudgetError, match=r"100 steps × 10 agents × 1 feature\(s\) \(float64\) need"):
        simulate(model, steps=100, step=lambda m: stepped.append(1),
                 recorder=FeatureRecorder({"w": "w"}, agents=lambda m: m.pop))
    assert not stepped


def test_an_array_recording_that_cannot_fit_is_refused_at_its_first_capture(monkeypatch):
    # 100 steps x 10 agents x (4 bytes of float32 + 1 of the mask) = 5,000 bytes
    import numpy as np

    monkeypatch.setattr(recorder, "memory_bytes", lambda: 4_999, raising=False)
    model = Births(births=0)
    with pytest.raises(MemoryBudgetError, match=r"100 steps × 10 agents × 1 feature\(s\) \(float32\) need"):
        simulate(model, steps=100, step=lambda m: None,
                 recorder=ArrayRecorder(lambda m: {"w": np.ones(10)}, dtype=np.float32))
