"""Fuzz Panel.from_dataframe / Panel.from_xarray: random long tables and labelled arrays either give a panel the
constructor would accept, or a typed PanelError family error."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import strategies as st

from aumann.errors import PanelError, UnknownFeatureError
from aumann.panel import Panel
from tests.fuzz.harness import fuzz_target, typed_or_result

xr = pytest.importorskip("xarray")

cell = st.one_of(st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True, width=32), st.booleans(),
                 st.none(), st.sampled_from(["True", "False", "x", "", "1", "0"]),
                 st.integers(2**62, 2**64 - 1))
column_names = st.sampled_from(["step", "Step", "t", "agent", "AgentID", "id", "x", "y", "alive", "RunId", 0, 1.5])


@st.composite
def frames(draw):
    """A recipe (rows, column names, index levels): the frame is built in the test, so hypothesis never has to
    print a DataFrame (pandas' own repr fails on some empty multi-indexed frames)."""
    n = draw(st.integers(0, 8))
    ncols = draw(st.integers(1, 5))
    names = draw(st.lists(column_names, min_size=ncols, max_size=ncols))
    data = [[draw(cell) for _ in names] for _ in range(n)]
    levels = draw(st.lists(st.sampled_from(list(dict.fromkeys(names))), max_size=2, unique=True))
    return data, names, levels


def _build(recipe) -> pd.DataFrame | None:
    data, names, levels = recipe
    df = pd.DataFrame(data, columns=names)
    try:
        return df.set_index(levels) if levels else df
    except (ValueError, KeyError, TypeError):
        return df


def _panel_ok(p: Panel) -> None:
    T, N, D = p.shape
    assert len(p.features) == D and len(set(p.features)) == D
    if p.alive is not None:
        assert p.alive.dtype == bool and p.alive.shape == (T, N)
        assert not p.values[~p.alive].any()
    live = p.values if p.alive is None else p.values[p.alive]
    assert np.isfinite(live).all()


@fuzz_target(df=frames(), alive=st.one_of(st.none(), st.just("alive"), st.just("x")),
             features=st.one_of(st.none(), st.lists(column_names, max_size=3)))
def test_fuzz_from_dataframe(df, alive, features):
    df = _build(df)
    p, err = typed_or_result(Panel.from_dataframe, df, features=features, alive=alive)
    assert err is None or isinstance(err, PanelError | UnknownFeatureError)
    if p is not None:
        _panel_ok(p)


@st.composite
def arrays(draw):
    T, N, D = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    vals = np.array(draw(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=T * N * D,
                                  max_size=T * N * D)), dtype=np.float64).reshape(T, N, D)
    dims = draw(st.permutations(["step", "agent", "feature"]))
    da = xr.DataArray(vals, dims=("step", "agent", "feature")).transpose(*dims)
    coords: dict = {}
    if draw(st.booleans()):
        coords["alive"] = (("step", "agent"), np.array(draw(st.lists(cell, min_size=T * N, max_size=T * N)),
                                                       dtype=object).reshape(T, N))
    if draw(st.booleans()):
        coords["group_g"] = (draw(st.sampled_from(["agent", "step"])), np.zeros(N if True else T))
    if draw(st.booleans()):
        coords["context_c"] = ("step", np.array(draw(st.lists(cell, min_size=T, max_size=T)), dtype=object))
    for k, v in coords.items():
        try:
            da = da.assign_coords({k: v})
        except (ValueError, TypeError):
            pass
    attrs = draw(st.one_of(st.none(), st.text(max_size=30), st.just("[" * 500),
                           st.dictionaries(st.sampled_from(["meta", "groups", "context", "context_shapes", "format"]),
                                           st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3),
                                                     st.dictionaries(st.text(max_size=3), st.lists(
                                                         st.integers(-2, 2**41), max_size=3), max_size=2)),
                                           max_size=4).map(json.dumps)))
    if attrs is not None:
        da.attrs["aumann"] = attrs
    return da


@fuzz_target(da=arrays(), as_dataset=st.booleans())
def test_fuzz_from_xarray(da, as_dataset):
    obj = da.to_dataset(name="values") if as_dataset else da
    p, _ = typed_or_result(Panel.from_xarray, obj)
    if p is not None:
        _panel_ok(p)
        back, err2 = typed_or_result(Panel.from_xarray, p.to_xarray())  # a valid panel always round-trips
        assert err2 is None and back.equals(p)
