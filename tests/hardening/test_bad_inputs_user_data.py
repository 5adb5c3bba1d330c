"""A user's own arrays, tables and indicators handed to the library (round h17): what used to give a silently
wrong panel or attribution is now a typed error naming the problem, or the right answer."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.errors import BaselineError, PanelError
from aumann.panel import Panel


@pytest.mark.parametrize("unit", ["s", "ns"])
def test_durations_as_panel_values_are_refused_not_read_as_unit_counts(unit):
    # numpy counts timedelta64 as an integer: NaT became -9223372036854775808.0, a finite feature value, and the
    # unit decided the numbers (1 s was 1.0 or 1e9)
    durations = np.array([[[1], ["NaT"]]], dtype=f"timedelta64[{unit}]")
    with pytest.raises(PanelError, match=r"durations \(timedelta64.*np.timedelta64\(1, 's'\)"):
        Panel(durations)


def test_durations_as_context_or_baseline_are_refused_too():
    from aumann.attribution import attribute

    with pytest.raises(PanelError, match="context 'wait' must hold numbers; got durations"):
        Panel(np.ones((2, 2, 1)), context={"wait": np.array([1, 2], dtype="timedelta64[s]")})
    with pytest.raises(BaselineError, match="baseline must hold numbers; got durations"):
        attribute("lin", Panel(np.ones((2, 2, 1))), baseline=np.array([1], dtype="timedelta64[s]"))


def test_durations_converted_to_seconds_are_accepted():
    durations = np.array([[[1], [90]]], dtype="timedelta64[s]")
    p = Panel(durations / np.timedelta64(1, "s"))
    np.testing.assert_array_equal(p.values.ravel(), [1.0, 90.0])
