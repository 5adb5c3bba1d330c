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


def test_a_dataarray_in_another_dim_order_is_refused_not_transposed():
    xr = pytest.importorskip("xarray")
    from aumann.attribution import attribute

    z = np.arange(24, dtype=float).reshape(3, 4, 2) + 1  # (step, agent, feature)
    da = xr.DataArray(z.transpose(1, 0, 2), dims=("agent", "step", "feature"))
    # Panel() read it by position: T = 4 agents, N = 3 steps, silently
    with pytest.raises(PanelError, match=r"dims are \('agent', 'step', 'feature'\).*Panel.from_xarray"):
        Panel(da)
    with pytest.raises(PanelError, match=r"Panel\.from_xarray"):
        attribute("heat", da)
    with pytest.raises(PanelError, match=r"dims are \('step', 'agent'\)"):  # (T, N) read as (N, D)
        Panel(xr.DataArray(z[..., 0], dims=("step", "agent")))
    assert Panel.from_xarray(da).shape == (3, 4, 2)


def test_a_dataarray_in_the_panels_order_keeps_its_coordinates_as_labels():
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(np.ones((2, 3, 2)), dims=("step", "agent", "feature"),
                      coords={"agent": ["a", "b", "c"], "feature": ["wealth", "debt"], "step": [10, 20]})
    p = Panel(da)
    assert p.agent_ids.tolist() == ["a", "b", "c"] and p.features == ("wealth", "debt") and p.steps.tolist() == [10, 20]
    assert Panel(da, features=["x", "y"]).features == ("x", "y")  # given labels win
    assert Panel(xr.DataArray(np.ones((2, 3, 2)))).features == ("f0", "f1")  # unnamed dims: by position, as before


def test_a_long_table_given_to_panel_is_refused_not_read_as_agents():
    import pandas as pd

    from aumann.attribution import attribute

    long = pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
    # was Panel(T=1, N=4, D=3): every (step, agent) row an agent, the step and agent columns features
    with pytest.raises(PanelError, match=r"long table.*Panel\.from_dataframe"):
        Panel(long)
    mesa = long.set_index(["step", "agent"]).rename_axis(["Step", "AgentID"])  # get_agent_vars_dataframe()
    with pytest.raises(PanelError, match="long table"):
        attribute("lin", mesa)
    assert Panel.from_dataframe(mesa).shape == (2, 2, 1)


def test_a_wide_frame_keeps_its_column_names_and_index_as_labels():
    import pandas as pd

    wide = pd.DataFrame({"wealth": [1.0, 2.0], "debt": [0.5, 0.0]}, index=pd.Index(["ann", "bob"], name="agent"))
    p = Panel(wide)  # the names were dropped: features f0, f1 and agents 0, 1
    assert p.features == ("wealth", "debt") and p.agent_ids.tolist() == ["ann", "bob"] and p.shape == (1, 2, 2)
    plain = Panel(pd.DataFrame(np.ones((2, 2))))
    assert plain.features == ("f0", "f1") and plain.agent_ids.tolist() == [0, 1]


def _share_of_top(z):  # a user's bug: x.sum() sums over the whole batch, not over each step's agents
    x = z[..., 0]
    return (x / x.sum()).amax(dim=-1)


def _share_of_top_fixed(z):
    x = z[..., 0]
    return (x / x.sum(dim=-1, keepdim=True)).amax(dim=-1)


@pytest.mark.parametrize("method", ["AumannShapley", "LeaveOneOut", "ExactShapley", "ExactBanzhaf"])
def test_an_indicator_that_reduces_over_the_batch_is_refused_by_every_method(method):
    import aumann.attribution as A
    from aumann.errors import IndicatorError

    z = np.abs(np.random.default_rng(0).normal(size=(4, 5, 2))) + 0.1
    # f(z_t) itself depended on the batch it was evaluated in: 0.0868 at step 0 under the path integral, 0.1788 under
    # ExactShapley, for the same step; leave-one-out and Banzhaf returned such numbers without a word
    with pytest.raises(IndicatorError, match=r"not one value per batch element.*x\.sum\(dim=-1\), not x\.sum\(\)"):
        A.attribute(_share_of_top, Panel(z), getattr(A, method)(), baseline="mean")
    res = A.attribute(_share_of_top_fixed, Panel(z), getattr(A, method)(), baseline="mean")
    want = [float(_share_of_top_fixed(__import__("torch").tensor(z[t]))) for t in range(4)]
    np.testing.assert_allclose(res.f_values, want, rtol=1e-12)


