"""``--strict`` recomputes a run already written after its required stages (an optional stage failed or did not
finish). That run's LLM decisions were counted in the usage ledger when it was written; the recompute counts them
again. The ledger keeps each written run's counts, so a run written again replaces its own: the counts that
describe the runs (decisions, fork decisions, abstentions) equal a straight run's, however often it was redone."""

from __future__ import annotations

import json

import pytest

from aumann.errors import StudyError
from aumann.studies.stages import Stage, register_stage, unregister_stage
from tests.cli_run import invoke_run as _invoke
from tests.llm_loopback import LoopbackLLM


@pytest.fixture
def flaky():
    """An optional stage that fails while ``state["fail"]`` is true."""
    state = {"fail": False}

    def run(ctx):
        if state["fail"]:
            raise RuntimeError("flaky stage failed")

    register_stage(Stage("flaky", run))
    try:
        yield state
    finally:
        unregister_stage("flaky")


COUNTS = ("decisions", "fork_decisions", "invalid_decisions")


def test_a_strict_recompute_does_not_count_the_runs_decisions_twice(tmp_path, flaky):
    def run(out, *extra):
        return _invoke("social-llm", "--agents", "3", "--steps", "2", "--runs", "2", "--permutations", "4",
                       "--no-ablations", "--no-plots", "--set", "study.random_orderings=1",
                       "--set", "study.action_attribution=false", "--backend", "openai", "--model", "m",
                       "--base-url", srv.base_url, "--concurrency", "1", "--out", str(out), *extra)

    def manifest(name):
        return json.loads((tmp_path / name / "manifest.json").read_text())

    with LoopbackLLM() as srv:
        assert run(tmp_path / "straight") == 0
        # a run finished with its optional stage failed, then --strict: the runs are recomputed
        flaky["fail"] = True
        assert run(tmp_path / "lenient-then-strict") == 0
        flaky["fail"] = False
        assert run(tmp_path / "lenient-then-strict", "--strict") == 0
        # --strict stopped by the failure after the first run was written, then --strict again (twice: the
        # second finds every run finished and resumes them)
        flaky["fail"] = True
        with pytest.raises(StudyError, match="flaky"):
            run(tmp_path / "strict-twice", "--strict")
        flaky["fail"] = False
        assert run(tmp_path / "strict-twice", "--strict") == 0
        assert run(tmp_path / "strict-twice", "--strict") == 0

    straight = manifest("straight")
    assert straight["llm_usage"]["decisions"] > 0
    for name in ("lenient-then-strict", "strict-twice"):
        got = manifest(name)
        for k in COUNTS:
            assert got["llm_usage"][k] == straight["llm_usage"][k], (name, k)
        assert got["llm_reliability"] == straight["llm_reliability"], name
        ledger = json.loads((tmp_path / name / "llm-usage.json").read_text())
        for k in COUNTS:
            assert ledger["manifest"][k] == straight["llm_usage"][k], (name, k)
