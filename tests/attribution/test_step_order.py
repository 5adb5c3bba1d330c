"""The step axis is time order: ``"pre-event"`` reads the first row and ``"previous"`` the row before, by
position. ``Panel(z, steps=[2, 1, 0])`` was accepted and both baselines then followed row order, not the labels:
the row labelled 2 was the pre-event state, silently. Number and time labels out of order are refused by the
constructor (and so by ``Panel.load``), sorted with their rows by the label-keyed readers (``from_dataframe``,
``from_xarray``); text labels keep their row order."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pytest

from aumann.attribution import Panel, attribute
from aumann.errors import PanelError

Z = np.array([[[3.0], [1.0]], [[2.0], [2.0]], [[1.0], [4.0]]])  # (T=3, N=2, D=1), in time order 0, 1, 2


@pytest.mark.parametrize("steps, first", [
    ([2, 1, 0], "2 at position 0 is followed by 1 at position 1"),
    ([0, 2, 1], "2 at position 1 is followed by 1 at position 2"),
    ([0.0, 0.5, 0.25], "0.5 at position 1 is followed by 0.25 at position 2"),
    (np.array([0, 2**63 + 1, 2**63], dtype=np.uint64), "9223372036854775809 at position 1 is followed by "
                                                        "9223372036854775808 at position 2"),
    (np.array(["2020-01-03", "2020-01-01", "2020-01-02"], dtype="datetime64[D]"),
     "2020-01-03 at position 0 is followed by 2020-01-01 at position 1"),
], ids=["reversed", "swapped", "float", "uint64", "datetime"])
def test_number_and_time_steps_out_of_order_are_refused_naming_the_pair(steps, first):
    with pytest.raises(PanelError, match=f"steps must be strictly increasing.*{first}"):
        Panel(Z, steps=steps)


def test_text_steps_keep_their_row_order():
    p = Panel(Z, steps=["warm-up", "baseline", "after"])
    assert p.steps.tolist() == ["warm-up", "baseline", "after"]
    assert np.array_equal(p.values, Z)


def test_pre_event_and_previous_read_the_labelled_time_order():
    """The row of the earliest label is the pre-event state whichever way the panel was built."""
    sorted_panel = Panel(Z, steps=[0, 1, 2])
    reversed_rows = Z[::-1]
    df = pd.DataFrame([{"step": t, "agent": i, "x": reversed_rows[2 - t, i, 0]}
                       for t in (2, 1, 0) for i in range(2)])  # rows of the table in reverse time order
    from_frame = Panel.from_dataframe(df)
    assert from_frame.equals(Panel(Z, features=["x"], steps=[0, 1, 2], meta=from_frame.meta))
    for baseline in ("pre-event", "previous"):
        ref = attribute("var", sorted_panel, baseline=baseline).phi
        assert np.allclose(attribute("var", from_frame, baseline=baseline).phi, ref)


def test_from_xarray_sorts_number_steps_with_rows_mask_and_context():
    pytest.importorskip("xarray")
    alive = np.array([[1, 1], [0, 1], [1, 1]], dtype=bool)
    p = Panel(Z, steps=[10, 20, 30], alive=alive,
              context={"price": np.array([1.0, 2.0, 3.0]), "wide": np.arange(6.0).reshape(3, 2)})
    shuffled = p.to_xarray().isel(step=[2, 0, 1])
    q = Panel.from_xarray(shuffled)
    assert q.equals(p)
    assert np.allclose(attribute("var", q, baseline="pre-event").phi,
                       attribute("var", p, baseline="pre-event").phi)


def test_from_xarray_keeps_text_steps_in_their_order():
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(Z[..., 0], dims=("step", "agent"), coords={"step": ["c", "a", "b"]}, name="x")
    assert Panel.from_xarray(da).steps.tolist() == ["c", "a", "b"]


def test_a_saved_panel_with_steps_out_of_order_is_refused_on_load(tmp_path):
    """A file written before the check (or edited) cannot come back with its baselines reading the wrong rows."""
    p = Panel(Z, steps=[0, 1, 2])
    p.steps = np.array([2, 1, 0])  # as an older aumann let it be saved
    path = p.save(tmp_path / "old.npz")
    with pytest.raises(PanelError, match=r"old\.npz.*2 at position 0 is followed by 1 at position 1"):
        Panel.load(path)


def test_select_steps_keeps_time_order():
    p = Panel(Z, steps=[0, 1, 2])
    with pytest.raises(PanelError, match=r"step positions must be increasing.*\[2, 0\]"):
        p.select_steps([2, 0])
    assert p.select_steps([0, -1]).steps.tolist() == [0, 2]
    assert Panel(Z, steps=["c", "a", "b"]).select_steps([2, 0]).steps.tolist() == ["b", "c"]


def _months(labels):
    return pd.DataFrame([{"step": m, "agent": i, "x": float(t + 10 * i)} for t, m in enumerate(labels)
                         for i in range(2)])


def test_from_dataframe_keeps_a_categorical_steps_own_order():
    """An ordered Categorical ["jan", "feb", "mar"] was sorted as text (feb, jan, mar): February's row was the
    pre-event state, silently. A Categorical step column is in the order of its categories."""
    df = _months(["jan", "feb", "mar"])
    df["step"] = pd.Categorical(df["step"], categories=["jan", "feb", "mar", "apr"], ordered=True)
    p = Panel.from_dataframe(df.iloc[::-1])  # (row order of the table does not matter)
    assert p.steps.tolist() == ["jan", "feb", "mar"]
    assert p.values[:, 0, 0].tolist() == [0.0, 1.0, 2.0] and p.values[:, 1, 0].tolist() == [10.0, 11.0, 12.0]
    ref = Panel(np.array([[[0.0], [10.0]], [[1.0], [11.0]], [[2.0], [12.0]]]), features=["x"])
    assert np.allclose(attribute("var", p, baseline="pre-event").phi, attribute("var", ref, baseline="pre-event").phi)


def test_from_dataframe_refuses_numbers_as_text_out_of_text_order():
    """Steps "9", "10", "11" read from a CSV as text sorted as '10', '11', '9': the 'previous' step of '9' was '11'."""
    with pytest.raises(PanelError, match=r"step column 'step' holds numbers as text: sorted as text, '11' comes "
                                         r"before '9'.*pd\.to_numeric"):
        Panel.from_dataframe(_months(["9", "10", "11"]))
    assert Panel.from_dataframe(_months(["1", "2", "3"])).steps.tolist() == ["1", "2", "3"]  # text order is theirs
    assert Panel.from_dataframe(_months(["2026-01-09", "2026-01-10"])).steps.tolist() == ["2026-01-09", "2026-01-10"]
    converted = _months(["9", "10", "11"]).assign(step=lambda d: pd.to_numeric(d["step"]))
    assert Panel.from_dataframe(converted).steps.tolist() == [9, 10, 11]


@pytest.mark.parametrize("steps", [
    pd.to_datetime(["2020-01-03", "2020-01-01", "2020-01-02"]),
    [pd.Timestamp("2020-01-03", tz="UTC"), pd.Timestamp("2020-01-01", tz="UTC"), pd.Timestamp("2020-01-02", tz="UTC")],
    [datetime.date(2020, 1, 3), datetime.date(2020, 1, 1), datetime.date(2020, 1, 2)],
    [pd.Timedelta(hours=3), pd.Timedelta(hours=1), pd.Timedelta(hours=2)],
    [pd.Period("2020-03"), pd.Period("2020-01"), pd.Period("2020-02")],
], ids=["DatetimeIndex", "tz_timestamps", "dates", "timedeltas", "periods"])
def test_times_given_as_objects_are_compared_as_times(steps):
    """A DatetimeIndex (or datetimes, dates, Periods) is labelled by its text, and text labels escaped the check:
    Panel(z, steps=pd.to_datetime(["2020-01-03", "2020-01-01", ...])) was accepted with the 3rd of January as the
    pre-event state. Their order is checked as times; in order they are kept as before."""
    with pytest.raises(PanelError, match=r"steps must be strictly increasing.*at position 0 is followed by .* at "
                                         r"position 1"):
        Panel(Z, steps=steps)
    ordered = [steps[1], steps[2], steps[0]]
    assert Panel(Z, steps=ordered).steps.tolist() == [str(v) for v in ordered]