def test_an_indicator_that_draws_random_numbers_is_refused():
    import torch

    from aumann.attribution import LeaveOneOut, attribute
    from aumann.errors import IndicatorError

    def noisy(z):
        return z.sum(dim=(-2, -1)) + torch.rand(z.shape[:-2], dtype=z.dtype)

    with pytest.raises(IndicatorError, match="draw no random numbers"):
        attribute(noisy, Panel(np.ones((2, 3, 1))), LeaveOneOut())


def test_a_batched_indicator_on_a_float32_panel_passes_the_check():
    from aumann.attribution import attribute

    z = np.abs(np.random.default_rng(1).normal(size=(3, 50, 2))).astype(np.float32)
    res = attribute(lambda q: (q ** 2).sum(dim=(-2, -1)), Panel(z))
    np.testing.assert_allclose(res.f_values, (z.astype(np.float64) ** 2).sum(axis=(1, 2)), rtol=1e-5)


def test_a_baseline_series_labelled_by_feature_is_read_by_name_not_position():
    import pandas as pd

    from aumann.attribution import attribute

    df = pd.DataFrame({"step": [0, 0, 1, 1], "agent": [1, 2, 1, 2], "wealth": [1.0, 2, 3, 4],
                       "income": [10.0, 20, 30, 40]})
    p = Panel.from_dataframe(df)  # features (wealth, income)
    first = lambda z: z[..., 0].mean(-1)  # noqa: E731 - the mean wealth
    # df[["income", "wealth"]].mean() was read by position: wealth's baseline was income's mean, 25.0
    res = attribute(first, p, baseline=df[["income", "wealth"]].mean())
    np.testing.assert_allclose(res.f_baseline, [2.5, 2.5])
    frame = pd.DataFrame({"income": [25.0, 25.0], "wealth": [2.5, 2.5]})  # (N, D), columns by name too
    np.testing.assert_allclose(attribute(first, p, baseline=frame).f_baseline, [2.5, 2.5])
    np.testing.assert_allclose(attribute(first, p, baseline=pd.Series([2.5, 25.0])).f_baseline, [2.5, 2.5])
    with pytest.raises(BaselineError, match=r"labelled by \['wealth', 'debt'\], which are not the panel's features"):
        attribute(first, p, baseline=pd.Series({"wealth": 1.0, "debt": 2.0}))


def test_a_single_text_id_is_not_read_as_its_characters():
    from aumann.errors import UnknownAgentError

    p = Panel(np.ones((2, 3, 1)), agent_ids=["a", "b", "ab"])
    with pytest.raises(UnknownAgentError, match=r"single text 'ab': pass \['ab'\]"):
        p.subset("ab")  # was the panel of agents 'a' and 'b'
    assert p.subset(["ab"]).agent_ids.tolist() == ["ab"]


def test_group_labels_in_a_series_indexed_by_agent_id_are_read_by_id():
    import pandas as pd

    from aumann.attribution import attribute

    df = pd.DataFrame({"step": [0, 0, 0, 1, 1, 1], "agent": ["c", "a", "b", "c", "a", "b"],
                       "w": [1.0, 2, 3, 4, 5, 6]})
    p = Panel.from_dataframe(df)  # agents sorted: a, b, c
    tiers = pd.Series({"c": "top", "a": "tail", "b": "tail"})  # a per-agent table in its own order
    # read by position, agent 'a' was 'top': R_top was 1/3 (a's share) instead of c's 5/21
    tiered = p.with_groups(tier=tiers)
    assert dict(zip(tiered.agent_ids.tolist(), tiered.groups["tier"].tolist())) == {"a": "tail", "b": "tail",
                                                                                    "c": "top"}
    res = attribute("lin", p)
    assert res.group_shares(tiers)["top"] == pytest.approx(5 / 21)
    assert attribute("lin", tiered).group_shares("tier")["top"] == pytest.approx(5 / 21)
    with pytest.raises(PanelError, match=r"1 of the panel's 3 agents have no entry, e\.g\. \['b'\]"):
        p.with_groups(tier=pd.Series({"c": "top", "a": "tail"}))
    with pytest.raises(PanelError, match="ids repeat in its index"):
        res.group_shares(pd.Series(["x", "y", "z"], index=["a", "a", "c"]))
    positional = p.with_groups(tier=pd.Series(["x", "y", "z"]))  # a default RangeIndex: by position, as before
    assert positional.groups["tier"].tolist() == ["x", "y", "z"]


