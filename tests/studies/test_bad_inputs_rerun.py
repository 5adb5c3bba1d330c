"""Re-runs into the same run directory: nothing an earlier invocation left is shown as this one's.

* an ``aumann run`` with another config or seed into a finished directory that did not finish (interrupted,
  killed) leaves runs of the new config beside the old manifest and tables: ``aumann report`` refuses the
  directory instead of drawing them as one study; so does a manifest of a run an LLM cap stopped.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aumann.errors import ReportError
from aumann.studies import run_study, write_outputs
from aumann.studies.pages import render_report
from tests.tiny import TINY_STUDY, tiny_config

STUDY = {**TINY_STUDY, "permutations": 8, "ablations": False}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-run study (config A) with its manifest, tables and report."""
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2, study=STUDY)
    out = tmp_path_factory.mktemp("rerun") / "run"
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run social-llm", seconds=0.0, plots=False, interactive=False)
    return out


def _copy(finished: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(finished, dst)
    return dst


@pytest.mark.parametrize("runs_rewritten", [1, 2], ids=["one_run_rewritten", "every_run_rewritten"])
def test_report_refuses_runs_of_an_unfinished_rerun_with_another_config(finished, tmp_path, runs_rewritten):
    out = _copy(finished, tmp_path)
    render_report(out, interactive=False, plots=False)  # the finished directory reports
    # a re-run with another seed that stopped before its tables and manifest: its runs replace the old ones
    sc, other = tiny_config("social-llm", agents=6, steps=4, runs=runs_rewritten, seed=99, study=STUDY)
    run_study(sc, other, out_dir=out)
    with pytest.raises(ReportError, match="another config"):
        render_report(out, interactive=False, plots=False)


def test_report_refuses_a_run_that_an_llm_cap_stopped(finished, tmp_path):
    out = _copy(finished, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    # what `aumann run` writes when --max-calls stops it (aumann.cli.llm_usage.record_usage): no report_kind
    stopped = {k: manifest[k] for k in ("command", "created", "config")}
    (out / "manifest.json").write_text(json.dumps({**stopped, "status": "stopped",
                                                   "stopped_because": "max_calls=25 reached"}))
    with pytest.raises(ReportError, match=r"stopped before it finished.*max_calls=25"):
        render_report(out, interactive=False, plots=False)

