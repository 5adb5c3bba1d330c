"""Interop: Mesa DataCollector frames and long tables into panels; xarray in and out; labelled summaries."""

from __future__ import annotations

import builtins

import numpy as np
import pandas as pd
import pytest

from aumann.attribution import Panel, SampledShapley, attribute, indicators
from aumann.errors import (
    DuplicateIdError,
    NonFiniteError,
    OptionalDependencyError,
    PanelError,
    ShapeError,
    UnknownFeatureError,
)
from aumann.simulators import FeatureRecorder, simulate
from tests.simulators.models import BoltzmannWealth

xr = pytest.importorskip("xarray", reason="xarray is an optional extra (pip install 'aumann[xarray]')")


def _churning_run():
    """A Mesa model with agents leaving and arriving, recorded both by aumann and by Mesa's DataCollector."""
    import mesa

    model = BoltzmannWealth(8, seed=4, churn=True)
    dc = mesa.DataCollector(agent_reporters={"wealth": "wealth", "rich": lambda a: a.wealth > 1,
                                             "label": lambda a: f"a{a.unique_id}"})
    rec = FeatureRecorder({"wealth": "wealth", "rich": lambda a: float(a.wealth > 1)})
    panel = simulate(model, 7, rec, observers=[lambda m, t: dc.collect(m)])
    return panel, dc.get_agent_vars_dataframe()


def test_datacollector_frame_gives_the_recorded_panel():
    panel, df = _churning_run()
    assert df.index.names == ["Step", "AgentID"]
    got = Panel.from_dataframe(df)
    assert got.features == ("wealth", "rich") and got.meta["skipped_columns"] == ["label"]
    np.testing.assert_array_equal(got.values, panel.values)
    np.testing.assert_array_equal(got.agent_ids, panel.agent_ids)
    np.testing.assert_array_equal(got.steps, panel.steps)
    assert panel.alive is not None and np.array_equal(got.alive, panel.alive)  # missing rows are dead there


def test_datacollector_frame_of_agents_keyed_by_tuples_gives_the_recorded_panel():
    """Agents keyed by (x, y) unique_ids: the frame's labels were sorted into an (N, 2) array, so the frame of a
    model the recorder records was refused ('ValueError: object too deep for desired array'). It now gives the
    recorded panel: one row per agent, a dead agent's missing rows dead."""
    import mesa

    class Walker(mesa.Agent):
        def __init__(self, model, uid):
            super().__init__(model)
            self.unique_id, self.w = uid, float(len(uid))

        def step(self):
            self.w += self.random.random()

    class Field(mesa.Model):
        def __init__(self):
            super().__init__(rng=3)
            for uid in [(1, 0), (0, 1, 1), (0, 0)]:
                Walker(self, uid)

        def step(self):
            self.agents.shuffle_do("step")
            if self.steps == 2:
                next(a for a in self.agents if a.unique_id == (0, 0)).remove()

    dc = mesa.DataCollector(agent_reporters={"w": "w"})
    panel = simulate(Field(), 4, FeatureRecorder({"w": "w"}), observers=[lambda m, t: dc.collect(m)])
    got = Panel.from_dataframe(dc.get_agent_vars_dataframe())
    assert got.agent_ids.tolist() == panel.agent_ids.tolist() == ["(0, 0)", "(0, 1, 1)", "(1, 0)"]
    np.testing.assert_array_equal(got.values, panel.values)
    np.testing.assert_array_equal(got.alive, panel.alive)
    assert got.alive[:, 0].tolist() == [True, False, False, False]


def test_long_frames_with_columns_and_explicit_names():
    df = pd.DataFrame({"t": [0, 0, 1, 1, 2], "agent": ["b", "a", "a", "b", "a"],
                       "x": [1.0, 2.0, 3.0, 4.0, 5.0], "ok": [True, True, False, True, True]})
    p = Panel.from_dataframe(df, features=["x"], alive="ok")
    assert list(p.agent_ids) == ["a", "b"] and list(p.steps) == [0, 1, 2]
    np.testing.assert_array_equal(p.values[..., 0], [[2.0, 1.0], [0.0, 4.0], [5.0, 0.0]])
    np.testing.assert_array_equal(p.alive, [[True, True], [False, True], [True, False]])
    renamed = df.rename(columns={"t": "when", "agent": "who"})
    assert Panel.from_dataframe(renamed, step="when", agent="who").features == ("x", "ok")


