import numpy as np
import pytest
import torch

from aumann.attribution import Panel
from aumann.errors import (
    DuplicateIdError,
    EmptyPanelError,
    NonFiniteError,
    PanelError,
    ShapeError,
    UnknownAgentError,
    UnknownFeatureError,
)


def test_shapes_and_defaults(rng):
    p = Panel(rng.normal(size=(5, 3)))
    assert p.shape == (1, 5, 3)
    assert p.features == ("f0", "f1", "f2")
    assert p.agent_ids.tolist() == [0, 1, 2, 3, 4]
    assert p.dtype == np.float64


def test_dtype_preserved_and_ints_become_float64(rng):
    assert Panel(rng.normal(size=(2, 4, 3)).astype(np.float32)).dtype == np.float32
    assert Panel(np.ones((2, 4, 3), dtype=np.int32)).dtype == np.float64
    t = torch.ones(2, 4, 3, dtype=torch.float32)
    assert Panel(t).dtype == np.float32


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4, 5)])
def test_wrong_rank(shape):
    with pytest.raises(ShapeError, match=r"\(T, N, D\)"):
        Panel(np.ones(shape))


def test_empty():
    with pytest.raises(EmptyPanelError):
        Panel(np.ones((2, 0, 3)))


def test_nan_in_live_rows_rejected_but_allowed_in_dead_rows():
    v = np.ones((2, 3, 2))
    v[1, 2, 0] = np.nan
    with pytest.raises(NonFiniteError, match="agent 2"):
        Panel(v)
    alive = np.ones((2, 3), dtype=bool)
    alive[1, 2] = False
    assert Panel(v, alive=alive).alive.sum() == 5


def test_duplicates_and_unknown_names():
    with pytest.raises(DuplicateIdError):
        Panel(np.ones((3, 2)), agent_ids=["a", "b", "a"])
    with pytest.raises(DuplicateIdError):
        Panel(np.ones((3, 2)), features=["x", "x"])
    p = Panel(np.ones((3, 2)), features=["x", "y"])
    with pytest.raises(UnknownFeatureError, match=r"\['x', 'y'\]"):
        p.feature("z")
    with pytest.raises(UnknownAgentError):
        p.subset([7])
    with pytest.raises(PanelError):
        Panel([["a", "b"]])


def test_subset_carries_groups_and_keeps_order(rng):
    v = rng.normal(size=(4, 6, 2))
    p = Panel(v, agent_ids=list("uvwxyz"), groups={"tier": list("ttmmll")})
    s = p.subset(["z", "u", "x"])
    assert s.agent_ids.tolist() == ["z", "u", "x"]
    assert s.groups["tier"].tolist() == ["l", "t", "m"]
    np.testing.assert_array_equal(s.values, v[:, [5, 0, 3]])


def test_save_load_roundtrip(tmp_path, rng):
    v = rng.normal(size=(3, 4, 2)).astype(np.float32)
    alive = np.ones((3, 4), dtype=bool)
    alive[0, 1] = False
    p = Panel(v, features=["a", "b"], agent_ids=["p", "q", "r", "s"], steps=[10, 20, 30],
              groups={"tier": ["top", "mid", "tail", "tail"]}, alive=alive,
              context={"price": np.array([1.0, 1.1, 1.2])}, meta={"synthetic": True})
    path = p.save(tmp_path / "panel.npz")
    q = Panel.load(path)
    assert q.equals(p)
    assert q.dtype == np.float32
    assert q.meta == {"synthetic": True}


def test_context_shape_checked():
    with pytest.raises(ShapeError, match="context 'price'"):
        Panel(np.ones((2, 3, 1)), context={"price": np.ones(3)})


