"""A small finished `aumann run` directory shared by the hardening tests (copied before each is damaged)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory):
    """(scenario, config, run directory) of a finished two-run social-llm study with its report."""
    from aumann import scenarios
    from aumann.studies import run_study, write_outputs
    from tests.tiny import TINY_STUDY

    sc = scenarios.get("social-llm")
    cfg = sc.load_config(agents=6, steps=4, runs=2, study={**TINY_STUDY, "ablations": False})
    out = tmp_path_factory.mktemp("finished") / "run"
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run social-llm", seconds=0.0, plots=False, interactive=False)
    return sc, cfg, out


@pytest.fixture
def run_copy(finished_run, tmp_path) -> tuple:
    """A fresh copy of the finished run directory: (scenario, config, path)."""
    sc, cfg, out = finished_run
    dst = tmp_path / "copy"
    shutil.copytree(out, dst, symlinks=True)
    return sc, cfg, Path(dst)
