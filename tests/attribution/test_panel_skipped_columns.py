"""Panel.from_dataframe without ``features=``: a column of numbers that pandas holds as ``object`` (bools beside
None, Decimals, numbers beside None in an object column) was skipped as if it were text, with nothing said but its
name in ``meta["skipped_columns"]``. It is still skipped (what a panel's features are does not change), and now a
SkippedColumnWarning names it and says how to keep it; text columns are skipped silently, as before."""

from __future__ import annotations

import warnings
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from aumann.errors import SkippedColumnWarning
from aumann.panel import Panel


def _frame(**extra):
    return pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2], "w": [1.0, 2.0, 3.0, 4.0], **extra})


@pytest.mark.parametrize("column", [
    [True, None, False, None],  # Mesa: a bool reporter, None for the agents of another type
    [Decimal("1.5"), Decimal("2"), None, Decimal("3")],
    pd.Series([1, None, 3, np.int64(4)], dtype=object),
    pd.Series([np.float32(1.0), float("nan"), 2, True], dtype=object),
    pd.Series([1, pd.NA, 2, 3], dtype=object),  # pandas' own missing value beside ints was skipped without a word
    pd.Series([1.5, pd.NaT, 2.0, 3.0], dtype=object),
])
def test_numbers_held_as_objects_are_skipped_and_warned_of(column):
    with pytest.warns(SkippedColumnWarning, match=r"\['x'\].*pd.to_numeric"):
        panel = Panel.from_dataframe(_frame(x=column))
    assert list(panel.features) == ["w"]
    assert panel.meta["skipped_columns"] == ["x"]


@pytest.mark.parametrize("column", [
    ["a", "b", "a", "b"],
    pd.Series(["a", 1, None, 2.0], dtype=object),  # text beside numbers: labels, not a feature
    pd.Series([None, None, None, None], dtype=object),  # nothing at all
    pd.Series([(1, 2), (3, 4), None, (5, 6)], dtype=object),
])
def test_text_and_empty_columns_are_skipped_silently(column):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedColumnWarning)
        panel = Panel.from_dataframe(_frame(x=column))
    assert list(panel.features) == ["w"] and panel.meta["skipped_columns"] == ["x"]


def test_named_features_are_not_warned_of():
    with warnings.catch_warnings():
        warnings.simplefilter("error", SkippedColumnWarning)
        panel = Panel.from_dataframe(_frame(x=[True, None, False, None]), features=["w"])
    assert list(panel.features) == ["w"]
