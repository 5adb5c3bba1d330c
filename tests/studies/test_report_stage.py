"""The study's last stage, ``report``: tables first; each figure, page and page section is an optional part whose
failure is recorded (manifest + report.md) while the rest is written; ``strict`` makes the first failure fatal."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil

import pytest

from aumann import scenarios
from aumann.errors import StudyError
from aumann.studies import figures as figures_mod
from aumann.studies.faithfulness import run_study
from aumann.studies.figures import FIGURES
from aumann.studies.pages import render_report
from aumann.studies.report import write_outputs
from aumann.studies.rundir import DELETION_CURVES, HEATMAP, MACRO_CURVE, RunDir
from aumann.studies.study_page import ReportSection, register_section, unregister_section

STUDY = {"permutations": 20, "random_orderings": 2, "quadrature_steps": 8, "ablations": False, "judge": "off"}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One small finished study (run records on disk), and its config."""
    sc = scenarios.get("midscale-social")
    cfg = sc.load_config(agents=20, steps=6, runs=1, study=STUDY)
    out = tmp_path_factory.mktemp("runs")
    return run_study(sc, cfg, out_dir=out), cfg


@pytest.fixture
def study(finished, tmp_path):
    """A fresh copy of the finished study's directory for each test (write_outputs writes into it)."""
    result, cfg = finished
    shutil.copytree(result.out_dir, tmp_path, dirs_exist_ok=True)
    return dataclasses.replace(result, out_dir=tmp_path), cfg, tmp_path


def _write(result, cfg, out, **kw):
    return write_outputs(result, out, command="aumann run midscale-social", seconds=1.0,
                         config=cfg.model_dump(mode="json"), interactive=False, **kw)


def _heatmap_fails(monkeypatch):
    def broken(result, out):
        raise ValueError("no colour for NaN")

    monkeypatch.setattr(figures_mod, "FIGURES", tuple((name, broken if name == HEATMAP else draw)
                                                     for name, draw in FIGURES))


