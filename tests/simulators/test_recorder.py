"""The observer hook: shapes, ordering, alive mask, context, the array path and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.errors import SimulationError, UnknownFeatureError
from aumann.simulators import (
    ArrayRecorder,
    FeatureRecorder,
    FeatureValueError,
    StepsMismatchError,
    UnknownAttributeError,
    simulate,
)
from tests.simulators.models import BoltzmannWealth, SIRNetwork, VectorModel


def _manual_trace(model, steps):
    """Independent reference: step by hand and read every agent's wealth into a dict per step."""
    out = []
    for _ in range(steps):
        model.step()
        out.append({a.unique_id: float(a.wealth) for a in model.agents})
    return out


def test_panel_matches_a_hand_recorded_trace():
    panel = simulate(BoltzmannWealth(8, seed=3), steps=6,
                     recorder=FeatureRecorder({"wealth": "wealth", "twice": lambda a: 2 * a.wealth}))
    trace = _manual_trace(BoltzmannWealth(8, seed=3), 6)
    assert panel.values.shape == (6, 8, 2) and panel.values.dtype == np.float64
    assert panel.features == ("wealth", "twice")
    assert list(panel.agent_ids) == sorted(trace[0])
    for t, snap in enumerate(trace):
        np.testing.assert_array_equal(panel.values[t, :, 0], [snap[i] for i in panel.agent_ids])
    np.testing.assert_array_equal(panel.values[..., 1], 2 * panel.values[..., 0])
    assert panel.alive is None  # nobody entered or left
    assert list(panel.steps) == [1, 2, 3, 4, 5, 6]  # Mesa's model.steps after each step
    assert panel.values[..., 0].sum(axis=1).tolist() == [8.0] * 6  # wealth is conserved


def test_agents_entering_and_leaving_keep_fixed_rows_with_alive_mask():
    model = BoltzmannWealth(6, seed=1, churn=True)
    trace = _manual_trace(BoltzmannWealth(6, seed=1, churn=True), 7)
    panel = simulate(model, steps=7, recorder=FeatureRecorder({"wealth": "wealth"}))
    all_ids = sorted({i for snap in trace for i in snap})
    assert list(panel.agent_ids) == all_ids and panel.N == 8  # 6 initial + 2 newcomers
    assert panel.alive is not None
    for t, snap in enumerate(trace):
        for j, uid in enumerate(panel.agent_ids):
            assert panel.alive[t, j] == (uid in snap)
            assert panel.values[t, j, 0] == snap.get(uid, 0.0)  # dead rows hold 0.0
    assert not panel.alive.all() and panel.alive.any(axis=0).all()


def test_context_and_observers_are_called_per_step():
    seen = []
    model = SIRNetwork(10, seed=2)
    panel = simulate(
        model, steps=4, recorder=FeatureRecorder({"state": "state"}),
        context={"infected": lambda m: sum(a.state == 1.0 for a in m.agents), "pair": lambda m: [1.0, 2.0]},
        observers=[lambda m, t: seen.append((t, m.steps))],
    )
    assert seen == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert panel.context["pair"].shape == (4, 2)
    np.testing.assert_array_equal(panel.context["infected"], (panel.values[..., 0] == 1.0).sum(axis=1))


def test_manual_recording_scope():
    model = BoltzmannWealth(5, seed=0)
    rec_ = FeatureRecorder({"wealth": "wealth"})
    with rec_.recording(model, steps=3) as rec:
        for _ in range(3):
            model.step()
            rec.capture(model)
    assert rec.panel().shape == (3, 5, 1)
    with pytest.raises(StepsMismatchError, match="declared steps=3 but captured 2"):
        with rec_.recording(model, steps=3) as rec:
            for _ in range(2):
                model.step()
                rec.capture(model)
    with pytest.raises(StepsMismatchError, match="exceeds the declared steps=1"):
        with rec_.recording(model, steps=1) as rec:
            rec.capture(model)
            rec.capture(model)


@pytest.mark.parametrize("steps", [0, -2, 2.5, "3", True])
def test_bad_steps_are_typed_errors(steps):
    with pytest.raises(StepsMismatchError, match="positive integer"):
        simulate(BoltzmannWealth(3), steps=steps, recorder=FeatureRecorder({"w": "wealth"}))


def test_unknown_attribute_names_what_is_valid():
    with pytest.raises(UnknownAttributeError, match=r"'welth'.*available attributes.*wealth") as info:
        simulate(BoltzmannWealth(3), steps=2, recorder=FeatureRecorder({"w": "welth"}))
    assert isinstance(info.value, SimulationError) and isinstance(info.value, UnknownFeatureError)


@pytest.mark.parametrize(
    ("fn", "match"),
    [(lambda a: "rich", "non-numeric value 'rich'"), (lambda a: None, "non-numeric value None"),
     (lambda a: float("nan") if a.unique_id == 2 else 1.0, "nan.*agent 2"),
     (lambda a: float("inf"), "inf")],
    ids=["str", "none", "nan", "inf"],
)
def test_non_numeric_or_non_finite_feature_values(fn, match):
    with pytest.raises(FeatureValueError, match=match):
        simulate(BoltzmannWealth(3), steps=2, recorder=FeatureRecorder({"bad": fn}))