@pytest.mark.parametrize("what", ["steps", "agent_ids"])
@pytest.mark.parametrize(("labels", "says"), [
    (lambda n: np.arange(n) + 1j, "got complex labels"),
    (lambda n: np.r_[0.0, np.nan, np.arange(2, n)], r"1 label\(s\) are NaN or ±inf \(at position\(s\) \[1\]\)"),
    (lambda n: np.r_[0.0, np.inf, -np.inf, np.arange(3, n)], r"2 label\(s\) are NaN or ±inf"),
    (lambda n: np.r_[np.array(["NaT"], dtype="datetime64[D]"),
                     np.datetime64("2020-01-01") + np.arange(n - 1)], r"1 label\(s\) are NaT"),
])
def test_labels_that_are_no_labels_are_refused(what, labels, says, tmp_path):
    """Complex labels cannot be written to JSON; NaN, ±inf and NaT print as empty CSV cells (and NaN passes a
    uniqueness test): refused when the panel is made and when a file holding them is loaded."""
    z = np.abs(np.random.default_rng(0).normal(size=(5, 6, 2)))
    n = 5 if what == "steps" else 6
    with pytest.raises(PanelError, match=f"{what} must be integers, text, finite numbers or times; {says}"):
        Panel(z, **{what: labels(n)})
    ok = Panel(z)
    ok.save(tmp_path / "p.npz")
    with np.load(tmp_path / "p.npz", allow_pickle=False) as f:
        members = dict(f)
    members[what] = labels(n)
    np.savez(tmp_path / "bad.npz", **members)
    with pytest.raises(PanelError, match=says):
        Panel.load(tmp_path / "bad.npz")


def test_finite_float_and_time_labels_stay_labels():
    z = np.zeros((3, 2, 1))
    p = Panel(z, steps=np.array([0.5, 1.5, 2.5]), agent_ids=np.array([1.0, 2.0]))
    assert p.steps.tolist() == [0.5, 1.5, 2.5]
    q = Panel(z, steps=np.datetime64("2020-01-01") + np.arange(3))
    assert str(q.steps[0]) == "2020-01-01"


@pytest.mark.parametrize("what", ["agent_ids", "steps"])
@pytest.mark.parametrize("labels", [[1, "a", 2], ["a", 1, 2], np.array([1, "a", 2], dtype=object), [2.5, "x", "y"],
                                    (1, "a", 2)])
def test_labels_mixing_numbers_and_text_are_refused(what, labels):
    """Panel(agent_ids=[1, "a", 2]) made text of every id (["1", "a", "2"]): id 1 was then looked up as "1", and
    1 and "1" would be one agent. Refused as ArrayRecorder(agent_ids=...) refuses them, by the same check."""
    z = np.zeros((3, 3, 1))
    with pytest.raises(PanelError, match=f"{what} mixes numbers and text"):
        Panel(z, **{what: labels})
    numbers = [3, 1, 2] if what == "agent_ids" else [1, 2, 3]  # (number steps are in time order)
    for ok in (["c", "a", "b"], np.array(["c", "a", "b"], dtype=object), numbers):
        assert getattr(Panel(z, **{what: ok}), what).tolist() == list(ok)


@pytest.mark.parametrize("labels", [[1, "1", 2, "2"], ["1", 1, "2", 2], np.array([1, "1", 2, "2"], dtype=object)])
def test_group_labels_mixing_numbers_and_text_are_refused(labels):
    """groups={"g": [1, "1", 2, "2"]} became the text labels ['1', '1', '2', '2']: groups 1 and '1' merged into one
    group silently (group_shares reported {'1': 0.5, '2': 0.5} for four groups). Refused, naming both labels."""
    z = np.ones((1, 4, 1))
    with pytest.raises(PanelError, match=r"group 'g' labels mixes numbers and text \((1 and '1'|'1' and 1)\)"):
        Panel(z, groups={"g": labels})


@pytest.mark.parametrize("labels", [[1, 1, 2, 2], ["1", "1", "2", "2"], np.array([3, 1, 3, 1]),
                                    np.array(["b", "a", "b", "a"], dtype=object), ["top", "mid", "mid", "top"]])
def test_group_labels_of_one_type_keep_their_type(labels):
    """(None among text stays the text label 'None': tests/attribution/test_bad_inputs_attribution.py.)"""
    p = Panel(np.ones((1, 4, 1)), groups={"g": labels})
    assert p.groups["g"].tolist() == list(labels)
    first = np.asarray(labels).tolist()[0]
    assert {type(v) for v in p.groups["g"].tolist()} == {type(first)}
    assert p.groups["g"].dtype.kind == ("i" if isinstance(first, int) else "U")