def test_bad_frames_get_typed_errors():
    df = pd.DataFrame({"step": [0, 0], "agent": [1, 1], "x": [1.0, 2.0]})
    with pytest.raises(DuplicateIdError, match="step 0, agent 1"):
        Panel.from_dataframe(df)
    with pytest.raises(PanelError, match="cannot find the agent column"):
        Panel.from_dataframe(pd.DataFrame({"step": [0], "x": [1.0]}))
    with pytest.raises(UnknownFeatureError, match="'y' not in the frame"):
        Panel.from_dataframe(pd.DataFrame({"step": [0], "agent": [1], "x": [1.0]}), features=["y"])
    with pytest.raises(PanelError, match="'name' is not numeric"):
        Panel.from_dataframe(pd.DataFrame({"step": [0], "agent": [1], "name": ["z"]}), features=["name"])
    with pytest.raises(NonFiniteError, match="mark them dead with alive="):
        Panel.from_dataframe(pd.DataFrame({"step": [0, 0], "agent": [1, 2], "x": [1.0, None]}))
    with pytest.raises(PanelError, match="takes a pandas DataFrame"):
        Panel.from_dataframe({"step": [0]})


def test_xarray_round_trip_is_exact():
    panel, _ = _churning_run()
    panel = panel.with_groups(tier=np.where(np.arange(panel.N) % 2, "top", "tail"))
    panel = panel._derive(context={"price": np.linspace(1, 2, panel.T)}, meta={"source": "test"})
    da = panel.to_xarray()
    assert da.dims == ("step", "agent", "feature") and list(da["feature"].values) == ["wealth", "rich"]
    assert da.sel(feature="wealth").values.tolist() == panel.feature("wealth").tolist()
    assert Panel.from_xarray(da).equals(panel)
    assert Panel.from_xarray(da.transpose("feature", "agent", "step")).equals(panel)


def test_from_xarray_datasets_and_plain_arrays():
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"wealth": (("step", "agent"), rng.random((3, 4))), "age": (("step", "agent"), rng.random((3, 4))),
                     "price": ("step", rng.random(3))}, coords={"step": [10, 11, 12], "agent": [5, 6, 7, 8]})
    p = Panel.from_xarray(ds)
    assert p.features == ("wealth", "age") and list(p.steps) == [10, 11, 12]
    np.testing.assert_array_equal(p.feature("age"), ds["age"].values)
    assert Panel.from_xarray(ds, features=["age"]).features == ("age",)
    one = Panel.from_xarray(ds["wealth"])
    assert one.features == ("wealth",) and one.shape == (3, 4, 1)
    with pytest.raises(ShapeError, match=r"dims must be \(step, agent"):
        Panel.from_xarray(ds["price"])
    with pytest.raises(UnknownFeatureError, match="nope"):
        Panel.from_xarray(ds, features=["nope"])


def test_attribution_exports_keep_labels_and_stderr():
    z = np.abs(np.random.default_rng(3).normal(size=(2, 6, 1)))
    panel = Panel(z, agent_ids=[f"u{i}" for i in range(6)], steps=[2020, 2021])
    res = attribute(indicators.get("var"), panel)
    by_agent, by_step = res.by_agent(labels=True), res.by_step(labels=True)
    assert list(by_agent.index) == list(panel.agent_ids) and by_agent.index.name == "agent"
    np.testing.assert_array_equal(by_agent.to_numpy(), res.by_agent())
    assert list(by_step.index) == [2020, 2021] and by_step[2021] == res.by_step()[1]
    ss = attribute(indicators.get("var"), panel.select_steps([0]), method=SampledShapley(permutations=30), rng=0)
    table = ss.to_pandas()
    assert {"step", "agent", "phi", "stderr"} <= set(table.columns)
    ds = ss.to_xarray()
    assert ds["phi"].dims == ("step", "agent") and "stderr" in ds and ds.attrs["method"] == ss.method
    np.testing.assert_array_equal(ds["stderr"].values, ss.stderr)
    assert list(ds["agent"].values) == list(panel.agent_ids)
    assert "stderr" not in res.to_xarray() and "stderr" not in res.to_pandas()


def test_missing_xarray_is_a_typed_error(monkeypatch):
    real = builtins.__import__

    def no_xarray(name, *args, **kwargs):
        if name == "xarray" or name.startswith("xarray."):
            raise ImportError("No module named 'xarray'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_xarray)
    with pytest.raises(OptionalDependencyError, match=r"aumann\[xarray\]"):
        Panel(np.ones((1, 2, 1))).to_xarray()