@pytest.mark.parametrize("z", [1 + 5j, np.complex128(1 + 5j), np.complex64(2 - 7j), np.complex128(3 + 0j)],
                         ids=["complex", "complex128", "complex64", "complex128_real"])
def test_numpy_complex_values_are_refused_like_python_complex(z):
    """A numpy complex used to pass as its real part (only a ComplexWarning): refused like a Python complex,
    by the per-agent path, the array path and a context."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning either: refused before any cast
        with pytest.raises(FeatureValueError, match=r"feature 'z' returned a non-numeric value .*complex"):
            simulate(BoltzmannWealth(3), steps=1, recorder=FeatureRecorder({"z": lambda a: z}))
        col = np.full(5, z)
        with pytest.raises(FeatureValueError, match=r"feature 'z' returned a complex column \(dtype complex"):
            simulate(VectorModel(5), 1, ArrayRecorder(lambda m: {"w": m.wealth, "z": col}))
        with pytest.raises(FeatureValueError, match=r"feature 'z' returned a non-numeric value"):
            simulate(VectorModel(5), 1, ArrayRecorder(lambda m: {"w": m.wealth, "z": col.astype(object)}))
        with pytest.raises(FeatureValueError, match=r"context 'c' returned a non-numeric value"):
            simulate(VectorModel(5), 1, ArrayRecorder(lambda m: {"w": m.wealth}), context={"c": lambda m: col})


@pytest.mark.parametrize("z", [np.array(1 + 2j), np.array(3 + 0j, dtype=np.complex64), np.array("1.5")],
                         ids=["complex128_0d", "complex64_0d", "text_0d"])
def test_a_0d_numpy_array_of_complex_or_text_is_refused_like_its_scalar(z):
    """A 0-d complex array (``np.array(1+2j)``) passed the scalar check and was recorded as its real part (a 0-d
    text array parsed as a number): refused like a numpy complex scalar, per agent and in an array column."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(FeatureValueError, match=r"feature 'z' returned a non-numeric value array\("):
            simulate(BoltzmannWealth(3), steps=1, recorder=FeatureRecorder({"z": lambda a: z}))
        with pytest.raises(FeatureValueError, match=r"feature 'z' returned a non-numeric value array\("):
            simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"w": m.wealth, "z": [z, 1.0, 2.0]}))
    p = simulate(BoltzmannWealth(3), steps=1, recorder=FeatureRecorder({"z": lambda a: np.array(2.5)}))
    assert (p.values == 2.5).all()  # a 0-d array of a real number is that number


@pytest.mark.parametrize("ids", [[1, "a", 2], ["a", 1, 2], np.array([1, "a", 2], dtype=object), [2.5, "x", "y"]])
def test_agent_ids_of_mixed_numbers_and_text_are_refused(ids):
    """numpy read [1, "a", 2] as the text ids ["1", "a", "2"] without a word: id 1 became "1" (and 1 and "1"
    would be one agent). Ids of one type are kept as given."""
    with pytest.raises(FeatureValueError, match=r"agent_ids mixes numbers and text"):
        simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"w": m.wealth}, agent_ids=ids))
    assert simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"w": m.wealth}, agent_ids=["c", "a", "b"])
                    ).agent_ids.tolist() == ["a", "b", "c"]
    assert simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"w": m.wealth}, agent_ids=lambda m: [3, 1, 2])
                    ).agent_ids.tolist() == [1, 2, 3]


def test_unhashable_ids_huge_ints_and_ragged_agent_ids_are_typed_errors():
    """Each of these escaped as a bare Python/numpy exception: the id lookup hashed a list before the
    "not hashable" check ran (TypeError), 10**400 cannot become a float64 (OverflowError, only TypeError and
    ValueError were caught), and numpy refuses ragged agent_ids (ValueError: inhomogeneous shape)."""
    from types import SimpleNamespace

    class Agents:  # agents with given unique_ids and wealth
        def __init__(self, ids, w=1.0):
            self.agents = [SimpleNamespace(unique_id=u, wealth=w) for u in ids]
            self.steps = 0

        def step(self):
            self.steps += 1

    for ids, shown in [([[1], [2]], r"\[1\] \(list\)"), ([(1, [2]), 3], r"\(1, \[2\]\) \(tuple\)")]:
        with pytest.raises(FeatureValueError, match=rf"agent unique_id {shown} is not hashable"):
            simulate(Agents(ids), 1, FeatureRecorder({"w": "wealth"}))
    for big, shown in [(10**400, r"1000000.*\.\.\."), (10**5000, r"<an integer of 16,610 bits>")]:
        with pytest.raises(FeatureValueError, match=rf"feature 'w' returned {shown}, beyond float64's range"):
            simulate(Agents([1, 2], w=big), 1, FeatureRecorder({"w": "wealth"}))
    with pytest.raises(FeatureValueError, match=r"feature 'x' returned 1000.*, beyond float64's range"):
        simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"x": [1, 10**400, 2]}))
    with pytest.raises(FeatureValueError, match=r"context 'c' returned a number beyond float64's range"):
        simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"x": m.wealth}), context={"c": lambda m: 10**400})
    with pytest.raises(FeatureValueError, match=r"agent id \[3\] \(list\) at agent_ids\[1\] is not hashable; ids key "
                                                r"the agent rows \(use ints, strs or tuples of them\)"):
        simulate(VectorModel(3), 1, ArrayRecorder(lambda m: {"x": m.wealth}, agent_ids=[(1, 2), [3], ()]))