def test_dataset_variables_that_are_no_feature_are_named_not_dropped_silently(tmp_path):
    xr = pytest.importorskip("xarray")
    z = np.arange(24, dtype=float).reshape(3, 4, 2)
    ds = xr.Dataset({"w": (("step", "agent"), z[..., 0]), "price": ("step", [1.0, 2.0, 3.0]),
                     "name": (("step", "agent"), np.array([["x"] * 4] * 3))})
    # the text variable stopped the read with "an object array ... (ragged nesting?)"; the step-only one vanished
    p = Panel.from_xarray(ds)
    assert p.features == ("w",) and p.meta["skipped_variables"] == ["price", "name"]
    assert Panel.load(p.save(tmp_path / "p.npz")).meta["skipped_variables"] == ["price", "name"]
    with pytest.raises(PanelError, match=r"feature variable\(s\) 'name' \(<U1\) of the dataset do not hold numbers"):
        Panel.from_xarray(ds, features=["w", "name"])


@pytest.mark.parametrize("given", [[b"alice", b"bob"], np.array([b"alice", b"bob"]),
                                   np.array([b"alice", b"bob"], dtype=object)], ids=["list", "S-array", "object"])
def test_ids_given_as_bytes_are_the_text_they_hold(given):
    # h5py / netCDF hand strings over as bytes: a list kept them as bytes (written b'alice' in CSVs and pages), an
    # object array made the text "b'alice'" of each: two different panels of the same ids
    p = Panel(np.ones((1, 2, 1)), agent_ids=given, groups={"tier": given})
    assert p.agent_ids.tolist() == ["alice", "bob"] and p.groups["tier"].tolist() == ["alice", "bob"]
    assert p.subset(["bob"]).agent_ids.tolist() == ["bob"]


def test_bytes_ids_that_are_not_utf8_or_mixed_with_numbers_are_refused():
    with pytest.raises(PanelError, match=r"b'\\xff' at position 0 is not UTF-8"):
        Panel(np.ones((1, 2, 1)), agent_ids=[b"\xff", b"a"])
    with pytest.raises(PanelError, match="mixes numbers and text"):
        Panel(np.ones((1, 2, 1)), agent_ids=[b"1", 2])


def test_the_batch_probe_does_not_mistake_summation_order_for_coupling():
    from aumann.attribution import AumannShapley, attribute

    def var_naive(z):  # E[x²] − E[x]²: cancels 8 digits here, so summation order shows at 1e-3 of the value
        x = z.sum(-1)
        return (x ** 2).mean(-1) - x.mean(-1) ** 2

    z = 1e4 + 1e-2 * np.random.default_rng(100000).normal(size=(2, 100000, 3))
    # compared against a batch of one, the probe refused this f: 0.000301361... alone, 0.000301122... in a batch of two
    res = attribute(var_naive, Panel(z), AumannShapley(steps=4, closed_form=False), baseline="mean")
    assert res.phi.shape == (2, 100000)


def test_adaptive_k_that_stops_short_of_tol_warns():
    from aumann.attribution import AumannShapley, attribute
    from aumann.errors import EfficiencyGapWarning

    z = np.random.default_rng(0).normal(size=(2, 6, 2))
    kink = lambda q: (q[..., 0] - 0.1).abs().sum(-1)  # noqa: E731 - not C²: the gap shrinks slowly with K
    # the result came back with a relative gap of 7.3e-4 for tol = 1e-6 and only provenance["converged"] = False
    with pytest.warns(EfficiencyGapWarning, match=r"adaptive K stopped at K = 240 .* above tol = 1e-06"):
        res = attribute(kink, Panel(z), AumannShapley(tol=1e-6, max_steps=256))
    assert res.provenance["converged"] is False
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a smooth f meets tol: no warning
        assert attribute(lambda q: (q ** 2).sum((-2, -1)), Panel(z), AumannShapley(tol=1e-6)).provenance["converged"]