@pytest.mark.parametrize("t", [1.5, True, "x", -1], ids=["fraction", "bool", "string", "negative"])
def test_load_step_refuses_a_step_position_that_is_not_a_whole_index(tmp_path, t):
    # int(t) read step 1 for t = 1.5 and for t = True without a word (repro3/05)
    from aumann.errors import PanelError

    path = Panel(np.arange(12.0).reshape(3, 4, 1)).save(tmp_path / "p")
    with pytest.raises(PanelError, match="step position"):
        Panel.load_step(path, t)
    np.testing.assert_array_equal(Panel.load_step(path, np.int64(2))["f0"], [8.0, 9.0, 10.0, 11.0])


@pytest.mark.parametrize("what", ["agent_ids", "steps"])
def test_none_among_ids_or_steps_is_refused(what):
    """[None, 1, 2] became ["None", "1", "2"]: every id text, and id 1 no longer found (attack repro3/06)."""
    z = np.zeros((3, 3, 1))
    for labels in ([None, 1, 2], ["a", None, "b"], np.array([1, None, 3], dtype=object)):
        with pytest.raises(PanelError, match="None"):
            Panel(z, **{what: labels})


def test_integer_ids_in_an_object_array_stay_integers():
    """An object array of ints made text of every id (1 became "1", so a lookup of id 1 failed)."""
    p = Panel(np.zeros((1, 3, 1)), agent_ids=np.array([7, 3, np.int64(5)], dtype=object))
    assert p.agent_ids.dtype == np.int64
    assert p.agent_ids.tolist() == [7, 3, 5]
    with pytest.raises(PanelError, match=r"1180591620717411303424 \(position 0\) is beyond both int64"):
        Panel(np.zeros((1, 2, 1)), agent_ids=np.array([2**70, 1], dtype=object))  # beyond uint64: refused, not text


@pytest.mark.parametrize("what", ["agent_ids", "steps"])
@pytest.mark.parametrize("labels, dtype", [([2**63 + 1, 5, 2**63], np.uint64), ([np.uint64(2**63 + 1), np.int64(5),
                                                                                 np.uint64(2**63)], np.uint64)],
                         ids=["uint64", "numpy_scalars"])
def test_integer_ids_past_int64_stay_exact(what, labels, dtype):
    """numpy makes floats of a list of ints some of which pass int64 ([2**63 + 1, 5]): id 2**63 + 1 became
    9.223372036854776e18, two such ids one (a DuplicateIdError for distinct ids) and the saved id another number.
    They are unsigned integers where they fit (integers no int64 or uint64 holds are refused, below). (Steps are
    in time order: the same labels sorted.)"""
    if what == "steps":
        labels = sorted(labels, key=int)
    p = Panel(np.zeros((3, 3, 1)), **{what: labels})
    got = getattr(p, what)
    assert got.dtype.type is dtype
    assert [int(v) for v in got.tolist()] == [int(v) for v in labels]


@pytest.mark.parametrize("ids", [["a\x00", "a"], ["a", "b\x00c"]], ids=["trailing", "inside"])
def test_text_ids_with_nul_characters_are_refused(ids):
    """numpy drops trailing NULs, so 'a\\x00' and 'a' were reported as one repeated id 'a'."""
    with pytest.raises(PanelError, match="NUL"):
        Panel(np.zeros((1, 2, 1)), agent_ids=ids)


@pytest.mark.parametrize("what", ["agent_ids", "steps", "features"])
@pytest.mark.parametrize("kind", [set, frozenset])
def test_labels_given_as_a_set_are_refused(what, kind):
    """Panel(z, agent_ids={"alice", "bob", ...}) assigned the ids to rows in hash order, which for text changes
    with every interpreter (PYTHONHASHSEED): the same data got a different agent per row from run to run."""
    z = np.zeros((3, 3, 3))
    labels = kind(["carol", "alice", "bob"])
    with pytest.raises(PanelError, match=f"{what} must be an ordered sequence"):
        Panel(z, **{what: labels})
    assert list(getattr(Panel(z, **{what: sorted(labels)}), what)) == ["alice", "bob", "carol"]
    keys = {"c": 0, "a": 1, "b": 2}.keys()  # ordered: dict keys keep their insertion order
    assert list(getattr(Panel(z, **{what: keys}), what)) == ["c", "a", "b"]


