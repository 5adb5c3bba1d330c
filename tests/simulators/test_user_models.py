"""Attribution attached to Mesa models written as users write them (tests/simulators/user_models.py): record, attribute
by the library and by ``aumann attribute``, efficiency (Σφ = Δf per step), the alive mask, forks, and what a model
at fault gets (a typed error naming the problem, early)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from aumann.attribution import Attribution, attribute, indicators
from aumann.cli import main
from aumann.errors import FeatureValueError, ModelStepError, RecorderWarning, UnknownAgentError
from aumann.panel import Panel
from aumann.simulators import FeatureRecorder, for_agents, fork, simulate
from tests.simulators.user_models import Field, Fish, Fragile, Meadow, Pond, mesa_collects_missing_attributes


def _efficient_and_dead_cells_unattributed(panel: Panel, res: Attribution) -> None:
    np.testing.assert_allclose(res.phi.sum(axis=1), res.delta_v, atol=1e-9)
    assert panel.alive is not None and not panel.alive.all()
    assert np.all(res.phi[~panel.alive] == 0.0) and np.all(panel.values[~panel.alive] == 0.0)


def test_pond_text_ids_births_within_a_step_and_two_classes_attribute_by_library_and_cli(tmp_path):
    model = Pond(rng=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecorderWarning)  # both classes have energy: nobody is skipped
        panel = simulate(model, steps=12, recorder=FeatureRecorder({"energy": "energy"}))
    ids = [str(i) for i in panel.agent_ids]
    assert ids == sorted(ids) and {i.split("-")[0] for i in ids} == {"fish", "plankton"}
    # fry eaten in the step they were born were never present at a capture: no row, nothing dead that looks measured
    assert model.eaten_at_birth > 0 and len(ids) == 10 + model.born - model.eaten_at_birth
    res = attribute(indicators.get("lin"), panel)
    _efficient_and_dead_cells_unattributed(panel, res)

    panel.save(tmp_path / "pond.npz")
    assert main(["attribute", str(tmp_path / "pond.npz"), "--indicator", "lin", "--out", str(tmp_path / "out"),
                 "--no-report"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["satisfies_efficiency"] and summary["max_efficiency_gap"] < 1e-9
    cli = Attribution.load(tmp_path / "out" / "attribution.npz")
    np.testing.assert_allclose(cli.phi, res.phi, atol=1e-12)
    assert [str(i) for i in cli.agent_ids] == ids


def test_a_fish_only_feature_skips_plankton_and_says_so():
    with pytest.warns(RecorderWarning, match="Plankton have no 'size'"):
        panel = simulate(Pond(rng=3), steps=6, recorder=FeatureRecorder({"energy": "energy", "size": "size"}))
    assert all(str(i).startswith("fish-") for i in panel.agent_ids)
    assert panel.meta["skipped_agent_types"] == {"Plankton": "size"}


def test_text_and_integer_ids_in_one_model_are_refused_at_the_first_capture_naming_both():
    # Fish rename their ids to text, plankton keep Mesa's ints: panel rows are ordered by unique_id, and the recorder
    # refused only once all 12 steps had run, with an example of three text ids ("mixed types? e.g. ['fish-1',
    # 'fish-2', 'fish-3']") that named neither the int id nor the class holding it
    model = Pond(rng=3, string_ids=False)
    with pytest.raises(FeatureValueError) as info:
        simulate(model, steps=12, recorder=FeatureRecorder({"energy": "energy"}))
    assert model.steps == 1
    msg = str(info.value)
    assert "a Plankton has unique_id 7 (int) at capture 0" in msg and "a Fish has 'fish-1' (str" in msg
    assert 'self.unique_id = f"plankton-{self.unique_id}" in Plankton.__init__' in msg


def test_a_step_that_raises_late_is_a_typed_error_naming_the_step_and_keeps_what_was_recorded():
    # Fragile raises at Mesa step 7: simulate let the bare RuntimeError through, and the six recorded steps were lost
    with pytest.raises(ModelStepError) as info:
        simulate(Fragile(crash_at=7), steps=10, recorder=FeatureRecorder({"x": "x"}))
    err = info.value
    assert str(err).startswith("Fragile's step raised RuntimeError at step 7 of 10 (model.steps = 7): boom at step 7")
    assert isinstance(err, RuntimeError) and isinstance(err.__cause__, RuntimeError)
    assert err.panel.equals(simulate(Fragile(crash_at=7), steps=6, recorder=FeatureRecorder({"x": "x"})))


@pytest.mark.parametrize("repeat", [False, True])
def test_a_fork_whose_continuation_raises_is_the_same_typed_error(repeat):
    model = Fragile(crash_at=12)
    rec = FeatureRecorder({"x": "x"})
    simulate(model, steps=9, recorder=rec)
    with pytest.raises(ModelStepError, match=r"at step 3 of 5 \(model.steps = 12\)") as info:
        fork(model, steps=5, recorder=rec, intervention=lambda m: None, repeat=repeat)
    assert info.value.panel.shape[0] == 2
    with pytest.raises(ModelStepError, match="at step 1 of 1") as info:
        simulate(Fragile(crash_at=1), steps=1, recorder=rec)
    assert info.value.panel is None and "nothing was recorded before it" in str(info.value)


def test_meadow_cell_space_property_layer_and_datacollector_agree_and_fork_bit_for_bit():
    model = Meadow(rng=1)
    with pytest.warns(RecorderWarning, match="Tuft have no 'food'"):
        panel = simulate(model, steps=10, recorder=FeatureRecorder.from_datacollector(model.datacollector))
    res = attribute(indicators.get("lin"), panel.select_features(["food"]))
    _efficient_and_dead_cells_unattributed(panel, res)
    # the DataCollector's own frame: tufts report no food (NaN), so they are dropped there as the recorder skips them
    # (Mesa 3.3; Mesa 3.5's collect() raises for them, so the model collects nothing there)
    if mesa_collects_missing_attributes():
        frame = model.datacollector.get_agent_vars_dataframe()
        from_frame = Panel.from_dataframe(frame[["food", "hungry", "x"]].dropna(subset=["food"]))
        np.testing.assert_array_equal(from_frame.values, panel.values)
        np.testing.assert_array_equal(from_frame.alive, panel.alive)

    rec = FeatureRecorder({"food": "food"})
    for strategy in ("copy", "replay"):
        start = Meadow(rng=1)
        simulate(start, steps=4, recorder=rec)
        branch = fork(start, steps=5, recorder=rec, strategy=strategy, factory=lambda: Meadow(rng=1))
        truth = Meadow(rng=1)
        simulate(truth, steps=4, recorder=rec)
        assert branch.panel.equals(simulate(truth, steps=5, recorder=rec)), strategy


def test_pond_forks_bit_for_bit_and_interventions_take_text_ids():
    rec = FeatureRecorder({"energy": "energy"})
    for strategy in ("copy", "replay"):
        start = Pond(rng=5)
        simulate(start, steps=4, recorder=rec)
        branch = fork(start, steps=6, recorder=rec, strategy=strategy, factory=lambda: Pond(rng=5))
        truth = Pond(rng=5)
        simulate(truth, steps=4, recorder=rec)
        assert branch.panel.equals(simulate(truth, steps=6, recorder=rec)), strategy
    feed = for_agents(["plankton-7"], lambda a: setattr(a, "energy", 50.0))
    fed = fork(start, steps=1, recorder=rec, intervention=feed)
    row = [str(i) for i in fed.panel.agent_ids].index("plankton-7")
    assert fed.panel.values[0, row, 0] > 50.0


def test_tuple_ids_are_labelled_as_text_and_an_intervention_takes_the_label_it_reads_off_the_panel(tmp_path):
    model = Field(rng=2)
    rec = FeatureRecorder({"level": "level"})
    panel = simulate(model, steps=4, recorder=rec)
    assert [str(i) for i in panel.agent_ids][:2] == ["(0, 0)", "(0, 1)"]
    _efficient_and_dead_cells_unattributed(panel, attribute(indicators.get("var"), panel))
    top = str(panel.agent_ids[1])  # "(0, 1)": what top_agents.csv and panel.agent_ids show for the patch (0, 1)
    # for_agents took only the tuple itself: the label was an UnknownAgentError though it names one agent
    by_label = fork(model, steps=1, recorder=rec, intervention=for_agents([top], lambda a: setattr(a, "level", 9.0)))
    by_tuple = fork(model, steps=1, recorder=rec, intervention=for_agents([(0, 1)], lambda a: setattr(a, "level", 9.0)))
    assert by_label.panel.equals(by_tuple.panel) and by_label.panel.values[0, 1, 0] > 4.5


def test_an_unknown_id_in_a_model_with_text_and_integer_ids_is_named_not_a_bare_type_error():
    # listing the model's ids for the message sorted them: text fish beside Mesa's integer plankton raised
    # "TypeError: '<' not supported between instances of 'int' and 'str'" instead of the UnknownAgentError
    model = Pond(rng=3, string_ids=False)
    rec = FeatureRecorder({"energy": "energy"}, agents=lambda m: m.agents_by_type[Fish])
    simulate(model, steps=2, recorder=rec)
    with pytest.raises(UnknownAgentError, match=r"e.g. \['fish-99'\]; the model has 12 agents with ids \[7, 8"):
        fork(model, steps=1, recorder=rec, intervention=for_agents(["fish-99"], lambda a: None))