def test_bad_recorder_construction():
    with pytest.raises(FeatureValueError, match="non-empty mapping"):
        FeatureRecorder({})
    with pytest.raises(FeatureValueError, match=r"attribute name .* or a callable"):
        FeatureRecorder({"w": 3})
    with pytest.raises(SimulationError, match="recorder must be"):
        simulate(BoltzmannWealth(3), steps=1, recorder={"w": "wealth"})


def test_datacollector_adapter_uses_its_agent_reporters():
    import mesa

    dc = mesa.DataCollector(agent_reporters={"wealth": "wealth", "double": lambda a: 2 * a.wealth})
    panel = simulate(BoltzmannWealth(4, seed=5), steps=3, recorder=FeatureRecorder.from_datacollector(dc))
    ref = simulate(BoltzmannWealth(4, seed=5), steps=3,
                   recorder=FeatureRecorder({"wealth": "wealth", "double": lambda a: 2 * a.wealth}))
    assert panel.equals(ref.__class__(ref.values, features=ref.features, agent_ids=ref.agent_ids,
                                      steps=ref.steps, meta=panel.meta))


def test_datacollector_adapter_skips_agent_types_without_an_attribute_reporters_attribute():
    """Mesa turns an attribute reporter ``{"energy": "energy"}`` into ``getattr(agent, "energy", None)``. On a model
    with two agent types (mesa-examples' virus_antibody: ``"health"`` on antibodies, not viruses; wolf-sheep's
    grass), ``from_datacollector`` recorded that function, so the first capture failed with "returned a
    non-numeric value None" where a recorder given the attribute name skips the type. The adapter now recovers
    the attribute name: the same panel as ``FeatureRecorder({"energy": "energy"})``, the type listed as skipped,
    and the DataCollector's own frame of the recorded agents gives the same numbers."""
    import warnings

    import mesa

    from aumann.errors import RecorderWarning
    from aumann.panel import Panel

    class Sheep(mesa.Agent):
        def __init__(self, model):
            super().__init__(model)
            self.energy = float(self.random.randint(1, 9))

        def step(self):
            self.energy += self.random.random() - 0.5

    class Grass(mesa.Agent):
        def step(self):
            pass

    class Meadow(mesa.Model):
        def __init__(self, seed=0):
            super().__init__(rng=seed)
            for _ in range(3):
                Sheep(self)
                Grass(self)

        def step(self):
            self.agents.shuffle_do("step")

    from tests.simulators.user_models import mesa_collects_missing_attributes

    collects = mesa_collects_missing_attributes()  # Mesa 3.5's own collect() raises for the grass: it cannot run
    dc = mesa.DataCollector(agent_reporters={"energy": "energy", "twice": lambda a: 2 * getattr(a, "energy", 0.0)})
    with pytest.warns(RecorderWarning, match="type Grass have no 'energy'"):
        panel = simulate(Meadow(seed=4), 3, FeatureRecorder.from_datacollector(dc),
                         observers=[lambda m, t: dc.collect(m)] if collects else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecorderWarning)
        ref = simulate(Meadow(seed=4), 3, FeatureRecorder({"energy": "energy",
                                                            "twice": lambda a: 2 * getattr(a, "energy", 0.0)}))
    assert panel.meta["skipped_agent_types"] == {"Grass": "energy"}
    assert panel.equals(ref)
    if collects:
        frame = dc.get_agent_vars_dataframe().dropna()  # the grass rows hold None
        np.testing.assert_array_equal(Panel.from_dataframe(frame).values, panel.values)


def test_array_path_equals_per_agent_path_and_handles_alive():
    class Wrapped:  # the same vectorised state exposed as agents, for the per-agent reference
        def __init__(self, m):
            self.m = m
            self.steps = 0

        def step(self):
            self.m.step()
            self.steps = self.m.steps

        @property
        def agents(self):
            from types import SimpleNamespace

            return [SimpleNamespace(unique_id=i, wealth=w) for i, w in enumerate(self.m.wealth)]

    arr = simulate(VectorModel(50, seed=4), steps=5,
                   recorder=FeatureRecorder.from_arrays(lambda m: {"wealth": m.wealth, "sq": m.wealth**2}))
    ref = simulate(Wrapped(VectorModel(50, seed=4)), steps=5, recorder=FeatureRecorder({"wealth": "wealth"}))
    np.testing.assert_array_equal(arr.values[..., 0], ref.values[..., 0])
    np.testing.assert_array_equal(arr.values[..., 1], ref.values[..., 0] ** 2)
    assert isinstance(FeatureRecorder.from_arrays(lambda m: {}), ArrayRecorder)

    masked = simulate(VectorModel(50, seed=4), steps=5,
                      recorder=ArrayRecorder(lambda m: {"wealth": m.wealth}, alive=lambda m: m.active,
                                             agent_ids=np.arange(50)[::-1]))
    assert list(masked.agent_ids) == list(range(50))  # reordered ascending
    w = ref.values[..., 0][:, ::-1]
    np.testing.assert_array_equal(masked.values[..., 0], np.where(w > -1.0, w, 0.0))
    np.testing.assert_array_equal(masked.alive, w > -1.0)


