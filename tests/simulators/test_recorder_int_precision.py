"""Recorded integers past ±2**53 are counted (``meta["rounded_values"]``) and warned of (PrecisionLossWarning), as
``Panel`` does for int64 input: the recorders wrote them into float64 buffers and 2**53 + 1 became 2**53 silently.
The values stay accepted (the nearest double, as before)."""

from __future__ import annotations

import warnings

import mesa
import numpy as np
import pytest

from aumann.errors import PrecisionLossWarning
from aumann.simulators import ArrayRecorder, FeatureRecorder, simulate

BIG = 2**53 + 1


class _Agent(mesa.Agent):
    def __init__(self, model: mesa.Model, v: object) -> None:
        super().__init__(model)
        self.v = v


class _Model(mesa.Model):
    def __init__(self, values: list[object], arr: np.ndarray | None = None) -> None:
        super().__init__(rng=0)
        for v in values:
            _Agent(self, v)
        self.arr = arr
        self.clock = BIG

    def step(self) -> None:
        pass


def test_feature_recorder_counts_and_warns_of_python_ints_past_2_53():
    with pytest.warns(PrecisionLossWarning) as rec:
        p = simulate(_Model([BIG, 5, -(2**70 + 1)]), 2, FeatureRecorder({"v": "v"}))
    assert p.meta["rounded_values"] == {"features": {"v": {"count": 4, "largest": 2**70 + 1}}}
    assert len(rec) == 1
    assert "feature 'v' (FeatureRecorder): 4 value(s)" in str(rec[0].message)
    assert p.values[0, 0, 0] == float(BIG)  # kept as the nearest double


def test_array_recorder_counts_int64_columns_and_only_living_rows():
    arr = np.array([BIG, 3, BIG + 2], dtype=np.int64)
    alive = np.array([True, True, False])  # the third row is stored as 0.0: its integer is no recorded value
    with pytest.warns(PrecisionLossWarning, match="feature 'v' \\(ArrayRecorder\\): 3 value"):
        p = _array_panel(arr, alive)
    assert p.meta["rounded_values"] == {"features": {"v": {"count": 3, "largest": BIG}}}


def _array_panel(arr: np.ndarray, alive: np.ndarray | None):
    model = _Model([], arr)
    rec = ArrayRecorder(lambda m: {"v": m.arr}, alive=None if alive is None else (lambda m: alive))
    return simulate(model, 3, rec)


def test_context_integers_past_2_53_are_counted():
    with pytest.warns(PrecisionLossWarning, match="context 'clock'"):
        p = simulate(_Model([1, 2]), 2, FeatureRecorder({"v": "v"}), context={"clock": lambda m: m.clock})
    assert p.meta["rounded_values"] == {"context": {"clock": {"count": 2, "largest": BIG}}}


@pytest.mark.parametrize("values", [[2**53, -(2**53), 7], [2.0**60 + 0.0, 1.5], [2**60, 3]])
def test_exact_values_and_floats_say_nothing(values):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        p = simulate(_Model(values), 1, FeatureRecorder({"v": "v"}))
        q = _array_panel(np.array([2**53, 2**62, 1], dtype=np.int64), None)
    assert "rounded_values" not in p.meta and "rounded_values" not in q.meta


@pytest.mark.parametrize(("values", "count", "largest"), [
    ([BIG, np.int64(BIG + 2), 1], 2, BIG + 2),  # integers only (Python and numpy): judged as one int64 array
    ([BIG, 1.5, 2.0**60], 1, BIG),  # mixed with floats (floats past 2**53 are doubles as given): one by one
    ([np.uint64(2**64 - 1), 2], 1, 2**64 - 1),  # uint64's largest becomes 2**64 as a double
])
def test_lists_of_integer_kinds_are_counted_per_capture(values, count, largest):
    with pytest.warns(PrecisionLossWarning):
        p = simulate(_Model(values), 2, FeatureRecorder({"v": "v"}))
    assert p.meta["rounded_values"] == {"features": {"v": {"count": 2 * count, "largest": largest}}}