@pytest.mark.parametrize("what", ["agent_ids", "steps"])
@pytest.mark.parametrize("labels, named", [([2**70, 1], r"1180591620717411303424 \(position 0\) is beyond both"),
                                           (np.array([1, -(2**70)], dtype=object), r"-1180591620717411303424 \(pos"),
                                           ([2**63 + 1, -5, 2**63], r"9223372036854775809 \(position 0\) is beyond "
                                                                    r"int64.*no negative id such as -5")],
                         ids=["beyond_uint64", "below_int64", "negative_beside_uint64"])
def test_integer_ids_no_int64_or_uint64_holds_are_refused_by_name(what, labels, named):
    """Panel(agent_ids=[2**70, 1]) made text of every id, silently: the id 1 became '1', and agent_index([1]) (or
    any lookup, subset or join by the integer 1) failed with "unknown agent id". Now a PanelError names the id and
    the ranges, and says how to keep such ids (as text)."""
    with pytest.raises(PanelError, match=named) as err:
        Panel(np.zeros((len(labels), len(labels), 1)), **{what: labels})
    assert "int64" in str(err.value) and "[str(i) for i in ids]" in str(err.value)
    p = Panel(np.zeros((2, 2, 1)), agent_ids=[2**63, 1])  # uint64 holds these: the id 1 is the integer 1
    assert p.agent_index([1]).tolist() == [1] and p.subset([1]).agent_ids.tolist() == [1]


def test_readers_keep_integer_ids_past_uint64_as_their_text_in_order():
    """A frame (or a model) whose ids no int64 or uint64 holds is read with each id as its text, every digit kept and
    each row on its own agent; [2**63 + 1, 2**63, -1] had become floats (2**63 and 2**63 + 1 one number)."""
    import pandas as pd

    from aumann.labels import id_labels, label_column

    df = pd.DataFrame({"step": [0, 0, 0, 1], "agent": [2**70, 1, 10, 10], "x": [1.0, 2.0, 3.0, 4.0]})
    p = Panel.from_dataframe(df)
    assert p.agent_ids.tolist() == ["1", "10", str(2**70)]
    assert p.values[:, :, 0].tolist() == [[2.0, 3.0, 1.0], [0.0, 4.0, 0.0]]
    assert label_column([2**63 + 1, 2**63, -1]).tolist() == [str(2**63 + 1), str(2**63), "-1"]
    assert id_labels([2**70, 1]) == [str(2**70), "1"] and label_column([2**63, 1]).dtype == np.uint64


def test_steps_mixing_times_with_and_without_a_time_zone_are_refused_naming_both():
    """[01:00 UTC, 00:00 naive] did not compare as times, so they became text labels in row order: the step of
    00:00 came after 01:00 and the "previous" baseline read the wrong row, silently."""
    import datetime as dt

    utc = dt.UTC
    v = np.arange(4.0).reshape(2, 2, 1)
    with pytest.raises(PanelError, match=r"with and without a time zone.*'2026-01-01 01:00:00\+00:00' \(position 0\) "
                                         r"has a time zone, '2026-01-01 00:00:00' \(position 1\) has none"):
        Panel(v, steps=[dt.datetime(2026, 1, 1, 1, tzinfo=utc), dt.datetime(2026, 1, 1, 0)])
    with pytest.raises(PanelError, match=r"'2026-01-01T00:00:00Z' \(position 0\) has a time zone, "
                                         r"'2026-01-01T01:00:00' \(position 1\) has none"):
        Panel(v, steps=["2026-01-01T00:00:00Z", "2026-01-01T01:00:00"])