def test_a_clean_report_stage_is_recorded_ok(study):
    result, cfg, out = study
    files = _write(result, cfg, out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert files["failures"] == [] and manifest["report_failures"] == []
    assert manifest["stages"]["report"] == {"ok": 1}
    assert [p.name for p in files["plots"]] == [MACRO_CURVE, HEATMAP, DELETION_CURVES]
    assert "did not finish" not in (out / "report.md").read_text()


def test_a_failing_figure_is_recorded_and_the_rest_is_written(study, monkeypatch):
    result, cfg, out = study
    _heatmap_fails(monkeypatch)
    files = _write(result, cfg, out)
    rd = RunDir(out)
    assert (out / "faithfulness.csv").is_file() and rd.figure(MACRO_CURVE).is_file()
    assert rd.figure(DELETION_CURVES).is_file() and not rd.figure(HEATMAP).exists()
    assert [p.name for p in files["plots"]] == [MACRO_CURVE, DELETION_CURVES]
    manifest = json.loads(rd.manifest.read_text())
    assert manifest["stages"]["report"] == {"failed": 1}
    assert [(f["stage"], f["error"]) for f in manifest["report_failures"]] == [
        (f"report: figure {HEATMAP}", "ValueError")]
    md = (out / "report.md").read_text()
    assert f"report: figure {HEATMAP} skipped: ValueError: no colour for NaN" in md
    assert (out / "report.html").is_file() and "Who drove it" in md  # the page itself was built
    # ``aumann report`` later: the figure is still missing, and the page still says why
    monkeypatch.undo()
    render_report(out, interactive=False)
    assert f"figure {HEATMAP} skipped: ValueError" in (out / "report.md").read_text()


@pytest.fixture
def broken_section():
    """A registered report section that fails (a user's, say), removed afterwards."""
    def broken(page):
        raise KeyError("spread")

    register_section(ReportSection("spread", "Spread over runs", broken))
    yield
    unregister_section("spread")


def test_a_failing_section_is_left_out_with_a_note_and_recorded(study, broken_section):
    result, cfg, out = study
    files = _write(result, cfg, out)
    unregister_section("spread")
    assert [f["stage"] for f in files["failures"]] == ["report: section spread"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [f["stage"] for f in manifest["report_failures"]] == ["report: section spread"]
    assert manifest["stages"]["report"] == {"failed": 1}
    md = (out / "report.md").read_text()
    assert "report: section spread skipped: KeyError" in md and "## Spread over runs" in md
    assert "## Cost" in md  # the sections after it are on the page
    # re-rendered without the broken section, the page is whole again (section failures are not carried over)
    render_report(out, interactive=False)
    assert "section spread" not in (out / "report.md").read_text()


def _misbehaving_section(kind):
    from aumann.studies.page import Table, Text

    if kind == "not_a_block":
        return lambda page: [Text("before"), 42]
    if kind == "ragged_table":
        return lambda page: [Table(["run", "t*"], [[0], [1, 2, 3]], caption="Spread", id="spread")]
    if kind == "string":
        return lambda page: "hello"
    return lambda page: (Text(f"line {i}") for i in range(2))  # "generator": fine, once read into a list


@pytest.mark.parametrize(("kind", "says"), [
    ("not_a_block", "report section spread: int 42 is not a report block"),
    ("ragged_table", "report section spread: table 'spread' has 2 column.s. but row 0 has 1 cell.s."),
    ("string", "report section spread must return a list of blocks .* got str 'hello'"),
])
def test_a_section_returning_what_is_no_page_fails_alone_not_the_whole_page(study, kind, says):
    """A block that is no block (42) or a table row shorter than its columns failed the whole report.html
    (TypeError 'unknown report block int', IndexError), and a string returned came out one heading per character."""
    result, cfg, out = study
    register_section(ReportSection("spread", "Spread over runs", _misbehaving_section(kind)))
    try:
        files = _write(result, cfg, out)
    finally:
        unregister_section("spread")
    assert files["html"] is not None and (out / "report.html").is_file()
    assert [(f["stage"], f["error"]) for f in files["failures"]] == [("report: section spread", "StudyError")]
    assert re.search(says, files["failures"][0]["message"])
    md = (out / "report.md").read_text()
    assert "## Spread over runs" in md and "could not be built" in md and "## Cost" in md
    assert "### h" not in md


def test_a_section_that_returns_a_generator_reaches_both_pages(study):
    """A generator was used up by report.html: report.md had the section's title and none of its blocks."""
    result, cfg, out = study
    register_section(ReportSection("spread", "Spread over runs", _misbehaving_section("generator")))
    try:
        files = _write(result, cfg, out)
    finally:
        unregister_section("spread")
    assert files["failures"] == []
    assert "line 1" in (out / "report.md").read_text() and "line 1" in (out / "report.html").read_text()


def test_a_page_that_cannot_be_built_leaves_a_report_md_saying_why(study):
    result, cfg, out = study
    RunDir(out).attribution(0, "aumann_shapley").unlink()  # the page's who and when read it
    files = _write(result, cfg, out)
    assert (out / "faithfulness.csv").is_file() and files["html"] is None
    fails = json.loads((out / "manifest.json").read_text())["report_failures"]
    assert [(f["stage"], f["error"]) for f in fails] == [("report: pages (report.html, report.md)", "ReportError")]
    md = (out / "report.md").read_text()
    assert "the report could not be built" in md and "ReportError" in md and "aumann_shapley" in md


def test_strict_makes_a_failing_figure_fatal_after_the_tables(study, monkeypatch):
    result, cfg, out = study
    _heatmap_fails(monkeypatch)
    with pytest.raises(StudyError, match=f"stage 'report' failed: figure {HEATMAP}: ValueError") as exc:
        _write(result, cfg, out, strict=True)
    assert isinstance(exc.value.__cause__, ValueError)
    assert (out / "faithfulness.csv").is_file() and not (out / "manifest.json").exists()
    strict_cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"strict": True})})
    with pytest.raises(StudyError, match="stage 'report'"):  # study.strict in the config says the same
        _write(result, strict_cfg, out)


def test_strict_makes_a_failing_section_fatal(study, broken_section):
    result, cfg, out = study
    with pytest.raises(StudyError, match="stage 'report' failed: section spread: KeyError"):
        _write(result, cfg, out, strict=True)
