"""Bad input to the attribution API: each case raises the exact typed error and names the offending input.

Issue 10: panels (alive masks, ragged / complex / bfloat16 values, non-JSON meta), every integer and real
hyperparameter of every method, rng / baseline arguments, indicators that return complex values or raise,
and non-finite results of every method (closed forms, path integral, LOO, exact / sampled Shapley and
Banzhaf, user games), checked in the one place every result passes through.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from aumann.attribution import (
    Attribution,
    AumannShapley,
    ExactBanzhaf,
    ExactShapley,
    FunctionGame,
    LeaveOneOut,
    Panel,
    PooledForm,
    QuadraticIndicator,
    SampledBanzhaf,
    SampledShapley,
    SampledShapleyCV,
    attribute,
    indicators,
    metrics,
    quadrature,
    smoothing,
)
from aumann.errors import (
    AttributionFileError,
    BaselineError,
    GameError,
    IndicatorError,
    MethodError,
    MetricError,
    OutputError,
    PanelError,
    ShapeError,
    UnknownFeatureError,
    UnknownIndicatorError,
    UnsafeNameError,
)
from aumann.io import write_npz

Z = np.abs(np.random.default_rng(0).normal(size=(3, 8, 3)))


def _panel() -> Panel:
    return Panel(Z)


# ---------------------------------------------------------------------------------------------- panels
ALIVE_BAD = {
    "strings": (np.array([["False"] * 8] * 3), "alive"),
    "nan": (np.full((3, 8), np.nan), "alive"),
    "floats": (np.full((3, 8), 0.5), "alive"),
    "float_ones": (np.ones((3, 8)), "alive"),
    "int_two": (np.full((3, 8), 2), "0 and 1"),
    "int_negative": (np.full((3, 8), -1), "0 and 1"),
    "object": (object(), "alive"),
    "list_of_strings": ([["x"] * 8] * 3, "alive"),
    "complex": (np.ones((3, 8), complex), "alive"),
}


@pytest.mark.parametrize("case", sorted(ALIVE_BAD), ids=str)
def test_alive_mask_accepts_only_bool_or_01_integers(case):
    mask, needle = ALIVE_BAD[case]
    with pytest.raises(PanelError, match=needle):
        Panel(Z, alive=mask)


def test_alive_mask_bool_and_01_integers_are_accepted():
    m = np.ones((3, 8), dtype=np.int64)
    m[0, 0] = 0
    p = Panel(Z, alive=m)
    assert p.alive.dtype == bool and not p.alive[0, 0] and p.alive.sum() == 23
    assert Panel(Z, alive=torch.ones(3, 8, dtype=torch.bool)).alive.all()


PANEL_BAD = {
    "ragged_2d": (lambda: Panel([[1.0, 2.0], [3.0]]), PanelError, "ragged"),
    "ragged_3d": (lambda: Panel([[[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0]]]), PanelError, "ragged"),
    "complex_values": (lambda: Panel(np.ones((2, 3), complex)), PanelError, "complex"),
    "string_values": (lambda: Panel(np.array([["a", "b"]])), PanelError, "numbers"),
    "none_values": (lambda: Panel(None), PanelError, "NoneType"),
    "dict_values": (lambda: Panel({"a": 1}), PanelError, "dict"),
    "bfloat16": (lambda: Panel(torch.ones(2, 3, dtype=torch.bfloat16)), PanelError, "bfloat16"),
    "complex_tensor": (lambda: Panel(torch.ones(2, 3, dtype=torch.complex64)), PanelError, "complex"),
    "meta_object": (lambda: Panel(Z, meta={"x": object()}), PanelError, "meta"),
    "meta_nan": (lambda: Panel(Z, meta={"run": {"loss": float("nan")}}), PanelError, "meta"),
    "meta_not_mapping": (lambda: Panel(Z, meta=[1, 2]), PanelError, "meta"),
    "features_int": (lambda: Panel(Z, features=5), PanelError, "features"),
    "features_str": (lambda: Panel(Z, features="abc"), PanelError, "features"),
    "groups_not_mapping": (lambda: Panel(Z, groups=[1, 2]), PanelError, "groups"),
    "context_not_mapping": (lambda: Panel(Z, context=[1]), PanelError, "context"),
    "context_ragged": (lambda: Panel(Z, context={"price": [[1], [1, 2], [3]]}), PanelError, "price"),
    "context_strings": (lambda: Panel(Z, context={"price": ["a"] * 3}), PanelError, "price"),
    "agent_ids_ragged": (lambda: Panel(Z, agent_ids=[[1], [1, 2]] + [3] * 6), ShapeError, "agent_ids"),
    "agent_ids_scalar": (lambda: Panel(Z, agent_ids=5), ShapeError, "agent_ids"),
    "group_name_escape": (lambda: Panel(Z, groups={"../../x": ["a"] * 8}), UnsafeNameError, "../../x"),
    "group_name_absolute": (lambda: Panel(Z, groups={"/etc/x": ["a"] * 8}), UnsafeNameError, "/etc/x"),
    "context_name_escape": (lambda: Panel(Z, context={"../c": [1.0] * 3}), UnsafeNameError, "../c"),
    "take_agents_fraction": (lambda: _panel().take_agents([2.5]), ShapeError, "integers"),
    "take_agents_strings": (lambda: _panel().take_agents(["a"]), ShapeError, "agent positions"),
    "select_steps_out_of_range": (lambda: _panel().select_steps([10]), ShapeError, "step positions"),
    "select_steps_empty": (lambda: _panel().select_steps([]), PanelError, "no steps"),
    "astype_unknown": (lambda: _panel().astype("nope"), PanelError, "nope"),
    "astype_int": (lambda: _panel().astype(np.int32), PanelError, "int32"),
    "feature_index_int": (lambda: _panel().feature_index(3), UnknownFeatureError, "3"),
    "save_to_directory": (lambda: _panel().save("/tmp"), OutputError, "/tmp"),
    # np.asarray drops a masked array's mask: the values under it (a fill such as 999 or 1e20) were read as data
    "masked_values": (lambda: Panel(np.ma.masked_greater(Z, 2.0)), PanelError, "panel values: a masked array"),
    "masked_alive": (lambda: Panel(Z, alive=np.ma.masked_array(np.ones((3, 8), bool), mask=np.eye(3, 8))),
                     PanelError, "alive mask: a masked array"),
    "masked_context": (lambda: Panel(Z, context={"price": np.ma.masked_array([1.0, 2.0, 1e20],
                                                                             mask=[0, 0, 1])}),
                       PanelError, "context 'price': a masked array with 1 masked value"),
    "masked_baseline": (lambda: attribute("lin", _panel(), baseline=np.ma.masked_array([0.0, 0.0, 5.0],
                                                                                       mask=[0, 0, 1])),
                        BaselineError, "baseline: a masked array"),
}


def test_a_masked_array_without_masked_values_is_an_array():
    assert Panel(np.ma.masked_array(Z)).equals(_panel())


@pytest.mark.parametrize("case", sorted(PANEL_BAD), ids=str)
def test_bad_panel_input_is_a_typed_error_naming_it(case):
    fn, error, needle = PANEL_BAD[case]
    with pytest.raises(error) as info:
        fn()
    assert needle in str(info.value)


def test_float16_tensors_are_upcast_not_refused():
    p = Panel(torch.ones(2, 3, dtype=torch.float16))
    assert p.dtype == np.float64


# ---------------------------------------------------------------------------------------------- loading files
def _corrupt_files(tmp_path):
    good = _panel().save(tmp_path / "good.npz").read_bytes()
    files = {
        "random_bytes": np.random.default_rng(1).bytes(500),
        "empty": b"",
        "truncated_half": good[: len(good) // 2],
        "truncated_tail": good[:-10],
        "text": b"hello world, not a panel",
    }
    out = {}
    for name, data in files.items():
        (tmp_path / f"{name}.npz").write_bytes(data)
        out[name] = tmp_path / f"{name}.npz"
    np.save(tmp_path / "lone.npy", np.ones(3))
    out["lone_npy"] = tmp_path / "lone.npy"
    np.savez(tmp_path / "pickled.npz", a=np.array([{"a": 1}], dtype=object))
    out["pickled"] = tmp_path / "pickled.npz"
    np.savez(tmp_path / "foreign.npz", a=np.ones(3))
    out["foreign"] = tmp_path / "foreign.npz"
    bad = bytearray(good)
    bad[len(bad) // 2 : len(bad) // 2 + 64] = b"\x00" * 64
    (tmp_path / "zeroed.npz").write_bytes(bytes(bad))
    out["zeroed_block"] = tmp_path / "zeroed.npz"
    return out


@pytest.mark.parametrize("case", ["random_bytes", "empty", "truncated_half", "truncated_tail", "text", "lone_npy",
                                  "pickled", "foreign", "zeroed_block"])
def test_damaged_panel_and_attribution_files_are_typed_errors(tmp_path, case):
    path = _corrupt_files(tmp_path)[case]
    with pytest.raises(PanelError) as info:
        Panel.load(path)
    assert str(path) in str(info.value)
    with pytest.raises(AttributionFileError) as info:
        Attribution.load(path)
    assert str(path) in str(info.value)
    if case == "random_bytes":
        assert "pickled" not in str(info.value) and "not an .npz archive" in str(info.value)


def test_incomplete_aumann_files_name_what_is_missing(tmp_path):
    write_npz(tmp_path / "p.npz", {"x": np.ones(2)}, meta={"format": "aumann.panel/1", "features": ["a"]})
    with pytest.raises(PanelError, match=r"lacks arrays \['values'"):
        Panel.load(tmp_path / "p.npz")
    write_npz(tmp_path / "q.npz", {"values": np.ones((1, 2, 1)), "agent_ids": np.arange(2), "steps": np.arange(1)},
              meta={"format": "aumann.panel/1", "features": 5})
    with pytest.raises(PanelError, match="feature names"):
        Panel.load(tmp_path / "q.npz")
    write_npz(tmp_path / "a.npz", {"x": np.ones(2)}, meta={"format": "aumann.attribution/1"})
    with pytest.raises(AttributionFileError, match="lacks"):
        Attribution.load(tmp_path / "a.npz")
    res = attribute("heat", _panel())
    arrays = {"phi": res.phi.copy(), "delta_v": res.delta_v, "f_values": res.f_values, "f_baseline": res.f_baseline,
              "agent_ids": res.agent_ids, "steps": res.steps}
    arrays["phi"][0, 0] = np.nan
    write_npz(tmp_path / "nan.npz", arrays, meta={"format": "aumann.attribution/1", "features": ["a", "b", "c"],
                                                  "n_evals": None, "satisfies_efficiency": True, "method": "x",
                                                  "provenance": {}})
    with pytest.raises(AttributionFileError, match="NaN"):
        Attribution.load(tmp_path / "nan.npz")


def test_saving_into_an_existing_file_path_is_an_output_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="existing file"):
        _panel().save(tmp_path / "file" / "p.npz")
    res = attribute("heat", _panel())
    with pytest.raises(OutputError, match="existing file"):
        res.save(tmp_path / "file" / "a.npz")
    with pytest.raises(OutputError, match="existing file"):
        res.to_parquet(tmp_path / "file" / "a.parquet")


# ---------------------------------------------------------------------------------------------- hyperparameters
HYPER_BAD = {
    "AS_steps_fraction": (lambda: AumannShapley(steps=2.7), "steps"),
    "AS_steps_nan": (lambda: AumannShapley(steps=float("nan")), "steps"),
    "AS_steps_inf": (lambda: AumannShapley(steps=float("inf")), "steps"),
    "AS_steps_bool": (lambda: AumannShapley(steps=True), "steps"),
    "AS_steps_str": (lambda: AumannShapley(steps="30"), "steps"),
    "AS_steps_zero": (lambda: AumannShapley(steps=0), "steps"),
    "AS_power_inf": (lambda: AumannShapley(power=float("inf")), "power"),
    "AS_power_nan": (lambda: AumannShapley(power=float("nan")), "power"),
    "AS_power_zero": (lambda: AumannShapley(power=0), "power"),
    "AS_power_negative": (lambda: AumannShapley(power=-1), "power"),
    "AS_power_str": (lambda: AumannShapley(power="x"), "power"),
    "AS_power_bool": (lambda: AumannShapley(power=True), "power"),
    "AS_tol_nan": (lambda: AumannShapley(tol=float("nan")), "tol"),
    "AS_tol_inf": (lambda: AumannShapley(tol=float("inf")), "tol"),
    "AS_tol_str": (lambda: AumannShapley(tol="a"), "tol"),
    "AS_max_steps_fraction": (lambda: AumannShapley(max_steps=2.5), "max_steps"),
    "AS_max_steps_zero": (lambda: AumannShapley(max_steps=0), "max_steps"),
    "AS_rule_unknown": (lambda: AumannShapley(rule="simpson"), "rule"),
    "AS_rule_none": (lambda: AumannShapley(rule=None), "rule"),
    "AS_closed_form_str": (lambda: AumannShapley(closed_form="yes"), "closed_form"),
    "AS_memory_negative": (lambda: AumannShapley(memory_budget=-1), "memory_budget"),
    "AS_memory_nan": (lambda: AumannShapley(memory_budget=float("nan")), "memory_budget"),
    "AS_pooled_fast_path_str": (lambda: AumannShapley(pooled_fast_path="no"), "pooled_fast_path"),
    "SS_permutations_fraction": (lambda: SampledShapley(permutations=2.5), "permutations"),
    "SS_permutations_nan": (lambda: SampledShapley(permutations=float("nan")), "permutations"),
    "SS_permutations_bool": (lambda: SampledShapley(permutations=True), "permutations"),
    "SS_permutations_str": (lambda: SampledShapley(permutations="10"), "permutations"),
    "SS_permutations_one": (lambda: SampledShapley(permutations=1), "permutations"),
    # accepted, and the step drew permutations until the process was killed: counts are bounded by MAX_DRAWS
    "SS_permutations_unbounded": (lambda: SampledShapley(permutations=10**30),
                                  r"permutations must be at most MAX_DRAWS = 10\*\*9"),
    "SS_permutations_float_huge": (lambda: SampledShapley(permutations=1e12), "permutations"),
    "SB_samples_unbounded": (lambda: SampledBanzhaf(samples=2**62), r"samples must be at most MAX_DRAWS = 10\*\*9"),
    "CV_permutations_unbounded": (lambda: SampledShapleyCV(permutations=10**10, stderr_tol=1e-3), "permutations"),
    "SS_max_evals_fraction": (lambda: SampledShapley(max_evals=2.5), "max_evals"),
    "SS_stderr_tol_nan": (lambda: SampledShapley(stderr_tol=float("nan")), "stderr_tol"),
    "SS_stderr_tol_inf": (lambda: SampledShapley(stderr_tol=float("inf")), "stderr_tol"),
    "SS_stderr_tol_str": (lambda: SampledShapley(stderr_tol="x"), "stderr_tol"),
    "SS_round_size_fraction": (lambda: SampledShapley(round_size=1.5), "round_size"),
    "SS_antithetic_str": (lambda: SampledShapley(antithetic="no"), "antithetic"),
    "SS_antithetic_two": (lambda: SampledShapley(permutations=2, antithetic=True), "permutations"),
    "SS_memory_fraction": (lambda: SampledShapley(memory_budget=1e5 + 0.5), "memory_budget"),
    "SS_fast_str": (lambda: SampledShapley(fast="x"), "fast"),
    "SB_samples_fraction": (lambda: SampledBanzhaf(samples=2.5), "samples"),
    "SB_samples_nan": (lambda: SampledBanzhaf(samples=float("nan")), "samples"),
    "SB_estimator_unknown": (lambda: SampledBanzhaf(estimator="x"), "estimator"),
    "SB_max_evals_str": (lambda: SampledBanzhaf(max_evals="10"), "max_evals"),
    "ES_max_players_fraction": (lambda: ExactShapley(max_players=2.5), "max_players"),
    "ES_max_players_nan": (lambda: ExactShapley(max_players=float("nan")), "max_players"),
    "ES_max_players_huge": (lambda: ExactShapley(max_players=64), "max_players"),
    "EB_max_players_zero": (lambda: ExactBanzhaf(max_players=0), "max_players"),
    "LOO_memory_str": (lambda: LeaveOneOut(memory_budget="x"), "memory_budget"),
    "LOO_fast_int": (lambda: LeaveOneOut(fast=1), "fast"),
    "quadrature_steps_fraction": (lambda: quadrature(2.5), "steps"),
    "quadrature_power_nan": (lambda: quadrature(3, power=float("nan")), "power"),
}


@pytest.mark.parametrize("case", sorted(HYPER_BAD), ids=str)
def test_method_hyperparameters_reject_bad_values_by_name(case):
    fn, name = HYPER_BAD[case]
    with pytest.raises(MethodError) as info:
        fn()
    assert re.search(name, str(info.value))


def test_integral_floats_are_accepted_as_integers():
    assert AumannShapley(steps=30.0).steps == 30 and SampledShapley(permutations=1e2).permutations == 100
    assert SampledShapley(permutations=10**9).permutations == SampledBanzhaf(samples=1e9).samples == 10**9
    assert AumannShapley(steps=np.int64(12)).steps == 12


# ---------------------------------------------------------------------------------------------- attribute() arguments
ARG_BAD = {
    "rng_string": (dict(method=SampledShapley(permutations=4), rng="abc"), MethodError, "rng"),
    "rng_negative": (dict(method=SampledShapley(permutations=4), rng=-1), MethodError, "rng"),
    "rng_float": (dict(method=SampledShapley(permutations=4), rng=1.5), MethodError, "rng"),
    "rng_bool": (dict(method=SampledShapley(permutations=4), rng=True), MethodError, "rng"),
    "baseline_object": (dict(baseline=object()), BaselineError, "baseline"),
    "baseline_nan": (dict(baseline=np.full(3, np.nan)), BaselineError, "baseline"),
    "baseline_strings": (dict(baseline=np.array(["a"] * 3)), BaselineError, "baseline"),
    "baseline_complex": (dict(baseline=np.ones(3, complex)), BaselineError, "complex"),
    "baseline_bfloat16": (dict(baseline=torch.zeros(3, dtype=torch.bfloat16)), BaselineError, "bfloat16"),
    "baseline_ragged": (dict(baseline=[[1, 2], [3]]), BaselineError, "baseline"),
    "baseline_unknown": (dict(baseline="nope"), BaselineError, "nope"),
    "baseline_scalar": (dict(baseline=5), BaselineError, "baseline"),
    "method_string": (dict(method="path"), MethodError, "path"),
    "per_feature_string": (dict(per_feature="yes"), MethodError, "per_feature"),
    "progress_string": (dict(progress="yes"), MethodError, "progress"),
}


@pytest.mark.parametrize("case", sorted(ARG_BAD), ids=str)
def test_attribute_arguments_are_checked_by_name(case):
    kw, error, needle = ARG_BAD[case]
    with pytest.raises(error) as info:
        attribute("heat", _panel(), **kw)
    assert needle in str(info.value)


@pytest.mark.parametrize("f, needle", [(None, "None"), (3, "int"), ("nope", "nope"), (4.5, "float")])
def test_unusable_indicators_are_typed_errors(f, needle):
    with pytest.raises(IndicatorError) as info:
        attribute(f, _panel())
    assert needle in str(info.value)


def test_a_path_instead_of_a_panel_says_to_load_it():
    with pytest.raises(MethodError, match=r"Panel\.load"):
        attribute("heat", "panel.npz")


def test_indicator_names_must_be_strings():
    with pytest.raises(UnknownIndicatorError, match="3"):
        indicators.get(3)


@pytest.mark.parametrize("name", ["", "   ", 3], ids=["empty", "blank", "integer"])
def test_registering_an_indicator_under_a_name_that_is_no_name_is_refused(monkeypatch, name):
    # register(ind, name="") registered it under ind.name ('<lambda>') instead, and "   " became a name
    monkeypatch.setattr(indicators, "_REGISTRY", dict(indicators._REGISTRY))
    before = indicators.names()
    with pytest.raises(IndicatorError, match="non-blank name"):
        indicators.register(indicators.FunctionIndicator(lambda z: z.sum((-1, -2))), name=name)
    assert indicators.names() == before


def sq_mean(z):
    """f = (1/n) Σ_i g_i², g_i = Σ_d z_{i,d}: zero-baseline Aumann–Shapley φ_i = g_i² / n (∫ 2τ g_i² / n dτ)."""
    return (z.sum(-1) ** 2).mean(-1)


def test_registering_a_plain_indicator_function_registers_the_indicator(monkeypatch):
    """register(sq_mean) stored sq_mean as a *factory*, so get("sq_mean") called sq_mean() and failed ('the factory of
    indicator 'sq_mean' raised TypeError: sq_mean() missing 1 required positional argument: 'z''): a function with a
    required positional parameter (z) is an indicator, wrapped as attribute(f, ...) wraps it."""
    monkeypatch.setattr(indicators, "_REGISTRY", dict(indicators._REGISTRY))
    assert indicators.register(sq_mean) is sq_mean
    indicators.register(lambda z, context=None: (z.sum(-1) ** 2).mean(-1), name="sq_mean_ctx")
    z = np.abs(Z[:2]) + 0.1
    for key in ("sq_mean", "sq_mean_ctx"):
        ind = indicators.get(key)
        assert isinstance(ind, indicators.FunctionIndicator) and ind.name == key
        np.testing.assert_allclose(indicators.evaluate(key, z), (z.sum(-1) ** 2).mean(-1), rtol=1e-14)
        res = attribute(key, Panel(z))
        np.testing.assert_allclose(res.phi, z.sum(-1) ** 2 / z.shape[1], rtol=1e-12)  # the reference above
        assert res.provenance["indicator"] == key
    indicators.register(indicators.FunctionIndicator(sq_mean, name="sq_mean_instance"))
    with pytest.raises(IndicatorError, match=r"registered as an indicator \(not a factory\), so it takes no"):
        indicators.get("sq_mean_instance", power=2)
    # factories keep their meaning: called by get(name, **params), a required parameter included
    indicators.register(lambda power=2.0: indicators.FunctionIndicator(lambda z: (z.sum(-1) ** power).mean(-1)),
                        name="power_mean")

    def make_power(power):
        return indicators.FunctionIndicator(lambda z: (z.sum(-1) ** power).mean(-1), name=f"power{power:g}")

    indicators.register(make_power)
    for key in ("power_mean", "make_power"):
        np.testing.assert_allclose(indicators.evaluate(indicators.get(key, power=3.0), z),
                                   (z.sum(-1) ** 3).mean(-1), rtol=1e-14)
    np.testing.assert_allclose(indicators.evaluate("power_mean", z), (z.sum(-1) ** 2).mean(-1), rtol=1e-14)
    with pytest.raises(IndicatorError, match="a lambda has none"):
        indicators.register(lambda z: z.sum((-1, -2)))


# ---------------------------------------------------------------------------------------------- what indicators return
def _f_complex(z):
    return z.sum((-1, -2)).to(torch.complex128)


def _f_raises(z):
    raise ZeroDivisionError("boom")


def _f_numpy(z):
    return z.numpy().sum((-1, -2))


def _f_long(z):
    return (z.sum((-1, -2)) * 100).long()


@pytest.mark.parametrize("method", [None, AumannShapley(closed_form=False), LeaveOneOut(),
                                    SampledShapley(permutations=4), ExactShapley(), SampledBanzhaf(samples=8)],
                         ids=["default", "path", "loo", "sampled_shapley", "exact_shapley", "sampled_banzhaf"])
@pytest.mark.parametrize("f, needle", [(_f_complex, "complex"), (_f_raises, "ZeroDivisionError"),
                                       (_f_numpy, "_f_numpy"), (_f_long, "int64")], ids=["complex", "raises",
                                                                                         "numpy", "integer"])
def test_misbehaving_user_indicators_are_indicator_errors_naming_them(method, f, needle):
    with pytest.raises(IndicatorError) as info:
        attribute(f, _panel(), method=method, rng=0)
    assert needle in str(info.value) and (f.__name__ in str(info.value) or needle == "int64")


def _pooled_with_rho(rho):
    psi = lambda z: z**2  # noqa: E731
    return indicators.FunctionIndicator(lambda z: torch.log1p(psi(z).mean(-2).sum(-1)), name="pooled_user",
                                        pooled=PooledForm(psi, rho))


@pytest.mark.parametrize("method", [LeaveOneOut(), SampledShapley(permutations=4), SampledShapleyCV(permutations=4),
                                    ExactShapley()], ids=["loo", "sampled_shapley", "sampled_shapley_cv", "exact"])
@pytest.mark.parametrize("rho, needle", [(lambda m: m, r"returned shape \(2, 2\) for sums of shape \(2, 2\)"),
                                         (lambda m: m.sum(-1).long(), "torch.int64"),
                                         (lambda m: m.sum(-1).numpy(), "ndarray"),
                                         (lambda m: m.sum(-1).half(), r"torch.float16 values; half precision")],
                         ids=["kept_p", "integer", "numpy", "half"])
def test_a_pooled_rho_that_misbehaves_is_named_as_the_pooled_rho(method, rho, needle):
    # rho=lambda m: m (the P axis kept) was "indicator 'pooled_user' raised ValueError: only one element tensors
    # can be converted to Python scalars", from float() inside the coalition kernel
    with pytest.raises(IndicatorError, match="pooled rho") as info:
        attribute(_pooled_with_rho(rho), Panel(np.abs(Z[:, :, :2]) + 0.1), method=method, rng=0)
    assert re.search(needle, str(info.value))


def _f_in_place(z):
    with torch.no_grad():  # (without no_grad torch refuses the write on the path's leaf; with it, nothing did)
        z.mul_(2.0)
    return z.sum((-1, -2))


@pytest.mark.parametrize("method", [None, AumannShapley(closed_form=False), LeaveOneOut(),
                                    SampledShapley(permutations=4), ExactShapley(), SampledBanzhaf(samples=8)],
                         ids=["default", "path", "loo", "sampled_shapley", "exact_shapley", "sampled_banzhaf"])
def test_an_indicator_that_writes_to_its_input_is_refused_and_leaves_the_panel_as_it_was(method):
    # the path integral handed f the panel's own memory: the user's panel was doubled, and every later attribution
    # of it (any method) reported a Δv two, four, eight times the true one; the coalition methods returned numbers
    # computed on the overwritten coalitions
    panel = _panel()
    before = panel.values.copy()
    with pytest.raises(IndicatorError, match="'_f_in_place' modified its input z in place"):
        attribute(_f_in_place, panel, method=method, rng=0)
    np.testing.assert_array_equal(panel.values, before)


def _caller_inputs():
    """What a caller hands ``evaluate`` whose float64 memory the indicator would otherwise see: a numpy array, a
    strided view of one, a CPU tensor, a panel's every step, one step of a panel."""
    panel = Panel(Z.copy(), alive=np.ones(Z.shape[:2], dtype=bool))
    wide = np.ones((3, 8, 6))
    return [("array", Z.copy(), lambda x: x), ("strided view", wide[:, :, ::2], lambda x: x),
            ("tensor", torch.as_tensor(Z.copy()), lambda x: x),
            ("panel", panel, indicators.EvalContext.of_panel),
            ("step", panel, lambda p: indicators.EvalContext.at_step(p, 1))]


@pytest.mark.parametrize("case", range(5), ids=["array", "strided_view", "tensor", "panel", "panel_step"])
def test_evaluate_refuses_an_indicator_that_writes_to_its_input_and_leaves_the_callers_data_as_it_was(case):
    # evaluate() handed f the caller's own float64 memory: the IndicatorError came after f had already doubled
    # the caller's array (or the panel a run recorded), so every later use of it was silently wrong
    _, data, state_of = _caller_inputs()[case]
    held = data.values if isinstance(data, Panel) else data
    before = np.array(held, copy=True)
    with pytest.raises(IndicatorError, match="'_f_in_place' modified its input z in place"):
        indicators.evaluate(_f_in_place, state_of(data))
    np.testing.assert_array_equal(np.asarray(held), before)


def test_evaluate_on_a_batch_over_the_memory_budget_leaves_the_callers_data_as_it_was(monkeypatch):
    # a batch cut into slices (and the slice measured for its cost first) gave f each slice of the caller's memory
    import aumann.attribution.memory as memory

    monkeypatch.setattr(memory, "limits", lambda device=None: (2**16, 2**30))
    z = np.ones((64, 40, 3))

    def heavy_in_place(z):
        out = (z.unsqueeze(-2) * z.unsqueeze(-3)).sum((-1, -2, -3))  # N × N × D per element: sliced
        with torch.no_grad():
            z.add_(1.0)
        return out

    with pytest.raises(IndicatorError, match="modified its input z in place"):
        indicators.evaluate(heavy_in_place, indicators.EvalContext(z, batched=True))
    assert np.all(z == 1.0)


def test_evaluate_in_slices_names_a_wrong_output_shape_with_the_slice_s_shapes(monkeypatch):
    """A batch cut into slices (over the memory budget) flattened each slice's output before the check: an f that
    kept the agent axis was 'returned shape (2560,) for a batch of shape (64, 40, 3)', a shape it never returned."""
    import aumann.attribution.memory as memory

    monkeypatch.setattr(memory, "limits", lambda device=None: (2**16, 2**30))
    z = np.ones((64, 40, 3))

    def heavy_keeps_agents(z):
        return (z.unsqueeze(-2) * z.unsqueeze(-3)).sum((-1, -2))  # N × N × D per element: sliced; (k, N) out

    with pytest.raises(IndicatorError, match=r"returned shape \((\d+), 40\) for a batch of shape \(\1, 40, 3\)"):
        indicators.evaluate(heavy_keeps_agents, indicators.EvalContext(z, batched=True))
    good = indicators.evaluate(lambda z: (z.unsqueeze(-2) * z.unsqueeze(-3)).sum((-1, -2, -3)),
                               indicators.EvalContext(z, batched=True))
    np.testing.assert_array_equal(good, np.full(64, 40.0 * 40 * 3))


def test_evaluate_copies_the_callers_memory_for_user_code_only(monkeypatch):
    # the copy that keeps a user's in-place indicator off the caller's data is not paid by aumann's own indicators
    # (a float64 panel of 10⁶ agents × 30 steps × 6 features would be copied whole: 1.4 GB)
    from aumann.attribution.pooled import AgentwiseIndicator

    seen = []
    real = indicators._own
    monkeypatch.setattr(indicators, "_own", lambda state, owned: seen.append(owned) or real(state, owned))
    z = np.random.default_rng(0).random((2, 7, 3))
    for f, copied in [(indicators.get("var"), False), (indicators.get("heat"), False),
                      (lambda z: z.sum((-1, -2)), True), (AgentwiseIndicator(lambda z: z.sum(-1, keepdim=True)), True)]:
        seen.clear()
        indicators.evaluate(f, indicators.EvalContext(z, batched=True))
        assert seen and all(owned is not copied for owned in seen), f


def test_evaluate_refuses_complex_output_and_string_input():
    with pytest.raises(IndicatorError, match="complex"):
        indicators.evaluate(_f_complex, np.ones((2, 3)))
    with pytest.raises(IndicatorError, match="input of indicator"):
        indicators.evaluate("heat", np.array([["a"]]))
    with pytest.raises(IndicatorError, match="context 'c'"):
        indicators.evaluate(lambda z, c: z.sum((-1, -2)), np.ones((2, 3)), {"c": "abc"})


def _f_nan_at_1(z):
    """log of a sum that is negative at batch element 1 (of a (2, N, D) batch): NaN there, finite elsewhere."""
    return torch.log(z.sum((-1, -2)) * torch.tensor([1.0, -1.0], dtype=z.dtype))


def test_evaluate_refuses_non_finite_output_as_the_engine_does():
    """evaluate(f, z) returned [1.17, nan] silently for an indicator the engine refuses ('returned NaN/inf on a batch
    of shape ...'): the same rule now (one check, check_output), the same error type and words, naming the element."""
    z = np.abs(Z[:2]) + 0.1
    with pytest.raises(IndicatorError, match=r"indicator '_f_nan_at_1' returned NaN/inf on a batch of shape "
                                             r"\(2, 8, 3\) \(at batch element\(s\) \[1\]; 1 of 2 value\(s\)\)"):
        indicators.evaluate(_f_nan_at_1, z)
    with pytest.raises(IndicatorError, match=r"indicator '_f_nan_at_1' returned NaN/inf on a batch of shape "):
        attribute(_f_nan_at_1, Panel(z), method=AumannShapley(closed_form=False))
    inf = lambda z: z.sum((-1, -2)) / 0.0  # noqa: E731
    for state in (z[0], indicators.EvalContext(z, batched=True)):
        with pytest.raises(IndicatorError, match="returned NaN/inf"):
            indicators.evaluate(inf, state)
    with pytest.raises(IndicatorError, match="returned NaN/inf"):
        indicators.evaluate_pair(inf, "lin", indicators.EvalContext(z[0]))
    np.testing.assert_allclose(indicators.evaluate(lambda z: torch.log(z.sum((-1, -2))), z), np.log(z.sum((1, 2))),
                               rtol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("where", ["evaluate", "path", "float32_panel", "loo", "sampled_shapley"])
def test_half_precision_indicator_output_is_refused_naming_the_dtype(dtype, where):
    """An indicator returning float16 gave f = 0.49634 for 0.496349 (and bfloat16 0.4961) and an efficiency gap of
    1.6e-4 in an attribution checked to 1e-12, silently: refused, naming the dtype, wherever it is evaluated."""
    def half(z):
        return (z**2).mean((-1, -2)).to(dtype)

    z = np.abs(Z[:2]) + 0.1
    with pytest.raises(IndicatorError, match=f"indicator 'half' returned {dtype} values; half precision"):
        if where == "evaluate":
            indicators.evaluate(half, z)
        else:
            method = {"path": AumannShapley(closed_form=False), "float32_panel": None, "loo": LeaveOneOut(),
                      "sampled_shapley": SampledShapley(permutations=2)}[where]
            attribute(half, Panel(z.astype(np.float32) if where == "float32_panel" else z), method=method, rng=0)


def test_float32_output_and_half_precision_input_keep_their_rules():
    """The rule the half-precision refusal follows: float32 output is accepted (as from a float32 panel) and
    upcast; float16 input is evaluated in float64 (panels and evaluate upcast it), so only f's output is refused."""
    z = np.abs(Z[:2]) + 0.1
    single = lambda z: (z**2).mean((-1, -2)).float()  # noqa: E731
    np.testing.assert_allclose(indicators.evaluate(single, z), (z**2).mean((1, 2)), rtol=1e-6)
    res = attribute(single, Panel(z), method=AumannShapley(closed_form=False))
    np.testing.assert_allclose(res.f_values, (z**2).mean((1, 2)), rtol=1e-6)
    z16 = z.astype(np.float16)
    got = indicators.evaluate(lambda z: (z**2).mean((-1, -2)), z16)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, (z16.astype(np.float64) ** 2).mean((1, 2)))


def test_indicator_arithmetic_checks_its_operands():
    with pytest.raises(IndicatorError, match="indicator weight"):
        indicators.get("heat") * "a"
    with pytest.raises(IndicatorError, match="indicator weight"):
        indicators.get("heat") * float("nan")
    with pytest.raises(IndicatorError, match="int"):
        indicators.get("heat") + 3


# ---------------------------------------------------------------------------------------------- non-finite results
BIG = np.full((2, 5, 3), 1e300)  # the product of means overflows: heat's f(z) = inf
NEG = -2.0 * np.ones((2, 5, 3))  # Π_d m_d = −8 < −1: log(1 + H) is NaN


NONFINITE = {
    "heat_closed_overflow": ("heat", BIG, None),
    "lin_closed_overflow": ("lin", np.full((2, 5, 3), 1.7e308), None),
    "var_closed_overflow": ("var", np.random.default_rng(0).normal(size=(2, 5, 3)) * 1e300, None),
    "pairwise_closed_overflow": ("pairwise", BIG, None),
    "heat_closed_H_below_minus_one": ("heat", NEG, None),
    "heat_path_H_below_minus_one": ("heat", NEG, AumannShapley(closed_form=False)),
    "heat_path_overflow": ("heat", BIG, AumannShapley(closed_form=False)),
    "heat_pooled_path_overflow": ("heat", BIG, AumannShapley(closed_form=False, pooled_fast_path=True)),
    "heat_loo_fast": ("heat", BIG, LeaveOneOut()),
    "heat_loo_generic": ("heat", BIG, LeaveOneOut(fast=False)),
    "heat_loo_negative": ("heat", NEG, LeaveOneOut()),
    "heat_sampled_shapley": ("heat", BIG, SampledShapley(permutations=4)),
    "heat_sampled_shapley_negative": ("heat", NEG, SampledShapley(permutations=4)),
    "heat_sampled_banzhaf": ("heat", BIG, SampledBanzhaf(samples=20)),
    "heat_sampled_banzhaf_marginal": ("heat", BIG, SampledBanzhaf(samples=20, estimator="marginal")),
    "heat_exact_shapley": ("heat", BIG, ExactShapley()),
    "heat_exact_banzhaf": ("heat", BIG, ExactBanzhaf()),
    "var_sampled_overflow": ("var", np.random.default_rng(0).normal(size=(1, 5, 3)) * 1e300,
                             SampledShapley(permutations=4)),
    "pairwise_loo_overflow": ("pairwise", BIG, LeaveOneOut()),
    "pairwise_exact_overflow": ("pairwise", BIG, ExactShapley()),
}


@pytest.mark.parametrize("case", sorted(NONFINITE), ids=str)
def test_every_method_refuses_non_finite_results_naming_indicator_and_step(case):
    name, values, method = NONFINITE[case]
    with pytest.raises(IndicatorError) as info:
        attribute(name, Panel(values, steps=["2026-04-07", "2026-04-08"][: values.shape[0]]), method=method, rng=0)
    msg = str(info.value)
    assert repr(name) in msg and "NaN/inf" in msg
    assert "step" in msg


def test_non_finite_weighted_indicator_and_user_game_are_refused():
    with pytest.raises(IndicatorError, match="NaN/inf"):
        attribute(indicators.get("heat") * 1e308 * 10, _panel())
    game = FunctionGame(lambda m: np.where(m.all(1), np.inf, 0.0), 3, name="blowup")
    for method in (ExactShapley(), ExactBanzhaf(), LeaveOneOut(), SampledShapley(permutations=4),
                   SampledBanzhaf(samples=16)):
        with pytest.raises(GameError, match="blowup") as info:  # a game error ...
            method.attribute_game(game, rng=0)
        assert isinstance(info.value, IndicatorError)  # ... and, like every non-finite result, an IndicatorError
    overflow = FunctionGame(lambda m: m.sum(1) * 1e307 * 9, 3, name="overflow")  # finite values, φ overflows
    with pytest.raises(IndicatorError, match="game 'overflow'"):
        ExactShapley().attribute_game(overflow)


def test_the_finiteness_check_lives_in_the_result_type():
    with pytest.raises(IndicatorError, match="φ is NaN/inf at step 0, agent 1"):
        Attribution(phi=np.array([[0.0, np.nan]]), delta_v=np.zeros(1), f_values=np.zeros(1),
                    f_baseline=np.zeros(1), agent_ids=np.arange(2), steps=np.arange(1), features=("a",),
                    provenance={"indicator": "mine"})


# ---------------------------------------------------------------------------------------------- games
GAME_BAD = {
    "n_players_fraction": (lambda: FunctionGame(lambda m: m.sum(1), 2.5), "n_players"),
    "n_players_nan": (lambda: FunctionGame(lambda m: m.sum(1), float("nan")), "n_players"),
    "n_players_str": (lambda: FunctionGame(lambda m: m.sum(1), "3"), "n_players"),
    "value_strings": (lambda: ExactShapley().attribute_game(
        FunctionGame(lambda m: np.array(["a"] * m.shape[0]), 3, name="strs")), "strs"),
    "value_complex": (lambda: ExactShapley().attribute_game(
        FunctionGame(lambda m: m.sum(1).astype(complex), 3, name="cplx")), "cplx"),
    "value_raises": (lambda: ExactShapley().attribute_game(FunctionGame(lambda m: 1 / 0, 3, name="zero")), "zero"),
    "value_nan": (lambda: SampledShapley(permutations=4).attribute_game(
        FunctionGame(lambda m: np.full(m.shape[0], np.nan), 3, name="nans"), rng=0), "nans"),
    "not_a_game": (lambda: ExactShapley().attribute_game(lambda m: m), "CoalitionGame"),
}


@pytest.mark.parametrize("case", sorted(GAME_BAD), ids=str)
def test_bad_games_are_game_errors_naming_them(case):
    fn, needle = GAME_BAD[case]
    with pytest.raises(GameError) as info:
        fn()
    assert needle in str(info.value)


def test_quadratic_indicator_inputs_are_checked():
    with pytest.raises(IndicatorError, match="QuadraticIndicator C"):
        QuadraticIndicator("abc")
    with pytest.raises(IndicatorError, match="NaN"):
        QuadraticIndicator(np.full((8, 8), np.nan))
    with pytest.raises(IndicatorError, match=r"C must be \(8, 8\)"):
        attribute(QuadraticIndicator(np.eye(3)), _panel(), method=LeaveOneOut())


# ---------------------------------------------------------------------------------------------- metrics, smoothing
METRIC_BAD = {
    "kendall_nan": (lambda: metrics.kendall_tau(np.array([1.0, np.nan, 3]), np.arange(3.0)), "estimate"),
    "kendall_inf_reference": (lambda: metrics.kendall_tau(np.arange(3.0), np.array([1.0, np.inf, 3])), "reference"),
    "cosine_nan": (lambda: metrics.cosine(np.array([np.nan, 1.0]), np.ones(2)), "NaN"),
    "spearman_inf": (lambda: metrics.spearman(np.array([1, np.inf, 2]), np.ones(3)), "NaN/inf"),
    "mae_strings": (lambda: metrics.mae(["a"], ["b"]), "estimate"),
    "rank_agents_nan": (lambda: metrics.rank_agents(np.array([1, np.nan, 2])), "scores"),
    "jaccard_k_fraction": (lambda: metrics.topk_jaccard(np.arange(5.0), np.arange(5.0), 2.5), "k"),
    "jaccard_k_nan": (lambda: metrics.topk_jaccard(np.arange(5.0), np.arange(5.0), float("nan")), "k"),
    "drop_at_k_fraction": (lambda: metrics.relative_drop_at_k(1.0, [1.0, 2.0, 3.0], 2.5), "k"),
    "step_fraction": (lambda: metrics.mae(np.ones((2, 3)), np.ones((2, 3)), step=0.5), "step"),
    "oracle_nan": (lambda: metrics.deletion_curve(np.ones(3), lambda ids: float("nan")), "oracle"),
    "oracle_raises": (lambda: metrics.deletion_curve(np.ones(3), lambda ids: 1 / 0), "oracle"),
    # astype(int) made ks=[2.7] the curve at k = 2 and ks=[nan] a point at k = -2⁶³; ks=["3"] and step=1.5 were
    # numpy's own errors (repro3/03)
    "curve_ks_fraction": (lambda: metrics.deletion_curve(np.arange(4.0), lambda ids: 4.0 - len(ids), ks=[2.7]), "ks"),
    "curve_ks_nan": (lambda: metrics.deletion_curve(np.arange(4.0), lambda ids: 4.0 - len(ids), ks=[np.nan]), "ks"),
    "curve_ks_strings": (lambda: metrics.deletion_curve(np.arange(4.0), lambda ids: 4.0 - len(ids), ks=["3"]), "ks"),
    "curve_ks_scalar": (lambda: metrics.deletion_curve(np.arange(4.0), lambda ids: 4.0 - len(ids), ks=3), "ks"),
    "curve_step_fraction": (lambda: metrics.deletion_curve(np.ones((2, 3)), lambda ids: 3.0 - len(ids), step=1.5),
                            "step"),
    "drop_at_k_curve_fraction": (lambda: metrics.drop_at_k(np.arange(4.0), lambda ids: 4.0 - len(ids), 2.7), "ks"),
}


def test_deletion_curve_takes_integral_ks_given_as_floats_or_numpy_ints():
    curve = metrics.deletion_curve(np.arange(4.0), lambda ids: 4.0 - len(ids), ks=[2.0, np.int64(1)])
    assert curve.ks.tolist() == [0, 1, 2, 4]


@pytest.mark.parametrize("step", [1.5, "0"], ids=["fraction", "string"])
def test_masking_oracle_step_must_be_an_integer(step):
    from aumann.attribution.games import GameError

    with pytest.raises(GameError, match="step index"):
        metrics.masking_oracle("heat", _panel(), step=step)


@pytest.mark.parametrize("case", sorted(METRIC_BAD), ids=str)
def test_metrics_refuse_non_finite_and_non_integer_input(case):
    fn, needle = METRIC_BAD[case]
    with pytest.raises(MetricError) as info:
        fn()
    assert needle in str(info.value)


@pytest.mark.parametrize("fn, needle", [
    (lambda: smoothing.smooth_max(torch.ones(3), temperature=float("nan")), "temperature"),
    (lambda: smoothing.top_k_share(2.5), "k"),
    (lambda: smoothing.top_k_share(True), "k"),
    (lambda: smoothing.fraction_above(float("nan")), "threshold"),
    (lambda: smoothing.max_surrogate(feature=1.5), "feature"),
    (lambda: smoothing.gini_surrogate(eps=-1), "eps"),
], ids=["temperature_nan", "k_fraction", "k_bool", "threshold_nan", "feature_fraction", "eps_negative"])
def test_smoothing_parameters_are_checked(fn, needle):
    with pytest.raises(IndicatorError) as info:
        fn()
    assert needle in str(info.value)


def test_from_dataframe_refuses_complex_feature_columns():
    import pandas as pd

    df = pd.DataFrame({"Step": [0, 0, 1, 1], "AgentID": [1, 2, 1, 2], "w": [1j, 2j, 3j, 4j], "x": [1.0, 2, 3, 4]})
    assert Panel.from_dataframe(df).features == ("x",)  # a complex column is not a feature by default
    with pytest.raises(PanelError, match="'w'"):
        Panel.from_dataframe(df, features=["w"])


# ------------------------------------------------------------------------------------- group labels (attack round 3)
@pytest.mark.parametrize("labels, needle", [
    ([np.nan, np.nan, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0], "NaN"),
    ([np.inf, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0], "NaN or ±inf"),
    (np.array(["NaT"] + ["2020-01-01"] * 7, dtype="datetime64[D]"), "NaT"),
    ([1j, 1, 1, 2, 2, 3, 3, 3], "complex"),
], ids=["nan", "inf", "nat", "complex"])
def test_group_labels_that_are_no_label_are_refused(labels, needle):
    # NaN is not equal to itself: its agents silently dropped out of group_shares (R_G summed to < 1)
    with pytest.raises(PanelError) as info:
        Panel(Z, groups={"tier": labels})
    assert "tier" in str(info.value) and needle in str(info.value)


@pytest.mark.parametrize("labels, needle", [
    ([np.nan, np.nan, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0], "NaN"),
    ([np.inf, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0], "NaN or ±inf"),
    ([1j, 1, 1, 2, 2, 3, 3, 3], "complex"),
], ids=["nan", "inf", "complex"])
@pytest.mark.parametrize("call", ["group_shares", "per_step", "group_totals"])
def test_group_labels_given_to_an_attribution_are_checked_as_a_panel_checks_them(labels, needle, call):
    # labels passed as an array (not a panel group's name) were not checked: the NaN agents' share came back 0
    # ({1.0: 0.29, 2.0: 0.21, 3.0: 0.24, nan: 0.0}) and the shares summed to < 1
    res = attribute("lin", Panel(Z))
    fn = {"group_shares": res.group_shares, "per_step": lambda g: res.group_shares(g, per_step=True),
          "group_totals": res.group_totals}[call]
    with pytest.raises(PanelError, match="group labels") as info:
        fn(np.array(labels))
    assert needle in str(info.value)


def test_group_labels_of_mixed_types_given_to_an_attribution_are_text_as_in_a_panel():
    # labels of mixed types were a TypeError from sorting ('<' not supported between 'str' and 'date'); None among
    # them is no label at all and is refused (the next test)
    import datetime

    day = datetime.date(2026, 4, 7)
    labels = np.array([day, day, "a", "a", "b", "b", "b", "b"], dtype=object)
    res = attribute("lin", Panel(Z))
    shares = res.group_shares(labels)
    assert shares == res.group_shares(labels.astype(str))
    assert sorted(shares) == ["2026-04-07", "a", "b"] and sum(shares.values()) == pytest.approx(1.0)
    panel_route = attribute("lin", Panel(Z, groups={"tier": labels})).group_shares("tier")
    assert panel_route == shares


@pytest.mark.parametrize("labels", [
    [1, 1, 2, 2, 3, 3, 3, None],  # became the groups '1', '2', '3' and 'None': a missing group, and text
    ["a", "a", "b", "b", "b", "b", "b", None],
    ["a", "a", "b", "b", "b", "b", "b", float("nan")],  # numpy makes the text 'nan' of it
    np.array(["a", "a", "b", "b", "b", "b", "b", None], dtype=object),
    [1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, float("nan")],
])
def test_a_missing_group_label_is_refused_naming_the_agent(labels):
    """``[1, 2, None]`` became ``'1', '2', 'None'``: an agent without a group was put in a group named 'None' and the
    integer labels turned into text. A None agent id or step is refused; a missing group label now is too, naming
    the agent, in a panel and in an attribution's group shares."""
    import pandas as pd

    ids = [f"u{i}" for i in range(8)]
    missing = (r"group 'tier' labels must be .*1 agent\(s\) have no label \(None, NaN, NA or NaT\): "
               r"agent 'u7' \(position 7\)")
    with pytest.raises(PanelError, match=missing):
        Panel(Z, agent_ids=ids, groups={"tier": labels})
    with pytest.raises(PanelError, match=missing):
        Panel(Z, agent_ids=ids).with_groups(tier=pd.Series(labels))
    res = attribute("lin", Panel(Z, agent_ids=ids))
    for call in (res.group_shares, res.group_totals):
        with pytest.raises(PanelError, match=r"group labels must be .*agent 'u7' \(position 7\)"):
            call(labels)


def test_integer_group_labels_stay_integers():
    res = attribute("lin", Panel(Z, groups={"tier": [1, 1, 2, 2, 3, 3, 3, 3]}))
    assert sorted(res.group_shares("tier")) == [1, 2, 3]


def test_group_shares_of_a_panel_group_sum_to_one():
    p = Panel(Z, groups={"tier": [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]})
    shares = attribute("lin", p).group_shares("tier")
    assert sum(shares.values()) == pytest.approx(1.0)


def test_a_second_parameter_with_a_value_default_is_the_indicators_own_setting_not_the_context():
    # f(z, power=2.0) was taken for f(z, context): power received None (or the panel's context dict) and the
    # indicator failed with "unsupported operand type(s) for ** or pow(): 'Tensor' and 'NoneType'"
    def powered(z, power=2.0):
        return (z[..., 0] ** power).mean(-1)

    z = np.abs(Z[:, :, :1]) + 0.1
    want = (z[..., 0] ** 2.0).mean(-1)
    np.testing.assert_allclose(indicators.evaluate(powered, z), want, rtol=1e-12)
    for panel in (Panel(z), Panel(z, context={"price": np.arange(3.0)})):
        res = attribute(powered, panel)
        np.testing.assert_allclose(res.f_values, want, rtol=1e-12)
    assert not indicators.as_indicator(powered).uses_context
    # the context idioms keep their context
    for fn in (lambda z, ctx: z.sum((-1, -2)), lambda z, ctx=None: z.sum((-1, -2)), lambda z, *a: z.sum((-1, -2)),
               lambda z, context=1.0: z.sum((-1, -2))):
        assert indicators.as_indicator(fn).uses_context


class _DeclaredClosedForm(indicators.Indicator):
    """A user indicator declaring a closed form (f = Σ z / 1), whose closed_form returns what ``out`` makes."""

    name = "declared"
    has_closed_form = True

    def __init__(self, out):
        self.out = out

    def forward(self, z, context=None):
        return z.sum((-1, -2))

    def closed_form(self, values, *, per_feature=False):
        return self.out(values, per_feature)


CLOSED_FORM_BAD = {
    "two_items": (lambda v, pf: (v.sum(-1), v.sum((1, 2))), r"must return \(phi, f_values, f_baseline\); got tuple"),
    "none": (lambda v, pf: None, "got NoneType"),
    "phi_shape": (lambda v, pf: (v.sum(-1)[:, :2], v.sum((1, 2)), np.zeros(3)), r"phi of shape \(3, 2\)"),
    "f_values_scalar": (lambda v, pf: (v.sum(-1), 6.0, np.zeros(3)), r"f_values of shape \(\)"),
    "f_baseline_shape": (lambda v, pf: (v.sum(-1), v.sum((1, 2)), np.zeros(8)), r"f_baseline of shape \(8,\)"),
    "per_feature_ignored": (lambda v, pf: (v.sum(-1), v.sum((1, 2)), np.zeros(3)), r"with per_feature=True"),
    "strings": (lambda v, pf: (np.full(v.shape[:2], "x"), v.sum((1, 2)), np.zeros(3)), "phi"),
    "raises": (lambda v, pf: 1 / 0, "raised ZeroDivisionError"),
    "half": (lambda v, pf: (v.sum(-1).astype(np.float16), v.sum((1, 2)), np.zeros(3)), "phi as float16"),
}


@pytest.mark.parametrize("case", sorted(CLOSED_FORM_BAD), ids=str)
def test_a_declared_closed_form_that_misbehaves_is_an_indicator_error_naming_it(case):
    # a user closed form returning two items, None, another panel's shapes or raising failed deep inside numpy
    # (ValueError: not enough values to unpack, AxisError, broadcast errors) or with its own bare exception
    out, needle = CLOSED_FORM_BAD[case]
    with pytest.raises(IndicatorError, match="the closed form of indicator 'declared'") as info:
        attribute(_DeclaredClosedForm(out), _panel(), per_feature=case == "per_feature_ignored")
    assert re.search(needle, str(info.value)), str(info.value)
    good = attribute(_DeclaredClosedForm(lambda v, pf: (v if pf else v.sum(-1), v.sum((1, 2)), np.zeros(3))),
                     _panel(), per_feature=True)
    np.testing.assert_allclose(good.phi, Z.sum(-1))


def _psi_in_place(z):
    z.mul_(2.0)
    return z**2


@pytest.mark.parametrize("method", [LeaveOneOut(), SampledShapley(permutations=4), SampledShapleyCV(permutations=4),
                                    ExactShapley()], ids=["loo", "sampled_shapley", "sampled_shapley_cv", "exact"])
@pytest.mark.parametrize("baseline", ["zero", "array"])
def test_a_pooled_psi_that_writes_to_its_input_is_refused_and_leaves_panel_and_baseline_as_they_were(method, baseline):
    # the running-sum fast path handed psi the panel's own rows (and the caller's (N, D) baseline array): psi's
    # z.mul_(2) doubled the user's panel, and the run failed with torch's "unsupported operation: more than one
    # element of the written-to tensor refers to a single memory location" named as the indicator's
    f = indicators.FunctionIndicator(lambda z: torch.log1p((z**2).mean(-2).sum(-1)), name="pooled_in_place",
                                     pooled=PooledForm(_psi_in_place, lambda m: torch.log1p(m.sum(-1))))
    panel = Panel(np.abs(Z[:, :, :2]) + 0.1)
    before = panel.values.copy()
    base = np.full((8, 2), 0.05)
    with pytest.raises(IndicatorError, match=r"'pooled_in_place': its fast path's per-agent function .* in place"):
        attribute(f, panel, method=method, baseline=base if baseline == "array" else "zero", rng=0)
    np.testing.assert_array_equal(panel.values, before)
    np.testing.assert_array_equal(base, 0.05)


@pytest.mark.parametrize("alive", [None, "some_dead"])
def test_a_closed_form_that_scales_the_panel_in_place_is_refused_and_leaves_it_as_it_was(alive):
    # closed_form(values) received the panel's own array: values /= 0.5 doubled the user's panel, and the result
    # explained the doubled panel with φ and Δv in agreement (efficiency gap 0: nothing to notice); with dead rows
    # it got each living set's copy, and the result explained the doubled copy just as silently
    class InPlace(indicators.Indicator):
        name = "scales_in_place"
        has_closed_form = True

        def forward(self, z, context=None, alive=None):
            return z.sum((-1, -2))

        def closed_form(self, values, *, per_feature=False):
            values /= 0.5
            return values.sum(-1), values.sum((1, 2)), np.zeros(len(values))

    mask = None if alive is None else np.ones(Z.shape[:2], dtype=bool)
    if mask is not None:
        mask[0, 0] = False
    panel = Panel(Z.copy(), alive=mask)
    with pytest.raises(IndicatorError, match="'scales_in_place' wrote into the panel values it was given"):
        attribute(InPlace(), panel)
    np.testing.assert_array_equal(panel.values, Z)
