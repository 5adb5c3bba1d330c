"""A run stopped by the executor itself (a worker or node that died and whose retries ran out) says what the run
directory kept and that the same command computes only the rest; a rerun does exactly that."""

from __future__ import annotations

from typing import Any

import pytest

from aumann.errors import ExecutorError
from aumann.studies.faithfulness import run_study
from tests.tiny import tiny_config

LOST = "task 2 of 3: the worker or node running it died and its 3 retries ran out (NodeDiedError: gone)"


class _NodeLost:
    """An executor whose second task's node died: what ``RayExecutor.map`` hands back for it (every other task runs,
    in this process)."""

    def map(self, fn: Any, specs: list, *, on_result: Any = None, return_exceptions: bool = False,
            shared: Any = None) -> list:
        out = []
        for i, spec in enumerate(specs):
            res = ExecutorError(LOST) if i == 1 else fn(spec)
            if on_result is not None:
                on_result(i, res)
            out.append(res)
        return out


def test_a_run_lost_with_its_node_says_the_same_command_computes_only_it(tmp_path):
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=3,
                          study={"permutations": 8, "random_orderings": 2, "path_orders": 2, "quadrature_steps": 8})
    out = tmp_path / "run"
    with pytest.raises(ExecutorError) as info:
        run_study(sc, cfg, out_dir=out, executor=_NodeLost())
    msg = str(info.value)
    assert msg.startswith(LOST) and "\n" not in msg
    assert f"2 of the 3 run(s) computed now are written in {out}" in msg
    assert "the same command resumes there and computes only the 1 unfinished one(s)" in msg
    again = run_study(sc, cfg, out_dir=out)
    assert (again.resumed, again.computed) == (2, 1)


def test_a_message_that_already_says_how_to_resume_is_left_alone(tmp_path):
    """The cluster-gone error already says to rerun the same command: said once."""
    from aumann.studies.faithfulness import _say_resume

    gone = ExecutorError("the Ray cluster at 'h:1' is gone ...; rerun the same command to resume")
    _say_resume(gone, tmp_path, 1, 2)
    assert str(gone).count("resume") == 1