def test_a_step_column_of_times_as_text_with_mixed_zones_is_refused_not_sorted_as_text():
    """Text steps sort as text: '2026-01-01T01:00:00Z' came before '2026-01-01T05:00:00+05:00' (00:00 UTC, an hour
    earlier), so the panel's rows were out of time order; with and without a zone the order was a guess."""
    import pandas as pd

    def frame(steps):
        return pd.DataFrame({"step": [s for s in steps for _ in range(2)], "agent": [0, 1] * len(steps),
                             "x": np.arange(2.0 * len(steps))})

    with pytest.raises(PanelError, match=r"different UTC offsets.*'2026-01-01T05:00:00\+05:00' \(row 0, \+05:00\) and "
                                         r"'2026-01-01T01:00:00Z' \(row 2, \+00:00\)"):
        Panel.from_dataframe(frame(["2026-01-01T05:00:00+05:00", "2026-01-01T01:00:00Z"]))
    with pytest.raises(PanelError, match=r"step column 'step': '2026-01-01T01:00:00Z' \(row 0\) has a time zone, "
                                         r"'2026-01-01T00:30:00' \(row 2\) has none"):
        Panel.from_dataframe(frame(["2026-01-01T01:00:00Z", "2026-01-01T00:30:00"]))


def test_text_step_names_and_times_in_one_zone_are_kept():
    import datetime as dt

    import pandas as pd

    v = np.arange(6.0).reshape(3, 2, 1)
    assert Panel(v, steps=["pre", "2026-01-01T00:00:00Z", "post"]).steps.tolist() == \
        ["pre", "2026-01-01T00:00:00Z", "post"]  # names of steps (not all times): text in row order
    zulu = ["2026-01-01T00:00:00Z", "2026-01-01T01:00:00+00:00", "2026-01-01T02:00:00Z"]
    assert Panel(v, steps=zulu).steps.tolist() == zulu  # one offset (Z is +00:00)
    naive = ["2026-01-01", "2026-01-02", "2026-01-03"]
    assert Panel(v, steps=naive).steps.tolist() == naive
    # time objects in different zones compare as times: kept (and checked in time order)
    east = dt.timezone(dt.timedelta(hours=5))
    steps = [dt.datetime(2026, 1, 1, 4, tzinfo=east), dt.datetime(2026, 1, 1, 0, tzinfo=dt.UTC),
             dt.datetime(2026, 1, 1, 1, tzinfo=dt.UTC)]
    assert Panel(v, steps=steps).T == 3
    df = pd.DataFrame({"step": ["b", "b", "a", "a"], "agent": [0, 1, 0, 1], "x": [1.0, 2.0, 3.0, 4.0]})
    assert Panel.from_dataframe(df).steps.tolist() == ["a", "b"]


def test_agent_index_refuses_a_boolean_mask_it_read_as_the_ids_1_and_0() -> None:
    """``subset(mask)`` with a bool mask over agents took True and False as the ids 1 and 0: on a 2-agent panel
    ``subset([True, False])`` was agents 1 and 0, silently (on more agents, a DuplicateIdError about id 1)."""
    p = Panel(np.arange(6.0).reshape(2, 3, 1), features=["x"])
    for mask in (np.array([True, False, True]), [True, False]):
        with pytest.raises(UnknownAgentError, match=r"booleans, not agent ids.*take_agents\(np.flatnonzero"):
            p.subset(mask)
    with pytest.raises(UnknownAgentError, match="booleans, not agent ids"):
        p.agent_index([False])
    both = Panel(np.arange(4.0).reshape(2, 2, 1), features=["x"], agent_ids=[True, False])  # ids that are bools
    assert both.agent_index([False]).tolist() == [1]


@pytest.mark.parametrize("one", [1, np.int64(1), np.array(1)])
def test_agent_index_of_a_single_id_says_to_pass_a_list(one) -> None:
    """``subset(1)`` was Python's bare ``TypeError: 'int' object is not iterable``."""
    p = Panel(np.arange(6.0).reshape(2, 3, 1), features=["x"])
    with pytest.raises(UnknownAgentError, match=r"single id 1: pass \[1\]"):
        p.subset(one)


