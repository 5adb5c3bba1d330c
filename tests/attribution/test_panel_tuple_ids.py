"""Ids given as pairs are refused with a message that says ids are scalars and how to pass a pair.

``Panel(values, agent_ids=[(0, 1), (1, 2), (2, 3)])`` said "agent_ids must be a sequence of length 3; got shape
(3, 2)", though it was a sequence of length 3: numpy had read the pairs as a second axis. Pairs of different lengths
said "must be a flat sequence of 3 labels: setting an array element with a sequence..."."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.attribution import Panel
from aumann.errors import ShapeError

VALUES = np.ones((2, 3, 1))


@pytest.mark.parametrize(("ids", "shown"), [
    ([(0, 1), (1, 2), (2, 3)], r"tuple \(0, 1\) at position 0 \(read as an array of shape \(3, 2\)\)"),
    ([[0, 1], [1, 2], [2, 3]], r"list \[0, 1\] at position 0 \(read as an array of shape \(3, 2\)\)"),
    (np.array([(0, 1), (1, 2), (2, 3)]), r"a row of a 2-D array \[0, 1\] at position 0"),
    ([7, (0, 1, 2), (0, 1)], r"tuple \(0, 1, 2\) at position 1\. "),
], ids=["tuples", "lists", "2-D array", "ragged"])
def test_pair_ids_are_refused_as_not_scalars_with_how_to_pass_them(ids, shown):
    with pytest.raises(ShapeError, match=r"^agent_ids must be scalars, one number or text per agent \(3 of them\); "
                                         rf"got {shown}.*Pass a pair \(or any tuple\) as one text id, e.g. '"):
        Panel(VALUES, agent_ids=ids)


def test_the_suggested_text_ids_are_accepted():
    with pytest.raises(ShapeError, match=r"e.g. '0-1' for \(0, 1\): agent_ids=\[\"-\".join\(map\(str, p\)\) for p in "
                                         r"pairs\]"):
        Panel(VALUES, agent_ids=[(0, 1), (1, 2), (2, 3)])
    panel = Panel(VALUES, agent_ids=["-".join(map(str, p)) for p in [(0, 1), (1, 2), (2, 3)]])
    assert panel.agent_ids.tolist() == ["0-1", "1-2", "2-3"]


def test_pair_step_labels_are_refused_the_same_way():
    with pytest.raises(ShapeError, match=r"^steps must be scalars, one number or text per step \(2 of them\); got "
                                         r"tuple \(0, 1\)"):
        Panel(VALUES, steps=[(0, 1), (1, 2)])


def test_a_flat_list_wrapped_in_another_is_a_length_error():
    with pytest.raises(ShapeError, match=r"agent_ids must be a sequence of length 3; got shape \(1, 3\)"):
        Panel(VALUES, agent_ids=np.array([[1, 2, 3]]))
