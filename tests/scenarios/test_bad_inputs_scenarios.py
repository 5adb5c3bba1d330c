"""Bad scenario configs, names and arguments (issue 10): typed errors naming the key, through the Python API."""

from __future__ import annotations

import dataclasses

import pytest

from aumann import scenarios
from aumann.data.bluesky.capture import DailyWriter
from aumann.data.bluesky.synth import SynthConfig, generate
from aumann.errors import ConfigError, SynthError, UnsafeNameError
from aumann.studies.faithfulness import run_study

SC = scenarios.get("social-llm")

OVERRIDES = {
    "agents_bool": ({"agents": True}, "agents"),
    "agents_fraction": ({"agents": 2.5}, "agents"),
    "agents_one": ({"agents": 1}, "agents"),
    "seed_negative": ({"seed": -1}, "seed"),
    "seed_string": ({"seed": "abc"}, "seed"),
    "alpha_inf": ({"alpha": float("inf")}, "alpha"),
    "alpha_nan": ({"alpha": float("nan")}, "alpha"),
    "study_not_a_table": ({"study": 5}, "study"),
    "permutations_nan": ({"study": {"permutations": float("nan")}}, "study.permutations"),
    "permutations_one": ({"study": {"permutations": 1}}, "study.permutations"),
    "unknown_key": ({"zzz": 1}, "zzz"),
    "network_unknown": ({"network": "grid"}, "network"),
    # sizes no run can reach: refused at once, not after hours of building a network of 10¹² agents
    "agents_beyond_reach": ({"agents": 10**12}, "agents"),
    "steps_beyond_reach": ({"steps": 10**7}, "steps"),
    "runs_beyond_reach": ({"runs": 10**9}, "runs"),
    "permutations_beyond_reach": ({"study": {"permutations": 10**9}}, "study.permutations"),
    "quadrature_beyond_the_rule": ({"study": {"quadrature_steps": 5000}}, "study.quadrature_steps"),
    # crossed or out-of-range (low, high) pairs: refused here, not at the first step as numpy's "high - low < 0"
    # blamed on the scenario's code
    "init_range_crossed": ({"init_low": 0.4, "init_high": -0.4}, "init_low"),
    "init_belief_outside_the_belief_range": ({"init_high": 5.0}, "init_high"),
    "init_range_beyond_floats": ({"init_low": -1e308, "init_high": 1e308}, "init_low"),
    "view_ratios_crossed": ({"min_view_ratio": 1.0, "max_view_ratio": 0.3}, "min_view_ratio"),
}


@pytest.mark.parametrize("case", sorted(OVERRIDES), ids=str)
def test_load_config_overrides_are_typed_errors_naming_the_key(case):
    kw, key = OVERRIDES[case]
    with pytest.raises(ConfigError) as info:
        SC.load_config(**kw)
    msg = str(info.value)
    assert key in msg and "social-llm" in msg and "\n" not in msg


@pytest.mark.parametrize("rate", [-1, -1.5])
def test_econagent_interest_rate_at_or_below_minus_one_is_refused_at_load(rate):
    # before: the run stopped at its first step as "ScenarioCodeError: step() raised ZeroDivisionError"
    with pytest.raises(ConfigError, match="initial_rate") as info:
        scenarios.get("econagent").load_config(initial_rate=rate)
    assert "econagent" in str(info.value) and "\n" not in str(info.value)
    assert scenarios.get("econagent").load_config(initial_rate=-0.5).initial_rate == -0.5


@pytest.mark.parametrize("name", ["../../evil", "/abs", "", "a/b"])
def test_scenario_names_are_path_components(name):
    with pytest.raises(UnsafeNameError):
        dataclasses.replace(SC, name=name)


def test_packaged_config_file_of_a_scenario_cannot_leave_the_package():
    evil = dataclasses.replace(SC, name="evil-config", config_file="../../../etc/passwd")
    with pytest.raises(ConfigError, match="no packaged config"):
        evil.load_config()


@pytest.mark.parametrize("kw, needle", [({"rng": "abc"}, "rng"), ({"rng": -1}, "rng"),
                                        ({"keep_from": "x"}, "keep_from"), ({"keep_from": 2.5}, "keep_from")])
