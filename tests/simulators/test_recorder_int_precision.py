"""Recorded integers past ±2**53 are counted (``meta["rounded_values"]``) and warned of (PrecisionLossWarning), as
``Panel`` does for int64 input: the recorders wrote them into float64 buffers and 2**53 + 1 became 2**53 silently.
The values stay accepted (the nearest double, as before)."""

from __future__ import annotations

import warnings
from decimal import Decimal
from fractions import Fraction

import mesa
import numpy as np
import pytest
import torch

from aumann.errors import FeatureValueError, PrecisionLossWarning
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


F32 = 2**24 + 1  # the first integer float32 does not hold: stored as 2**24


def _float32_panel(cols: dict, steps: int = 2, alive: np.ndarray | None = None, **kw):
    rec = ArrayRecorder(lambda m: cols, dtype=np.float32, alive=None if alive is None else (lambda m: alive))
    return simulate(_Model([]), steps, rec, **kw)


def test_float32_array_recorder_counts_the_integers_float32_changes_and_warns_naming_float32():
    """ArrayRecorder(dtype=float32) stored 2**24 + 1 as 2**24 without a word: only float64's rounding (past 2**53)
    was counted. Integers float32 changes are counted in the same meta, marked float32, in one warning."""
    cols = {"a": np.array([F32, 3, -(2**31 - 1), 2**30], dtype=np.int32),  # int32: past 2**24 too
            "b": [F32, 1, 2, 2**24],  # Python ints
            "c": np.array([F32 + 0.0, 1.5, 2.0**30, 7.0])}  # floats: float32's rounding of a float is not counted
    with pytest.warns(PrecisionLossWarning) as rec:
        p = _float32_panel(cols, context={"clock": lambda m: BIG})
    assert p.values.dtype == np.float32
    assert p.meta["rounded_values"] == {
        "features": {"a": {"count": 4, "largest": 2**31 - 1, "dtype": "float32"},
                     "b": {"count": 2, "largest": F32, "dtype": "float32"}},
        "context": {"clock": {"count": 2, "largest": BIG}}}  # context is float64
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "on their way to float32" in msg
    assert "feature 'a' (ArrayRecorder, float32): 4 value(s), the largest 2,147,483,647 (now 2,147,483,648)" in msg
    assert "feature 'b' (ArrayRecorder, float32): 2 value(s), the largest 16,777,217 (now 16,777,216)" in msg
    assert "context 'clock' (ArrayRecorder): 2 value(s)" in msg and "'c'" not in msg
    assert p.values[0, 0, 0] == 2**24  # kept as the nearest float32, as before


def test_float32_array_recorder_counts_living_rows_only_and_exact_integers_say_nothing():
    alive = np.array([True, False, True])
    with pytest.warns(PrecisionLossWarning, match=r"feature 'v' \(ArrayRecorder, float32\): 2 value"):
        p = _float32_panel({"v": np.array([F32, F32 + 2, 5], dtype=np.int64)}, alive=alive)
    assert p.meta["rounded_values"]["features"]["v"]["count"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        q = _float32_panel({"v": np.array([2**24, -(2**24), 2**40, 1], dtype=np.int64)})  # exact as float32
    assert "rounded_values" not in q.meta


def test_float32_array_recorder_refuses_a_value_past_float32s_range_at_its_capture():
    """1e39 (finite, and a double) became inf in a float32 panel, refused only after the last step by the Panel as
    "NaN/inf value(s) in live rows", which the feature never returned. Now the capture says what happened."""
    with pytest.raises(FeatureValueError, match=r"feature 'v' returned 1e\+39 for agent row 1 at capture 0, past "
                                                r"float32's range .*\(dtype=np.float64"):
        _float32_panel({"v": np.array([1.0, 1e39, -1e39])})
    with pytest.raises(FeatureValueError, match="past float32's range"):
        _float32_panel({"v": [1, 10**39]})
    p = _float32_panel({"v": np.array([1.0, 1e39, 3e38])}, alive=np.array([True, False, True]))  # a dead row: 0.0
    assert p.values[0, :, 0].tolist() == [1.0, 0.0, np.float32(3e38)]


@pytest.mark.parametrize("big", [Decimal(BIG), Fraction(BIG), np.array(BIG), torch.tensor(BIG)],
                         ids=["Decimal", "Fraction", "0-d ndarray", "0-d tensor"])
def test_other_exact_integers_the_recorder_takes_are_counted_too(big):
    """The recorder takes a Decimal (money), a Fraction and a 0-d array or tensor as a number (float(v)), and
    2**53 + 1 held so became 2**53 without a word: only int and numpy integers were looked at."""
    with pytest.warns(PrecisionLossWarning, match="feature 'v' \\(FeatureRecorder\\): 2 value"):
        p = simulate(_Model([big, 1]), 2, FeatureRecorder({"v": "v"}))
    assert p.meta["rounded_values"] == {"features": {"v": {"count": 2, "largest": BIG}}}


@pytest.mark.parametrize("values", [[Decimal(2**53), 1], [Decimal(BIG) + Decimal("0.5"), 1],
                                    [Fraction(2 * BIG + 1, 2), 1], [torch.tensor(2.0**60), 1]])
def test_exact_or_fractional_non_int_numbers_say_nothing(values):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        p = simulate(_Model(values), 1, FeatureRecorder({"v": "v"}))
    assert "rounded_values" not in p.meta