def test_a_frame_with_two_step_like_columns_is_refused_not_read_by_the_first_name():
    import pandas as pd

    rng = np.random.default_rng(0)
    netlogo = pd.DataFrame({"tick": np.repeat([0, 1, 2], 4), "who": np.tile([1, 2, 3, 4], 3),
                            "time": rng.random(12), "wealth": rng.random(12)})  # 'time' is a feature (time spent)
    # 'time' was taken as the step column: T = 12 steps (one per row), 'tick' a feature, 36 of 48 rows dead
    with pytest.raises(PanelError, match=r"2 columns that could be the step column: \['tick', 'time'\]"):
        Panel.from_dataframe(netlogo, agent="who")
    p = Panel.from_dataframe(netlogo, agent="who", step="tick")
    assert p.shape == (3, 4, 2) and p.features == ("time", "wealth") and p.alive is None
    mesa = netlogo.rename(columns={"tick": "Step", "who": "AgentID"}).set_index(["Step", "AgentID"])
    assert Panel.from_dataframe(mesa).features == ("time", "wealth")  # the index level is the step, as before


@pytest.mark.parametrize("index,columns", [("step", "agent"), ("agent", "step")])
def test_a_pivot_of_steps_and_agents_given_to_panel_is_refused(index, columns):
    import pandas as pd

    long = pd.DataFrame({"step": [0, 0, 1, 1], "agent": ["a", "b", "a", "b"], "wealth": [1.0, 2, 3, 4]})
    wide = long.pivot(index=index, columns=columns, values="wealth")
    # was Panel(T=1, N=2, D=2): the steps read as agents (ids 0, 1) and the agents as features 'a', 'b'
    with pytest.raises(PanelError, match=r"a pivot of steps and agents.*Panel\.from_dataframe"):
        Panel(wide)
    assert Panel.from_dataframe(wide.stack().rename("wealth").reset_index()).shape == (2, 2, 1)


def test_an_indicator_made_by_a_registered_factory_carries_the_registered_name():
    from aumann.attribution import attribute, indicators

    def power_sum(power):
        return lambda z: (z ** power).sum((-2, -1))

    indicators.register(power_sum, name="h17_power_sum", overwrite=True)
    f = indicators.get("h17_power_sum", power=2)
    # was FunctionIndicator(name='<lambda>'): the result's provenance, summary.json and the pages said '<lambda>'
    assert f.name == "h17_power_sum"
    assert attribute(f, Panel(np.ones((1, 2, 1)))).provenance["indicator"] == "h17_power_sum"


def test_context_indexed_by_step_label_is_read_by_label():
    import pandas as pd

    price = pd.Series({3: 30.0, 1: 10.0, 2: 20.0})  # a per-step table in its own row order
    # read by position, step 1 had the price of step 3
    p = Panel(np.ones((3, 2, 1)), steps=[1, 2, 3], context={"price": price})
    np.testing.assert_array_equal(p.context["price"], [10.0, 20.0, 30.0])
    frame = Panel(np.ones((3, 2, 1)), steps=[1, 2, 3], context={"m": price.to_frame().assign(b=[3.0, 1.0, 2.0])})
    np.testing.assert_array_equal(frame.context["m"], [[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]])
    with pytest.raises(PanelError, match=r"no row for 1 of the panel's 3 steps, e\.g\. step 2"):
        Panel(np.ones((3, 2, 1)), steps=[1, 2, 3], context={"price": pd.Series({3: 30.0, 1: 10.0, 7: 20.0})})
    positional = Panel(np.ones((3, 2, 1)), context={"price": pd.Series([5.0, 6.0, 7.0])})  # RangeIndex: as before
    np.testing.assert_array_equal(positional.context["price"], [5.0, 6.0, 7.0])