def test_simulate_arguments_are_checked(kw, needle):
    cfg = SC.load_config(agents=4, steps=3)
    with pytest.raises(ConfigError, match=needle):
        SC.simulate(cfg, **{"rng": 0, **kw})


def test_simulate_and_run_study_need_the_scenario_config(tmp_path):
    with pytest.raises(ConfigError, match="SocialLLMConfig"):
        SC.simulate({"agents": 4}, rng=0)
    with pytest.raises(ConfigError, match="SocialLLMConfig"):
        run_study(SC, scenarios.get("econagent").load_config(agents=4, steps=3))


# ---------------------------------------------------------------------------------------------- synth, capture
@pytest.mark.parametrize("kw, key", [({"sigma_f": -1.0}, "sigma_f"), ({"tail_alpha": 0.0}, "tail_alpha"),
                                     ({"tail_fraction": 2.0}, "tail_fraction"), ({"post_shape": 0.0}, "post_shape"),
                                     ({"reply_shape": -1.0}, "reply_shape"), ({"follow_rate": -1.0}, "follow_rate"),
                                     ({"participation": {"mythos": -1.0}}, "participation"),
                                     ({"participation": {"mythos": float("inf")}}, "participation"),
                                     ({"max_followers": 0}, "max_followers"), ({"users": 5}, "users"),
                                     ({"seed": -1}, "seed"), ({"days": 0}, "days"),
                                     ({"activity_follower_corr": 2.0}, "activity_follower_corr")])
def test_synth_settings_are_synth_errors_naming_the_key(kw, key):
    with pytest.raises(SynthError, match=key):
        SynthConfig(**kw)


def test_synth_unknown_topics_and_wrong_config_type_are_refused():
    with pytest.raises(SynthError, match=r"\.\./x"):
        generate(SynthConfig(users=200, days=2, participation={"../x": 0.1}))
    with pytest.raises(SynthError, match="SynthConfig"):
        generate({"users": 200})


def test_capture_files_ignore_times_without_a_calendar_day(tmp_path):
    with DailyWriter(tmp_path) as w:
        assert w.write('{"time_us": 100000000000000000000}') is None  # year > 9999: no day file, no crash
        assert w.write(b"\xff\xfe") is None and w.write('{"time_us": -5}') is None and w.write("[1]") is None
        assert w.write('{"time_us": 1775779300000000}') == 1775779300000000
    assert w.stats.unparsed == 4 and sorted(p.name for p in tmp_path.iterdir()) == ["2026-04-10.jsonl",
                                                                                   "unparsed.jsonl"]
    assert w.stats.messages == 5


@pytest.mark.parametrize("overrides, key", [
    ({"agents": 10**12}, "agents"),
    ({"cascade_quadrature_steps": 10**9}, "cascade_quadrature_steps"),
    ({"cascade_permutations": 10**12}, "cascade_permutations"),
    ({"fidelity_agents": 10**12}, "fidelity_agents"),
    ({"large": {"threshold": True}}, "large.threshold"),
    ({"large": {"path_orders": 2.5}}, "large.path_orders"),
    ({"large": {"random_orderings": float("inf")}}, "large.random_orderings"),
], ids=["agents", "cascade_quadrature", "cascade_permutations", "fidelity_agents", "large_bool",
        "large_fraction", "large_inf"])
def test_megascale_settings_are_typed_errors_naming_the_key(overrides, key):
    # MegaScale-Social (merged from main): its own sizes are bounded and its [large] table follows the
    # ConfigModel rules (no booleans for numbers, no NaN/inf) like every other config table
    with pytest.raises(ConfigError) as info:
        scenarios.get("megascale-social").load_config(**overrides)
    assert key in str(info.value) and "\n" not in str(info.value)


def _no_indicator(cfg):
    raise KeyError("no indicator")