def test_array_path_bad_input():
    with pytest.raises(UnknownAttributeError, match=r"\['income'\].*returned \['wealth'\]"):
        simulate(VectorModel(5), 2, ArrayRecorder(lambda m: {"wealth": m.wealth}, features=["income"]))
    with pytest.raises(FeatureValueError, match=r"shape \(4,\).*expected \(5,\)"):
        simulate(VectorModel(5), 2, ArrayRecorder(lambda m: {"w": m.wealth[: 5 - m.steps + 1]}))
    with pytest.raises(FeatureValueError, match="non-finite"):
        simulate(VectorModel(5), 2, ArrayRecorder(lambda m: {"w": m.wealth * np.inf}))
    with pytest.raises(FeatureValueError, match=r"alive mask has shape \(4,\) at capture 0; expected \(5,\)"):
        simulate(VectorModel(5), 2, ArrayRecorder(lambda m: {"w": m.wealth}, alive=lambda m: m.active[:4]))


@pytest.mark.parametrize(("health", "shown"), [(np.nan, "nan"), (0.5, "0.5"), (2.0, "2.0"), (1.0, None)])
def test_array_path_alive_mask_follows_the_panel_rule(health, shown):
    """A float alive mask is refused as Panel(alive=...) refuses it, naming the capture and agent: astype(bool)
    recorded NaN, 0.5 and 2.0 as alive (a dead agent marked NaN was averaged in and attributed)."""
    def alive(m):  # a bool mask at capture 0, a float one from capture 1
        if m.steps < 2:
            return np.ones(5, dtype=bool)
        h = np.ones(5)
        h[3] = health
        return h

    where = r"\(step 1, agent 3\)" if shown else ""
    with pytest.raises(FeatureValueError, match=rf"ArrayRecorder alive at capture 1: alive mask must be bool \(or "
                                                rf"integers 0/1\); got dtype float64.*{shown or ''}.*{where}"):
        simulate(VectorModel(5), 3, ArrayRecorder(lambda m: {"w": m.wealth}, alive=alive))
    with pytest.raises(FeatureValueError, match=r"only 0 and 1; got 2 at \(step 0, agent 1\)"):
        simulate(VectorModel(5), 1, ArrayRecorder(lambda m: {"w": m.wealth}, alive=lambda m: np.array([1, 2, 0, 1, 1])))
    p = simulate(VectorModel(5), 1, ArrayRecorder(lambda m: {"w": m.wealth}, alive=lambda m: np.array([1, 0, 1, 1, 1])))
    assert p.alive[0].tolist() == [True, False, True, True, True] and p.values[0, 1, 0] == 0.0


def test_progress_bar_runs_and_records_the_same():
    a = simulate(BoltzmannWealth(4, seed=9), steps=3, recorder=FeatureRecorder({"w": "wealth"}), progress=True)
    b = simulate(BoltzmannWealth(4, seed=9), steps=3, recorder=FeatureRecorder({"w": "wealth"}))
    assert a.equals(b)


def test_huge_finite_values_are_not_mistaken_for_inf():
    panel = simulate(BoltzmannWealth(3), steps=1, recorder=FeatureRecorder({"big": lambda a: 1e308}))
    assert np.all(panel.values == 1e308)


def test_initial_state_can_be_captured_first():
    with_initial = simulate(BoltzmannWealth(5, seed=6), steps=3, recorder=FeatureRecorder({"w": "wealth"}),
                            initial=True)
    plain = simulate(BoltzmannWealth(5, seed=6), steps=3, recorder=FeatureRecorder({"w": "wealth"}))
    assert with_initial.T == 4 and list(with_initial.steps) == [0, 1, 2, 3]
    np.testing.assert_array_equal(with_initial.values[0], np.ones((5, 1)))  # everyone starts with 1
    np.testing.assert_array_equal(with_initial.values[1:], plain.values)


