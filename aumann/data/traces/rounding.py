"""Integer field values that float64 changes: a trace's numbers become float64 features, and a double holds integers
exactly only up to ±2**53 (``2**53 + 1`` is read as ``2**53``). Found here so that a read counts and reports them
(:class:`~aumann.data.traces.events.Tally`, ``TraceReport.rounded_values``) instead of changing them silently.

The common case costs one vectorised pass over values that are already numbers: an integer column's min and max, or
(for values read from text or JSON) the largest magnitude of the float64 values; only past 2**53 are the records
looked at one by one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from aumann.checks import FLOAT64_EXACT_INTEGERS, float64_rounded, largest_magnitude

#: integer text, as ``pd.to_numeric`` reads it (a sign, digits, spaces around)
_INT_TEXT = re.compile(r"\s*[-+]?[0-9]+\s*")


class Rounded:
    """Which records of one batch hold an integer that float64 changed (``mask``), and those integers."""

    __slots__ = ("integers", "mask")

    def __init__(self, mask: np.ndarray, integers: np.ndarray) -> None:
        self.mask = mask
        self.integers = integers  # the raw integers, indexable like ``mask`` (an int64/uint64 or object array)

    def count_and_largest(self, keep: np.ndarray) -> tuple[int, int]:
        """How many of the ``keep`` records changed, and the largest magnitude among them (0, 0 when none)."""
        sel = self.mask & keep
        n = int(sel.sum())
        if n == 0:
            return 0, 0
        vals = self.integers[sel]
        if vals.dtype.kind in "iu":
            return n, largest_magnitude(vals)
        return n, max(abs(int(v)) for v in vals)


def rounded_array(raw: np.ndarray) -> Rounded | None:
    """The records of an integer column (int64/uint64: SQLite, Parquet, a typed CSV column) that float64 changes."""
    mask = float64_rounded(raw)
    return None if mask is None else Rounded(mask, raw)


def rounded_objects(conv: Sequence[Any], num: pd.Series, vals: np.ndarray) -> Rounded | None:
    """The records of raw values (JSON numbers, text) that are integers float64 changes: ``num`` is what
    ``pd.to_numeric`` made of them, ``vals`` its float64 values. A column of integers only is judged as integers
    (pandas reads it as int64/uint64); one that mixes integers and fractions (``[2**53 + 1, 1.5]``) is read as float64
    by pandas, so there each value past 2**53 is looked at: integers (and integer text) whose double differs count,
    fractions and exponents (``1e20``) are floats as written and do not."""
    kind = num.dtype
    if isinstance(kind, np.dtype) and kind.kind in "iu":
        return rounded_array(num.to_numpy())
    with np.errstate(invalid="ignore"):  # >=: 2**53 + 1 rounds to 2**53 itself
        far = np.abs(vals) >= FLOAT64_EXACT_INTEGERS
    if not far.any():
        return None
    mask = np.zeros(len(vals), dtype=bool)
    integers = np.zeros(len(vals), dtype=object)
    for i in np.flatnonzero(far & np.isfinite(vals)).tolist():
        v = conv[i]
        if isinstance(v, bool | np.bool_):
            continue
        if isinstance(v, int | np.integer):
            n = int(v)
        elif isinstance(v, str) and _INT_TEXT.fullmatch(v):
            n = int(v)
        else:
            continue
        if n != int(vals[i]):
            mask[i], integers[i] = True, n
    return Rounded(mask, integers) if mask.any() else None


__all__ = ["Rounded", "rounded_array", "rounded_objects"]
