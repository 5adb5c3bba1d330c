"""Class 4 of issue 22, interop: Panel.from_dataframe / from_xarray go through the same rules as Panel(...)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from aumann.errors import DuplicateIdError, PanelError, ShapeError, UnknownFeatureError
from aumann.panel import Panel

xr = pytest.importorskip("xarray")


def _frame(**alive) -> pd.DataFrame:
    df = pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
    for k, v in alive.items():
        df[k] = v
    return df


@pytest.mark.parametrize("col", [["True", "False", "True", "True"], ["yes", "no", "yes", "yes"],
                                 [1.0, 0.5, 1.0, 1.0], [1.0, np.nan, 1.0, 1.0], [1, 2, 1, 1], [1, -1, 0, 1],
                                 pd.array([True, None, True, True], dtype="boolean"), [True, None, True, False]],
                         ids=["str-True-False", "str-yes-no", "float-0.5", "float-nan", "int-2", "int-minus-1",
                              "nullable-NA", "object-None"])
def test_alive_columns_the_constructor_refuses_are_refused(col):
    with pytest.raises(PanelError, match="alive column 'ok'"):
        Panel.from_dataframe(_frame(ok=col), features=["x"], alive="ok")


@pytest.mark.parametrize("col,want", [([True, False, True, True], [[True, False], [True, True]]),
                                      ([1, 0, 1, 1], [[True, False], [True, True]])])
def test_bool_and_zero_one_alive_columns_are_accepted(col, want):
    p = Panel.from_dataframe(_frame(ok=col), features=["x"], alive="ok")
    np.testing.assert_array_equal(p.alive, want)


@pytest.mark.parametrize("mask", [[[1, 2], [1, 1]], [[1.0, 0.5], [1, 1]], [["True", "False"], ["a", "b"]],
                                  np.ones((3, 2))], ids=["two", "half", "strings", "wrong-shape"])
def test_alive_arrays_go_through_the_constructors_rule(mask):
    with pytest.raises(PanelError):
        Panel.from_dataframe(_frame(), features=["x"], alive=mask)


def test_a_constant_run_id_index_level_is_a_label_not_a_feature():
    df = _frame().assign(RunId=0, iteration=0).set_index(["RunId", "iteration", "step", "agent"])
    p = Panel.from_dataframe(df)
    assert p.features == ("x",) and set(p.meta["skipped_columns"]) >= {"RunId", "iteration"}


def test_a_frame_holding_several_runs_is_refused():
    df = pd.concat([_frame().assign(RunId=r) for r in range(2)]).set_index(["RunId", "step", "agent"])
    with pytest.raises(PanelError, match="2 values of index level 'RunId'"):
        Panel.from_dataframe(df)


def test_repeated_column_names_are_a_typed_error():
    df = pd.DataFrame([[0, 1, 1.0, 2.0]], columns=["step", "agent", "x", "x"])
    with pytest.raises(DuplicateIdError, match="repeated column names \\['x'\\]"):
        Panel.from_dataframe(df)


@pytest.mark.parametrize("col", ["step", "agent"])
@pytest.mark.parametrize("missing", [np.nan, None])
def test_missing_step_or_agent_labels_are_a_typed_error(col, missing):
    df = _frame()
    df[col] = df[col].astype(object)
    df.loc[1, col] = missing
    with pytest.raises(PanelError, match=f"{col} column '{col}' has 1 missing label"):
        Panel.from_dataframe(df)


def test_an_index_level_named_like_a_column_is_a_typed_error():
    df = _frame().set_index("step")
    df["step"] = 5
    with pytest.raises(DuplicateIdError, match="also column names"):
        Panel.from_dataframe(df)


def test_unnamed_index_levels_are_a_typed_error():
    df = _frame().set_index(["step", "agent"])
    df.index.names = [None, "agent"]
    with pytest.raises(PanelError, match="unnamed levels"):
        Panel.from_dataframe(df)


@pytest.mark.parametrize("features,err", [("x", PanelError), ([["x"]], UnknownFeatureError), (["step"], PanelError),
                                          (["x", "x"], DuplicateIdError), (3, PanelError)], ids=repr)
def test_bad_feature_selections_are_typed(features, err):
    with pytest.raises(err):
        Panel.from_dataframe(_frame(), features=features)


def test_nan_in_a_living_feature_row_is_a_nonfinite_error_naming_the_fix():
    from aumann.errors import NonFiniteError

    df = _frame()
    df.loc[2, "x"] = np.nan
    with pytest.raises(NonFiniteError, match="alive="):
        Panel.from_dataframe(df)


# --------------------------------------------------------------------------- xarray
def test_a_panel_with_multidimensional_context_round_trips_through_xarray(tmp_path):
    p = Panel(np.arange(12.0).reshape(3, 2, 2), context={"price": np.arange(3.0), "grid": np.ones((3, 4, 2))},
              groups={"tier": ["a", "b"]}, alive=[[1, 1], [1, 0], [1, 1]], meta={"k": 1})
    da = p.to_xarray()
    assert Panel.from_xarray(da).equals(p)
    da.to_netcdf(tmp_path / "p.nc")
    assert Panel.from_xarray(xr.open_dataarray(tmp_path / "p.nc")).equals(p)


def _da(attrs: object) -> object:
    da = Panel(np.zeros((2, 2, 1))).to_xarray()
    da.attrs["aumann"] = attrs
    return da


@pytest.mark.parametrize("attrs,needle", [
    ("[" * 5000 + "]" * 5000, "nests 5,000 levels"),
    ("not json", "not valid JSON"),
    ("[1, 2]", "must hold a JSON object"),
    (json.dumps({"meta": [1]}), "'meta' that is not an object"),
    (json.dumps({"context_shapes": {"g": [2, -1]}}), "malformed 'context_shapes'"),
    (json.dumps({"context_shapes": {"g": [2, 3]}}), "declare context 'g' of shape \\[2, 3\\] but hold nothing"),
    (12, "must be JSON text"),
])
def test_from_xarray_checks_its_attrs(attrs, needle):
    with pytest.raises(PanelError, match=needle):
        Panel.from_xarray(_da(attrs))


def test_from_xarray_attrs_that_list_absent_groups_are_ignored_not_a_key_error():
    p = Panel.from_xarray(_da(json.dumps({"groups": ["nope"], "context": ["gone"]})))
    assert p.groups == {} and p.context == {}


def test_from_xarray_context_attrs_of_the_wrong_size_are_refused():
    da = Panel(np.zeros((2, 2, 1)), context={"grid": np.ones((2, 3))}).to_xarray()
    da.attrs["aumann_context_grid"] = np.ones(5)
    with pytest.raises(PanelError, match="hold 5 values"):
        Panel.from_xarray(da)


def test_from_xarray_coordinates_on_the_wrong_dims_are_refused():
    da = Panel(np.zeros((2, 3, 1))).to_xarray().assign_coords(group_tier=("step", ["a", "b"]))
    with pytest.raises(ShapeError, match="group_tier"):
        Panel.from_xarray(da)


def test_from_xarray_alive_as_floats_is_refused_as_by_the_constructor():
    da = Panel(np.zeros((2, 2, 1))).to_xarray().assign_coords(alive=(("step", "agent"), [[1.0, 0.5], [1, 1]]))
    with pytest.raises(PanelError, match="alive mask"):
        Panel.from_xarray(da)


def test_a_frame_whose_dense_panel_cannot_fit_is_refused_before_allocating(monkeypatch):
    """One row per step and agent spreads into a dense (T, N, D) grid: 10⁵ rows with a unique step and agent each (a
    timestamp as the step) asked numpy for 74.5 GiB, a bare MemoryError (or that memory taken where it exists)."""
    import aumann.panel
    from aumann.errors import MemoryBudgetError

    monkeypatch.setattr(aumann.panel, "memory_bytes", lambda: 40 * 40 * 10 - 1, raising=False)
    wide = pd.DataFrame({"step": np.arange(40), "agent": np.arange(40), "x": np.ones(40)})
    with pytest.raises(MemoryBudgetError, match=r"the frame's 40 rows name 40 steps and 40 agents: a panel of them, "
                                                 r"× 1 feature\(s\), is 0\.0 GiB, more than this machine's"):
        Panel.from_dataframe(wide)
    monkeypatch.setattr(aumann.panel, "memory_bytes", lambda: 40 * 40 * 10)
    assert Panel.from_dataframe(wide).shape == (40, 40, 1)
    monkeypatch.undo()
    n = 100_000
    huge = pd.DataFrame({"step": np.arange(n), "agent": np.arange(n), "x": np.ones(n)})
    if 10 * n * n <= aumann.panel.memory_bytes():
        pytest.skip("this machine holds the 93 GiB panel")
    with pytest.raises(MemoryBudgetError, match=r"100,000 steps and 100,000 agents.*is 93\.1 GiB"):
        Panel.from_dataframe(huge)