def test_tuple_unique_ids_record_one_row_per_agent():
    """Agents keyed by grid coordinates, ``unique_id = (x, y)`` (the recorder's own error message suggests tuples):
    numpy read the ids as an (N, 2) array, so the panel refused them as a wrong shape ('agent_ids must be a sequence
    of length 3; got shape (3, 2)'), and tuples of different lengths escaped as a bare numpy ValueError. Each
    agent now gets its row, in tuple order, labelled by the tuple's text as any id that is not a number or text."""
    from types import SimpleNamespace

    from aumann.panel import Panel

    class Patches:
        def __init__(self, ids):
            self.agents = [SimpleNamespace(unique_id=u, wealth=float(k)) for k, u in enumerate(ids)]
            self.steps = 0

        def step(self):
            self.steps += 1
            for a in self.agents:
                a.wealth += 1.0

    for ids in ([(1, 0), (0, 1), (0, 0)], [(1, 2), (1,), (0, 5, 5)]):
        panel = simulate(Patches(ids), 2, FeatureRecorder({"w": "wealth"}))
        order = sorted(range(len(ids)), key=lambda k: ids[k])
        assert panel.agent_ids.tolist() == [str(ids[k]) for k in order]
        np.testing.assert_array_equal(panel.values[:, :, 0], [[k + 1.0 for k in order], [k + 2.0 for k in order]])
    col = np.empty(2, dtype=object)
    col[0], col[1] = (0, 1), (2,)
    assert Panel(np.zeros((1, 2, 1)), agent_ids=col).agent_ids.tolist() == ["(0, 1)", "(2,)"]


def test_array_recorder_keeps_tuple_ids_as_the_mesa_recorder_does():
    """``ArrayRecorder(agent_ids=[(1, 0), (0, 1), (0, 0)])`` (grid coordinates, a model's own unique_ids) was refused
    as "agent_ids has shape (3, 2); expected (3,)", and tuples of different lengths as "agent_ids must be N scalar ids
    (ints or strs)", where FeatureRecorder records the same ids, one row each labelled by the tuple's text, and says
    of an id that cannot key a row "(use ints, strs or tuples of them)". Both recorders now give the same panel, and
    an ArrayRecorder id that cannot key a row is named in FeatureRecorder's words: which id, why, what works."""
    from types import SimpleNamespace

    class Patches:  # the same agents, read per agent (FeatureRecorder) and as columns (ArrayRecorder)
        def __init__(self, ids):
            self.agents = [SimpleNamespace(unique_id=u, wealth=float(k)) for k, u in enumerate(ids)]
            self.ids = ids
            self.steps = 0

        def step(self):
            self.steps += 1
            for a in self.agents:
                a.wealth += 1.0

    columns = ArrayRecorder(lambda m: {"w": [a.wealth for a in m.agents]}, agent_ids=lambda m: m.ids)
    for ids in ([(1, 0), (0, 1), (0, 0)], [(1, 2), (1,), (0, 5, 5)], ((0, "a"), (0, "b"), (1, "a"))):
        per_agent = simulate(Patches(ids), 2, FeatureRecorder({"w": "wealth"}))
        panel = simulate(Patches(ids), 2, columns)
        assert panel.agent_ids.tolist() == per_agent.agent_ids.tolist() == [str(u) for u in sorted(ids)], ids
        np.testing.assert_array_equal(panel.values, per_agent.values)
    said = {}
    for rec, model in ((FeatureRecorder({"w": "wealth"}), Patches([[0, 1], (2,)])),
                       (ArrayRecorder(lambda m: {"w": [0.0, 1.0]}, agent_ids=[[0, 1], (2,)]), Patches([(9,), (8,)]))):
        with pytest.raises(FeatureValueError) as info:
            simulate(model, 1, rec)
        said[type(rec).__name__] = str(info.value)
    assert said["FeatureRecorder"].startswith("agent unique_id [0, 1] (list) is not hashable; ")
    assert said["ArrayRecorder"].startswith("agent id [0, 1] (list) at agent_ids[0] is not hashable; ")
    assert said["FeatureRecorder"].endswith("key the agent rows (use ints, strs or tuples of them)")
    assert said["ArrayRecorder"].endswith("key the agent rows (use ints, strs or tuples of them)")
    with pytest.raises(FeatureValueError, match=r"agent id \[0, 1\] \(row 0 of agent_ids, a 2-D array of shape "
                                                r"\(2, 2\)\) is not hashable; .*\[tuple\(row\) for row in ids\]"):
        simulate(VectorModel(2), 1, ArrayRecorder(lambda m: {"w": m.wealth}, agent_ids=np.array([[0, 1], [1, 0]])))


@pytest.mark.parametrize("returned, shown", [(None, r"None \(NoneType\)"), (3, r"3 \(int\)"),
                                             ("abc", r"'abc' \(str\)"), ({1: 2}, r"\{1: 2\} \(dict\)")])
def test_agents_fn_returning_no_collection_of_agents_is_a_typed_error(returned, shown):
    """``agents=lambda m: None`` (a forgotten ``return``) or a number escaped as a bare ``TypeError: 'NoneType'
    object is not iterable`` from inside the recorder; a dict was iterated by its keys. Now a FeatureValueError
    says what agents= returned, at the first capture and at a later one."""
    with pytest.raises(FeatureValueError, match=rf"agents=fn\(model\) must return an iterable of agents.*returned "
                                                rf"{shown} before the first capture"):
        simulate(BoltzmannWealth(3), 2, FeatureRecorder({"w": "wealth"}, agents=lambda m: returned))
    calls = []

    def later(model):  # the agents first, then nothing
        calls.append(1)
        return list(model.agents) if len(calls) < 3 else returned

    with pytest.raises(FeatureValueError, match=rf"returned {shown} at capture 1"):
        simulate(BoltzmannWealth(3), 2, FeatureRecorder({"w": "wealth"}, agents=later))


