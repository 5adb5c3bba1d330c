"""Tuple agent ids ((x, y) grid coordinates) given to ``Panel`` directly are taken as the recorders take them.

``Panel(values, agent_ids=[(0, 1), (0, 2), (1, 0)])`` was a ShapeError ("agent_ids must be scalars ... pass a pair as
one text id"), while ``ArrayRecorder(agent_ids=...)`` and ``FeatureRecorder`` (a model's tuple unique_ids) record the
same ids, each labelled by its text ``"(0, 1)"``: a panel built by hand from those ids now holds the same labels.
Ids that cannot key a row (lists, rows of a 2-D array) and tuples mixed with scalar ids are still refused, each with
a message that says what works. (Earlier, numpy read the pairs as a second axis: "must be a sequence of length 3; got
shape (3, 2)".) Step labels stay scalars."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from aumann.attribution import Panel
from aumann.errors import DuplicateIdError, PanelError, ShapeError
from aumann.simulators import ArrayRecorder, FeatureRecorder, simulate

VALUES = np.ones((2, 3, 1))


class _Patches:
    """Agents keyed by grid coordinates; ``wealth`` grows by one each step."""

    def __init__(self, ids):
        self.agents = [SimpleNamespace(unique_id=u, wealth=float(k)) for k, u in enumerate(ids)]
        self.ids = list(ids)
        self.steps = 0

    def step(self):
        self.steps += 1
        for a in self.agents:
            a.wealth += 1.0


@pytest.mark.parametrize("ids", [[(1, 0), (0, 1), (0, 0)], [(1, 2), (1,), (0, 5, 5)], ((0, "a"), (0, "b"), (1, "a"))],
                         ids=["pairs", "ragged", "tuple of tuples with text"])
def test_tuple_ids_by_hand_give_the_recorders_panel(ids):
    recorders = (FeatureRecorder({"w": "wealth"}),
                 ArrayRecorder(lambda m: {"w": [a.wealth for a in m.agents]}, agent_ids=lambda m: m.ids))
    recorded = [simulate(_Patches(ids), 2, rec) for rec in recorders]
    for panel in recorded:  # the recorders order rows by id; their meta names the recorder
        by_hand = Panel(panel.values, features=["w"], agent_ids=sorted(ids), steps=panel.steps, meta=panel.meta)
        assert panel.equals(by_hand)
        assert by_hand.agent_ids.tolist() == panel.agent_ids.tolist() == [str(u) for u in sorted(ids)]
    assert by_hand.agent_ids.dtype == recorded[0].agent_ids.dtype


def test_tuple_ids_keep_the_order_given_and_look_up_by_tuple_or_label():
    panel = Panel(np.arange(3.0).reshape(1, 3, 1), agent_ids=[(1, 0), (0, 2), (0, 1)])
    assert panel.agent_ids.tolist() == ["(1, 0)", "(0, 2)", "(0, 1)"]
    assert panel.agent_index([(0, 1), "(1, 0)"]).tolist() == [2, 0]  # numpy read [(0, 1)] as the ids 0 and 1
    assert panel.subset([(0, 2)]).values[0, :, 0].tolist() == [1.0]


def test_tuple_ids_survive_save_and_load(tmp_path):
    panel = Panel(np.arange(6.0).reshape(2, 3, 1), agent_ids=[(0, 1), (0, 2, 3), (1, "a")], groups={"g": [1, 2, 1]})
    back = Panel.load(panel.save(tmp_path / "p.npz"))
    assert back.equals(panel)
    assert back.agent_ids.tolist() == ["(0, 1)", "(0, 2, 3)", "(1, 'a')"]
    assert back.agent_index([(0, 2, 3)]).tolist() == [1]


@pytest.mark.parametrize(("ids", "error", "said"), [
    ([(0, 1), (0, 1), (2, 3)], DuplicateIdError, r"^agent_ids must be unique; repeated: \[\(0, 1\)\]"),
    ([(0, 1), (0.0, 1.0), (2, 3)], DuplicateIdError, r"^agent_ids must be unique; repeated: \[\(0, 1\)\]"),
    ([(0, 1), (1, 2)], ShapeError, r"agent_ids must be a sequence of length 3"),
    ([(0, [1]), (1,), (2,)], ShapeError, r"^agent_ids\[0\] = \(0, \[1\]\) is not hashable"),
], ids=["repeated", "equal as tuples", "length", "holds a list"])
def test_tuple_ids_keep_every_check_on_ids(ids, error, said):
    with pytest.raises(error, match=said):
        Panel(VALUES, agent_ids=ids)


@pytest.mark.parametrize(("ids", "shown"), [
    ([[0, 1], [1, 2], [2, 3]], r"list \[0, 1\] at position 0 \(read as an array of shape \(3, 2\)\)"),
    (np.array([(0, 1), (1, 2), (2, 3)]), r"a row of a 2-D array \[0, 1\] at position 0"),
], ids=["lists", "2-D array"])
def test_ids_that_cannot_key_a_row_are_refused_with_what_works(ids, shown):
    with pytest.raises(ShapeError, match=rf"^agent_ids must be 3 ids, each a number, text or a tuple; got {shown}.*"
                                         r"not hashable\. Pass each pair as a tuple \(agent_ids=\[tuple\(p\) for p in "
                                         r"pairs\], labelled '\(0, 1\)'.*or as one text id \('0-1'\)"):
        Panel(VALUES, agent_ids=ids)
    assert Panel(VALUES, agent_ids=[tuple(p) for p in ids]).agent_ids.tolist() == ["(0, 1)", "(1, 2)", "(2, 3)"]
    assert Panel(VALUES, agent_ids=["-".join(map(str, p)) for p in ids]).agent_ids.tolist() == ["0-1", "1-2", "2-3"]


def test_tuples_mixed_with_scalar_ids_are_refused_naming_both():
    with pytest.raises(ShapeError, match=r"^agent_ids mix tuples and other ids: tuple \(0, 1, 2\) at position 1 and 7 "
                                         r"at position 0; give ids of one kind"):
        Panel(VALUES, agent_ids=[7, (0, 1, 2), (0, 1)])


def test_pair_step_labels_are_refused_as_scalars():
    with pytest.raises(ShapeError, match=r"^steps must be scalars, one number or text per step \(2 of them\); got "
                                         r"tuple \(0, 1\)"):
        Panel(VALUES, steps=[(0, 1), (1, 2)])


def test_a_flat_list_wrapped_in_another_is_a_length_error():
    with pytest.raises(ShapeError, match=r"agent_ids must be a sequence of length 3; got shape \(1, 3\)"):
        Panel(VALUES, agent_ids=np.array([[1, 2, 3]]))


def test_tuples_of_numpy_numbers_are_labelled_as_the_same_tuples_of_python_numbers():
    """``[tuple(row) for row in coords]`` (what the refusal of a 2-D array suggests) holds numpy integers: labelled by
    ``str`` they read "(np.int64(0), np.int64(1))" under numpy 2 (and "(0, 1)" under numpy 1), so the same grid cell
    had two labels and an id written by hand, "(0, 1)", named no agent."""
    coords = np.array([[0, 1], [0, 2], [1, 0]])
    rec = ArrayRecorder(lambda m: {"w": [a.wealth for a in m.agents]}, agent_ids=[tuple(r) for r in coords])
    recorded = simulate(_Patches([(0, 1), (0, 2), (1, 0)]), 1, rec)
    by_hand = Panel(np.ones((1, 3, 1)), agent_ids=[tuple(r) for r in coords])
    assert recorded.agent_ids.tolist() == by_hand.agent_ids.tolist() == ["(0, 1)", "(0, 2)", "(1, 0)"]
    assert by_hand.agent_index([(0, 2), (np.int64(1), np.int64(0))]).tolist() == [1, 2]


def test_group_labels_indexed_by_tuple_ids_are_read_by_those_ids():
    """A tier table keyed by the model's tuple unique_ids (``df.set_index("cell")["tier"]``) was refused as if no agent
    had an entry ("3 of the panel's 3 agents have no entry, e.g. ['(0, 1)', ...]; its index starts [(1, 0), ...]"),
    though ``agent_index`` and ``subset`` take those very tuples: the index is read by the tuples' labels."""
    import pandas as pd

    p = Panel(VALUES, agent_ids=[(0, 1), (0, 2), (1, 0)], features=["x"])
    tiers = pd.Series(["c", "a", "b"], index=pd.Index([(1, 0), (0, 1), (0, 2)], tupleize_cols=False))
    assert p.with_groups(tier=tiers).groups["tier"].tolist() == ["a", "b", "c"]
    multi = pd.Series(["c", "a", "b"], index=pd.MultiIndex.from_tuples([(1, 0), (0, 1), (0, 2)]))
    assert p.with_groups(tier=multi).groups["tier"].tolist() == ["a", "b", "c"]
    both = pd.Series(["a", "b", "c", "d"], index=pd.Index([(0, 1), "(0, 1)", (0, 2), (1, 0)], tupleize_cols=False))
    with pytest.raises(PanelError, match=r"ids repeat in its index: \['\(0, 1\)'\]"):
        p.with_groups(tier=both)