def test_agent_index_judges_ids_of_mixed_types_each_as_a_list_of_its_type_alone() -> None:
    """numpy made one type of a mixed list: on text ids ``agent_index([1, "2"])`` matched the number 1 with the text
    id "1" (``[1]`` alone is refused), ``[True, 2]`` on integer ids took True for the id 1, and ``[2**60 + 1, 0.5]``
    became floats, where 2**60 + 1 is the id 2**60: wrong agents, silently."""
    text = Panel(np.zeros((2, 3, 1)), features=["x"], agent_ids=["1", "2", "3"])
    for ids in ([1, "2"], np.array([1, "2"], dtype=object), [np.int64(1), "2"]):
        with pytest.raises(UnknownAgentError, match=r"1 unknown agent id\(s\), e.g. \[1\].*ids are text"):
            text.agent_index(ids)
    with pytest.raises(UnknownAgentError, match=r"1 unknown agent id\(s\), e.g. \[1\]"):
        text.subset([1, "2"])
    assert text.agent_index(["3", "1"]).tolist() == [2, 0]
    ints = Panel(np.zeros((2, 3, 1)), features=["x"], agent_ids=[0, 1, 2])
    with pytest.raises(UnknownAgentError, match=r"\[True\] are booleans, not agent ids"):
        ints.agent_index([True, 2])
    with pytest.raises(UnknownAgentError, match=r"1 unknown agent id\(s\), e.g. \['2'\]"):
        ints.agent_index([1, "2"])
    assert ints.agent_index([2, 1.0]).tolist() == [2, 1]  # a float equal to an integer id is that id, as [1.0] is
    big = Panel(np.zeros((1, 2, 1)), features=["x"], agent_ids=[2**60, 2**60 + 1])
    assert big.agent_index([2**60 + 1, 2.0**60]).tolist() == [1, 0]
    with pytest.raises(UnknownAgentError, match=r"e.g. \[0.5\]"):
        big.agent_index([2**60 + 1, 0.5])


def test_group_labels_indexed_by_booleans_are_refused_not_read_as_agents_1_and_0() -> None:
    """A label Series indexed by ``[True, False, 2]`` gave agent 1 True's label and agent 0 False's (pandas holds
    True == 1): labels of no agent landed on two agents, silently. Bools are ids only on a panel of bool ids."""
    import pandas as pd

    p = Panel(np.zeros((1, 3, 1)), features=["x"], agent_ids=[0, 1, 2])
    labels = pd.Series(["a", "b", "c"], index=[True, False, 2])
    with pytest.raises(PanelError, match=r"2 entries of its index are booleans, not agent ids: True \(position 0\), "
                                         r"False \(position 1\)"):
        p.with_groups(g=labels)
    with pytest.raises(PanelError, match="booleans, not agent ids"):
        Panel(np.zeros((1, 3, 1)), features=["x"], agent_ids=[0, 1, 2], groups={"g": labels})
    assert p.with_groups(g=pd.Series(["a", "b", "c"], index=[2, 0, 1])).groups["g"].tolist() == ["b", "c", "a"]
    flags = Panel(np.zeros((1, 2, 1)), features=["x"], agent_ids=[True, False])
    assert flags.with_groups(g=pd.Series(["f", "t"], index=[False, True])).groups["g"].tolist() == ["t", "f"]


def test_panel_values_that_numpy_keeps_as_objects_name_the_item_and_where() -> None:
    """``Panel([[[2**70 + 1], [1]]])`` said "ragged nesting, None or non-numbers?": none of those; it is an integer
    beyond int64 and uint64. The message names that value and its index, as it names a None or text item."""
    with pytest.raises(PanelError, match=r"1180591620717411303425 at index \(0, 0, 0\) is an integer beyond the range "
                                         r"of int64 and uint64"):
        Panel([[[2**70 + 1], [1]]])
    with pytest.raises(PanelError, match=r"got None \(NoneType\) at index \(0, 1, 0\)"):
        Panel([[[1.0], [None]]])
    assert Panel([[[2**63], [1]]]).values[0, 0, 0] == 2.0**63  # uint64 holds it: read as before