def test_duplicate_unique_ids_are_named():
    """Two agents with one unique_id (a user-assigned id, or 1 and 1.0, which Python treats as one key) were
    refused as 'duplicate agent unique_id at capture 0' without saying which id: the message names it."""
    from types import SimpleNamespace

    class Two:
        def __init__(self, ids):
            self.agents = [SimpleNamespace(unique_id=u, wealth=1.0) for u in ids]
            self.steps = 0

        def step(self):
            self.steps += 1

    for ids, shown in [(["a", "b", "a"], "'a'"), ([7, 7.0], "7")]:
        with pytest.raises(FeatureValueError, match=rf"duplicate agent unique_id {shown} at capture 0: 1 agent\(s\)"):
            simulate(Two(ids), 1, FeatureRecorder({"w": "wealth"}))
    with pytest.raises(FeatureValueError, match=r"duplicate agent unique_id 1 at capture 0: 3 agent\(s\)"):
        simulate(BoltzmannWealth(3), 1, FeatureRecorder({"w": "wealth"}, agents=lambda m: list(m.agents) * 2))


def test_a_bad_feature_value_names_the_agent_that_gave_it():
    """A feature that is None, text or several numbers for one agent said only 'returned a non-numeric value None
    at capture 0' or 'gave shape (2, 1)': on a model of many agents and types the user could not tell whose
    value it was. The message now names the agent's unique_id and type, and says that a feature is one number
    per agent (a position is two features)."""
    from types import SimpleNamespace

    class Herd:
        def __init__(self, values):
            self.agents = [SimpleNamespace(unique_id=10 + k, wealth=v) for k, v in enumerate(values)]
            self.steps = 0

        def step(self):
            self.steps += 1

    cases = [([1.0, None], r"non-numeric value None \(type NoneType\) for agent 11 \(SimpleNamespace\) at capture 0"),
             ([1.0, 2.0, "3"], r"non-numeric value '3' \(type str\) for agent 12 \(SimpleNamespace\)"),
             ([[1.0], [2.0]], r"returned \[1.0\] \(list\) for agent 10 \(SimpleNamespace\) at capture 0; a feature is "
                              r"one number per agent"),
             ([np.zeros(2), np.ones(2)], r"returned array\(\[0., 0.\]\) \(ndarray\) for agent 10"),
             ([1.0, 10**400], r"returned 1000.*, beyond float64.s range \(about 1.8e308\), for agent 11 "
                              r"\(SimpleNamespace\) at capture 0")]
    for values, match in cases:
        with pytest.raises(FeatureValueError, match=match):
            simulate(Herd(values), 1, FeatureRecorder({"w": "wealth"}))


def test_a_feature_function_that_raises_is_named_with_its_agent():
    """A feature function raising anything but AttributeError (1 / 0, a KeyError) escaped as the bare exception from
    the user's lambda, with no word of which feature, agent or capture: now a FeatureValueError naming them."""
    from types import SimpleNamespace

    from aumann.errors import ShapeError

    class Herd:
        def __init__(self):
            self.agents = [SimpleNamespace(unique_id=10 + k, wealth=float(k)) for k in range(3)]
            self.steps = 0

        def step(self):
            self.steps += 1

    for fn, match in [(lambda a: 1 / a.wealth, r"feature 'inv' raised ZeroDivisionError for agent 10 "
                                               r"\(SimpleNamespace\) at capture 0: float division by zero"),
                      (lambda a: {"x": 1}[a.unique_id], r"feature 'inv' raised KeyError for agent 10 .*capture 0")]:
        with pytest.raises(FeatureValueError, match=match) as got:
            simulate(Herd(), 1, FeatureRecorder({"w": "wealth", "inv": fn}))
        assert got.value.__cause__ is not None  # the original is chained (aumann --debug shows it)

    def typed(a):
        raise ShapeError("aumann's own error")

    with pytest.raises(ShapeError, match="aumann's own error"):  # aumann's own errors pass through as they are
        simulate(Herd(), 1, FeatureRecorder({"w": typed}))


