"""Integer input past ±2**53 becomes float64 with a warning that names where, how many and the largest, never
silently: ``Panel(int64 array)`` turned 2**53 + 1 into 2**53 without a word. The input stays accepted."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from aumann.errors import PrecisionLossWarning
from aumann.panel import Panel

BIG = 2**53 + 1


def _quiet(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        return Panel(**kw)


def test_int64_values_past_2_53_warn_once_naming_features_counts_and_largest():
    x = np.zeros((2, 3, 3), dtype=np.int64)
    x[0, 0, 0], x[1, 2, 0] = BIG, -(BIG + 2)  # two in 'nanos'
    x[1, 1, 2] = 2**62 + 1  # one in 'ids'
    with pytest.warns(PrecisionLossWarning) as rec:
        p = Panel(x, features=["nanos", "small", "ids"])
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "feature 'nanos': 2 value(s), the largest 9,007,199,254,740,995" in msg
    assert "feature 'ids': 1 value(s), the largest 4,611,686,018,427,387,905" in msg
    assert "'small'" not in msg
    assert rec[0].filename == __file__  # points at the caller's line
    assert p.values[0, 0, 0] == float(BIG)  # kept, as the nearest double (accepted as before)


@pytest.mark.parametrize("given", [
    np.array([[1, 2**53], [-(2**53), 3]], dtype=np.int64),  # the edge: exact
    np.array([[2**60, -(2**63)], [2**62, 0]], dtype=np.int64),  # past 2**53 but doubles: nothing changes
    np.array([[2**53 + 1.0, 1.0], [0.0, 0.0]]),  # floats: already what they are
    np.array([[7, 1], [2, 3]], dtype=np.int32),
    np.array([[True, False], [False, True]]),
], ids=["edge", "exact-large", "float", "int32", "bool"])
def test_values_float64_holds_do_not_warn(given):
    p = _quiet(values=given)
    assert p.values.dtype == np.float64


def test_uint64_and_python_ints_warn():
    with pytest.warns(PrecisionLossWarning, match=r"feature 'f0': 1 value\(s\), the largest 18,446,744,073,709,551,6"):
        Panel(np.array([[2**64 - 1], [1]], dtype=np.uint64))
    with pytest.warns(PrecisionLossWarning, match=r"feature 'b': 1 value\(s\)"):
        Panel([[1, BIG], [2, 3]], features=["a", "b"])


def test_context_of_integers_past_2_53_warns_in_the_same_warning():
    with pytest.warns(PrecisionLossWarning) as rec:
        Panel(np.array([[[BIG]], [[1]]], dtype=np.int64), features=["v"],
              context={"clock": np.array([BIG, BIG + 2], dtype=np.int64)})
    assert len(rec) == 1
    assert "feature 'v': 1 value(s)" in str(rec[0].message)
    assert "context 'clock': 2 value(s)" in str(rec[0].message)


def test_from_dataframe_integer_columns_past_2_53_warn_naming_the_column():
    ns = 1_700_000_000_123_456_789
    df = pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2],
                       "ts": np.array([ns, 3, 4, ns + 1], dtype=np.int64),
                       "n": pd.array([BIG, None, 1, 2], dtype="Int64"),
                       "ok": np.array([1, 2, 3, 4], dtype=np.int64), "live": [True, False, True, True]})
    with pytest.warns(PrecisionLossWarning) as rec:
        p = Panel.from_dataframe(df, alive="live")  # the row whose 'n' is missing is dead
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "column 'ts': 2 value(s), the largest 1,700,000,000,123,456,790" in msg
    assert "column 'n': 1 value(s)" in msg and "'ok'" not in msg
    assert rec[0].filename == __file__
    assert p.values[0, 0, p.features.index("ts")] == float(ns)


def test_from_dataframe_of_small_integers_does_not_warn():
    df = pd.DataFrame({"step": [0, 0], "agent": [1, 2], "x": np.array([2**53, 5], dtype=np.int64)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        Panel.from_dataframe(df)


def test_from_dataframe_counts_only_the_integers_of_rows_the_panel_keeps():
    """A dead row (alive column false, or not alive in alive=) is stored as 0.0: its integers are no value of the
    panel. They were counted (and warned of) as if float64 had changed a panel value."""
    df = pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2],
                       "ts": np.array([BIG, BIG + 2, 3, BIG + 4], dtype=np.int64),
                       "n": pd.array([BIG, None, 1, BIG + 2], dtype="Int64"),
                       "live": [True, False, True, False]})
    with pytest.warns(PrecisionLossWarning) as rec:
        p = Panel.from_dataframe(df, alive="live")
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "column 'ts': 1 value(s), the largest 9,007,199,254,740,993 " in msg  # not BIG + 2, BIG + 4 (dead)
    assert "column 'n': 1 value(s)" in msg
    assert p.values[0, 1, p.features.index("ts")] == 0.0  # the dead row's value is not kept
    # every changed integer in dead rows (alive= a (T, N) mask): nothing the panel holds changed, nothing said
    dead = np.array([[True, False], [True, False]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        Panel.from_dataframe(df[["step", "agent", "ts"]].assign(ts=np.array([3, BIG, 4, BIG], dtype=np.int64)),
                             alive=dead)


def test_a_panel_built_from_integers_keeps_their_rounding_in_its_meta(tmp_path):
    """Panel(int64 values) and from_dataframe warned of the integers float64 changed but did not keep the count:
    a panel saved so and attributed later (`aumann attribute`) had no 'integers rounded' line, where a recorded
    panel's meta["rounded_values"] gave one. Both now write it in the recorders' form; a recorder's own count
    (passed in meta) is kept as it is."""
    from aumann.cli import main

    values = np.array([[[2**53 + 1], [3]], [[2**53 + 3], [5]]], dtype=np.int64)
    with pytest.warns(PrecisionLossWarning):
        panel = Panel(values, features=["acct"], context={"clock": np.array([2**60 + 1, 1], dtype=np.int64)})
    assert panel.meta["rounded_values"] == {"features": {"acct": {"count": 2, "largest": 2**53 + 3}},
                                            "context": {"clock": {"count": 1, "largest": 2**60 + 1}}}
    given = {"rounded_values": {"features": {"acct": {"count": 7, "largest": 2**53 + 1}}}}
    with pytest.warns(PrecisionLossWarning):
        assert Panel(values, features=["acct"], meta=given).meta == given
    df = pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2],
                       "ts": np.array([2**53 + 1, 3, 2**53 + 5, 2**64 - 1], dtype=np.uint64),
                       "live": [True, True, True, False]})
    with pytest.warns(PrecisionLossWarning):
        framed = Panel.from_dataframe(df, alive="live")
    assert framed.meta["rounded_values"] == {"features": {"ts": {"count": 2, "largest": 2**53 + 5}}}
    src = framed.save(tmp_path / "framed.npz")
    assert Panel.load(src).meta["rounded_values"] == framed.meta["rounded_values"]
    assert main(["attribute", str(src), "--indicator", "lin", "--out", str(tmp_path / "out"), "--static"]) == 0
    assert "integers rounded: feature 'ts': 2 value(s)" in (tmp_path / "out" / "report.md").read_text()


def test_python_ints_past_2_53_beside_floats_in_a_list_warn_too():
    """``Panel([[ns_clock, 0.5], ...])``: numpy made one float64 array of the list, since it also holds floats, and
    the int 2**53 + 1 became 2**53 without a word (a list of ints only, read as int64, warned). The recorders and
    the trace readers already judge such mixed values one by one."""
    with pytest.warns(PrecisionLossWarning, match=r"feature 'clock': 2 value\(s\), the largest 9,007,199,254,740,995"):
        p = Panel([[[BIG, 0.5], [BIG + 2, 1.5]]], features=["clock", "price"])
    assert p.values[0, 0, 0] == float(BIG)
    with pytest.warns(PrecisionLossWarning, match=r"context 'clock': 1 value\(s\)"):
        Panel([[[1.0]], [[2.0]]], features=["v"], context={"clock": [BIG, 0.5]})
    _quiet(values=[[[2**60, 0.5], [2.0**60 + 2**8, 1.5]]])  # exact integers and floats past 2**53: nothing changed


def test_from_xarray_dataset_of_integer_and_float_variables_warns_naming_the_variable():
    """A Dataset of an int64 variable past 2**53 beside a float one: ``xr.concat`` made them one float64 array before
    the panel saw them, so 2**53 + 1 became 2**53 without a word (one int64 variable alone warned)."""
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset({"clock": (("step", "agent"), np.array([[BIG, 1], [BIG + 2, 2]], dtype=np.int64)),
                     "price": (("step", "agent"), np.array([[0.5, 1.5], [2.5, 3.5]]))})
    with pytest.warns(PrecisionLossWarning, match=r"feature 'clock': 2 value\(s\), the largest 9,007,199,254,740,995"
                      ) as rec:
        p = Panel.from_xarray(ds)
    assert len(rec) == 1 and "'price'" not in str(rec[0].message)
    assert p.values[0, 0, 0] == float(BIG)
    with pytest.warns(PrecisionLossWarning) as alone:  # integers only: the panel judges them itself, once
        Panel.from_xarray(ds[["clock"]])
    assert len(alone) == 1
    _quiet_xr = ds.assign(clock=ds["clock"] // 4)  # past 2**51 only: nothing changed
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionLossWarning)
        Panel.from_xarray(_quiet_xr)


def test_from_xarray_dataset_of_integer_and_float_variables_keeps_the_count_in_meta():
    """9ca3887 warned of an int64 variable past 2**53 beside a float one but kept no count, where the same variable
    alone (and from_dataframe, 86adfd9) keeps meta['rounded_values']: a panel saved so and attributed later had no
    'integers rounded' line. It is kept now, as the variable alone keeps it."""
    xr = pytest.importorskip("xarray")
    ds = xr.Dataset({"clock": (("step", "agent"), np.array([[BIG, 1], [BIG + 2, 2]], dtype=np.int64)),
                     "price": (("step", "agent"), np.array([[0.5, 1.5], [2.5, 3.5]]))})
    with pytest.warns(PrecisionLossWarning):
        mixed = Panel.from_xarray(ds)
    with pytest.warns(PrecisionLossWarning):
        alone = Panel.from_xarray(ds[["clock"]])
    assert mixed.meta["rounded_values"] == alone.meta["rounded_values"] == {
        "features": {"clock": {"count": 2, "largest": BIG + 2}}}