@pytest.mark.parametrize(("change", "error", "says"), [
    ({"indicator": _no_indicator}, "ScenarioCodeError",
     r"scenario 'midscale-social': indicator\(config\) raised KeyError: 'no indicator'"),
    ({"original": _no_indicator}, "ScenarioCodeError",
     r"scenario 'midscale-social': original\(config\) raised KeyError"),
    ({"baseline_features_fn": lambda model, cfg: "zero"}, "SimulationError",
     r"scenario 'midscale-social': baseline_features_fn\(\) must be an array of numbers; got str 'zero'"),
])
def test_a_scenarios_indicator_factory_or_baseline_features_gone_wrong_is_a_typed_error_naming_it(change, error,
                                                                                                    says):
    """The indicator factories were called bare: a KeyError in the user's indicator(config) came out of `aumann run`
    as a full traceback noted as our bug (the attribute stage is core); baseline features given as a string ended in
    numpy's 'could not convert string to float' the same way."""
    from aumann import errors

    sc = dataclasses.replace(scenarios.get("midscale-social"), **change)
    cfg = sc.load_config(agents=12, steps=4, runs=1, study={"permutations": 8, "random_orderings": 2,
                                                             "path_orders": 2, "ablations": False})
    with pytest.raises(getattr(errors, error), match=says):
        run_study(sc, cfg)


def test_a_make_recorder_that_raises_is_a_scenario_code_error_naming_it():
    """make_recorder(config) and context(config) were called bare by simulate and by every fork."""
    from aumann.errors import ScenarioCodeError

    def no_recorder(cfg):
        raise KeyError("no recorder")

    sc = dataclasses.replace(scenarios.get("midscale-social"), make_recorder=no_recorder)
    with pytest.raises(ScenarioCodeError, match=r"scenario 'midscale-social': make_recorder\(config\) raised KeyError"):
        sc.simulate(sc.load_config(agents=12, steps=4), rng=0)


@pytest.mark.parametrize(("raise_", "says"), [
    (lambda: (_ for _ in ()).throw(RuntimeError("validator boom")), "raised RuntimeError: validator boom"),
    (lambda: __import__("sys").exit(3), r"called sys.exit\(3\)"),
])
def test_a_config_validator_that_raises_anything_is_a_config_error_naming_the_scenario(raise_, says):
    """pydantic turns a validator's ValueError into a ValidationError, but lets a RuntimeError (or sys.exit) through:
    it came out of `aumann run --agents 12` as a bare traceback (or a silent exit 3)."""
    from pydantic import field_validator

    from aumann.scenarios.midscale_social.scenario import MidScaleConfig

    class Picky(MidScaleConfig):
        @field_validator("agents")
        @classmethod
        def _agents(cls, v):
            raise_()
            return v

    sc = dataclasses.replace(scenarios.get("midscale-social"), config_model=Picky)
    with pytest.raises(ConfigError, match=rf"invalid config for scenario 'midscale-social': a validator of Picky "
                                          rf"{says}"):
        sc.load_config(agents=12)


@pytest.mark.parametrize(("aggregators", "says"), [
    (lambda cfg: (_ for _ in ()).throw(KeyError("gini")), r"aggregators\(config\) raised KeyError: 'gini'"),
    (lambda cfg: [1, 2], r"aggregators\(config\) returned a list; it must return a mapping name → indicator"),
    (lambda cfg: {"mean": 3}, r"aggregators\(config\)\['mean'\]: an indicator must be"),
])
def test_a_scenarios_aggregators_gone_wrong_is_a_scenario_code_error_naming_it(aggregators, says):
    """aggregators(config) was called bare by the f-sensitivity ablation: the run recorded "ablation f-sensitivity
    skipped: KeyError: 'gini'" (or "AttributeError: 'list' object has no attribute 'items'") without naming the
    scenario's hook, and the Python API raised them raw."""
    from aumann.errors import ScenarioCodeError
    from aumann.evaluation.ablations import f_sensitivity

    sc = dataclasses.replace(scenarios.get("midscale-social"), aggregators=aggregators)
    cfg = sc.load_config(agents=12, steps=4)
    with pytest.raises(ScenarioCodeError, match=rf"scenario 'midscale-social': {says}"):
        f_sensitivity(sc, cfg, None, None, 3)
    assert f_sensitivity(dataclasses.replace(sc, aggregators=None), cfg, None, None, 3) == {}