def test_a_missing_attribute_names_the_agent_that_lacks_it():
    """The message took the first agent recorded as the culprit: with agents=fn returning sheep and grass it said
    'agents of type Sheep have no attribute 'energy'; available attributes: [..., 'energy', ...]', and an attribute
    set on some agents only (deleted from one sheep mid-run) was blamed on the whole type, listing the attribute
    as available. It now names the agent that lacks it, its type and its own attributes."""
    import mesa

    class Sheep(mesa.Agent):
        def __init__(self, model):
            super().__init__(model)
            self.energy = 1.0

        def step(self):
            if self.unique_id == 3 and self.model.steps == 2:
                del self.energy

    class Grass(mesa.Agent):
        def step(self):
            pass

    class Meadow(mesa.Model):
        def __init__(self, grass=False):
            super().__init__(rng=1)
            for _ in range(4):
                Sheep(self)
            if grass:
                Grass(self)

        def step(self):
            self.agents.do("step")

    with pytest.raises(UnknownAttributeError, match=r"feature 'e': agents of type Grass have no attribute 'energy' "
                                                    r"\(agent 5 \(Grass\) at capture 0\); available attributes: "
                                                    r"\['model', 'pos', 'unique_id'\]"):
        simulate(Meadow(grass=True), 1, FeatureRecorder({"e": "energy"}, agents=lambda m: list(m.agents)))
    with pytest.raises(UnknownAttributeError, match=r"agent 3 \(Sheep\) has no attribute 'energy' at capture 1, which "
                                                    r"other Sheep agents have \(it is set on some agents only\)"):
        simulate(Meadow(), 3, FeatureRecorder({"e": "energy"}))
    with pytest.raises(FeatureValueError, match=r"raised AttributeError for agent 3 \(Sheep\) at capture 1"):
        simulate(Meadow(), 3, FeatureRecorder({"e": lambda a: a.energy}))


def _wolf_sheep_types():
    from mesa.examples.advanced.wolf_sheep.agents import GrassPatch, Sheep, Wolf

    return GrassPatch, Sheep, Wolf


def _wolf_sheep_step(model):
    sim = getattr(model, "simulator", None)
    return sim.run_for(1) if sim is not None else model.step()


def test_datacollector_adapter_reads_agenttype_reporters_on_mesas_wolf_sheep():
    """Mesa's ``DataCollector(agenttype_reporters={Sheep: {...}, Wolf: {...}})`` (one reporter set per agent type)
    was refused ("has no agent reporters; give DataCollector(agent_reporters=...)"). The adapter now records every
    animal with its own type's reporters; the reference is Mesa's own per-type frames of the same run, on
    Mesa's bundled wolf-sheep (births and deaths: the rows of dead or unborn animals are absent in both)."""
    import mesa
    import pandas as pd

    from aumann.panel import Panel
    from tests.simulators.mesa_examples import EXAMPLES

    _, sheep, wolf = _wolf_sheep_types()
    dc = mesa.DataCollector(agenttype_reporters={
        sheep: {"energy": "energy", "kind": lambda a: 1.0},
        wolf: {"energy": "energy", "kind": lambda a: 2.0},
    })
    model = EXAMPLES["wolf_sheep"](11)
    recorder = FeatureRecorder.from_datacollector(dc)
    panel = simulate(model, 6, recorder, step=_wolf_sheep_step, observers=[lambda m, t: dc.collect(m)])
    assert panel.features == ("energy", "kind")
    frame = pd.concat([dc.get_agenttype_vars_dataframe(sheep), dc.get_agenttype_vars_dataframe(wolf)])
    ref = Panel.from_dataframe(frame)
    assert list(panel.agent_ids) == list(ref.agent_ids) and list(panel.steps) == list(ref.steps)
    np.testing.assert_array_equal(panel.values, ref.values)
    np.testing.assert_array_equal(panel.alive, ref.alive)
    assert not panel.alive.all()  # animals died or were born: the comparison covers the absent rows
    kinds = {type(a).__name__: a for a in model.agents}
    assert {"GrassPatch", "Sheep", "Wolf"} <= set(kinds)  # grass was there, and is not recorded (not asked for)
    assert set(np.unique(panel.values[..., 1][panel.alive])) == {1.0, 2.0}
    assert not recorder.skipped_types


def test_datacollector_adapter_agenttype_reporters_with_agent_reporters_and_bad_ones():
    """A per-type reporter replaces the ``agent_reporters`` one of the same name for its type; a type that does
    not report every feature is refused by name (a panel has one feature set), as is a key that is not a class."""
    import mesa

    from tests.simulators.mesa_examples import EXAMPLES

    grass, sheep, wolf = _wolf_sheep_types()
    dc = mesa.DataCollector(agent_reporters={"e": lambda a: -1.0},
                            agenttype_reporters={wolf: {"e": "energy"}})
    model = EXAMPLES["wolf_sheep"](3)
    panel = simulate(model, 1, FeatureRecorder.from_datacollector(dc), step=_wolf_sheep_step)
    got = dict(zip(panel.agent_ids.tolist(), panel.values[0, :, 0].tolist()))
    ref = {a.unique_id: (float(a.energy) if isinstance(a, wolf) else -1.0) for a in model.agents}
    assert got == ref and any(isinstance(a, grass) for a in model.agents)

    bad = mesa.DataCollector(agenttype_reporters={wolf: {"energy": "energy"}, sheep: {"hunger": "energy"}})
    with pytest.raises(FeatureValueError, match=r"agent type Wolf reports no \['hunger'\]"):
        FeatureRecorder.from_datacollector(bad)
    with pytest.raises(FeatureValueError, match="agenttype_reporters"):
        FeatureRecorder.from_datacollector(mesa.DataCollector())


def _boom(model):
    raise ZeroDivisionError("the user's function")


@pytest.mark.parametrize(("make", "context", "says"), [
    (lambda: ArrayRecorder(_boom), None, r"ArrayRecorder fn\(model\) at capture 0 raised ZeroDivisionError"),
    (lambda: ArrayRecorder(lambda m: {"wealth": m.wealth}, alive=_boom), None,
     r"ArrayRecorder alive\(model\) at capture 0 raised ZeroDivisionError"),
    (lambda: ArrayRecorder(lambda m: {"wealth": m.wealth}, agent_ids=_boom), None,
     r"ArrayRecorder agent_ids\(model\) at capture 0 raised ZeroDivisionError"),
    (lambda: ArrayRecorder(lambda m: {"wealth": m.wealth}), {"price": _boom},
     r"context 'price' fn\(model\) at capture 0 raised ZeroDivisionError"),
])
def test_a_recorders_own_function_that_raises_is_a_feature_value_error_naming_it(make, context, says):
    """FeatureRecorder named a feature that raised; ArrayRecorder's fn, alive and agent_ids functions and the context
    functions were called bare: a ZeroDivisionError in them came out of `aumann run` as a full traceback."""
    with pytest.raises(FeatureValueError, match=says) as info:
        simulate(VectorModel(4), steps=2, recorder=make(), context=context)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_feature_recorder_agents_function_that_raises_is_a_feature_value_error():
    with pytest.raises(FeatureValueError, match=r"agents=fn\(model\) before the first capture raised "
                                                r"ZeroDivisionError"):
        simulate(BoltzmannWealth(5, seed=0), steps=2, recorder=FeatureRecorder({"wealth": "wealth"}, agents=_boom))


def test_a_none_from_a_getattr_reporter_on_mixed_agent_types_says_how_to_fix_the_reporter():
    """mesa-examples' hotelling_law collects ``{"Price": lambda a: getattr(a, "price", None)}`` over stores and
    consumers; ``FeatureRecorder.from_datacollector`` of it failed with only 'returned a non-numeric value None for
    agent 4 (ConsumerAgent) at capture 0; features must return int, float or bool', which does not say what to
    change. The message now names the types that gave None and a value, and the three fixes: a number for every
    type, ``agenttype_reporters`` (Mesa >= 3.1, read by the adapter) or recording only the agents that have it."""
    import mesa

    class Store(mesa.Agent):
        def __init__(self, model):
            super().__init__(model)
            self.price = 10.0

    class Consumer(mesa.Agent):
        pass

    class Town(mesa.Model):
        def __init__(self, seed=0):
            super().__init__(rng=seed)
            Store(self)
            Consumer(self)

        def step(self):
            pass

    dc = mesa.DataCollector(agent_reporters={"Price": lambda a: getattr(a, "price", None)})
    with pytest.raises(FeatureValueError) as info:
        simulate(Town(), 1, FeatureRecorder.from_datacollector(dc))
    msg = str(info.value)
    assert "non-numeric value None (type NoneType) for agent 2 (Consumer) at capture 0" in msg
    assert "(Consumer gave None, Store a value)" in msg
    assert "agenttype_reporters" in msg and "Mesa >= 3.1" in msg and "agents=fn" in msg
    # the fix it names works: each type's own reporter
    fixed = mesa.DataCollector(agenttype_reporters={Store: {"Price": "price"}, Consumer: {"Price": lambda a: 0.0}})
    panel = simulate(Town(), 1, FeatureRecorder.from_datacollector(fixed))
    assert panel.values[0, :, 0].tolist() == [10.0, 0.0]


def test_ids_that_differ_by_a_trailing_nul_are_named_with_the_nul():
    """Ids ``'a\\x00'`` and ``'a'`` were refused as "repeated: ['a']" (numpy drops trailing NULs), which names one id
    the user never sees twice. Both recorders name both ids, the NUL escaped; an id holding NUL without a twin is read
    as before."""
    from types import SimpleNamespace

    from aumann.errors import DuplicateIdError

    class Pair:
        def __init__(self, ids):
            self.agents = [SimpleNamespace(unique_id=u, wealth=1.0) for u in ids]
            self.steps = 0

        def step(self):
            self.steps += 1

    nul = r"'a\\x00' and 'a' would be one id 'a'"
    with pytest.raises(DuplicateIdError, match=nul):
        simulate(Pair(["a\x00", "a"]), 1, ArrayRecorder(lambda m: {"w": np.ones(2)}, agent_ids=["a\x00", "a"]))
    with pytest.raises(DuplicateIdError, match=r"'a' and 'a\\x00' would be one id 'a'"):
        simulate(Pair(["a\x00", "a"]), 1, FeatureRecorder({"w": "wealth"}))
    assert simulate(Pair(["a\x00b", "a"]), 1, FeatureRecorder({"w": "wealth"})).agent_ids.tolist() == ["a", "a\x00b"]
