"""Re-runs into the same run directory: nothing an earlier invocation left is shown as this one's.

* an ``aumann run`` with another config or seed into a finished directory that did not finish (interrupted,
  killed) leaves runs of the new config beside the old manifest and tables: ``aumann report`` refuses the
  directory instead of drawing them as one study; so does a manifest of a run an LLM cap stopped;
* a re-run with another config removes the runs the earlier config left (records, arrays, panels, attributions,
  timings; past this config's runs too), checking each first: a file changed since is refused and nothing goes;
* a finished re-run with other options removes what the earlier one wrote and it does not: a row's table it
  has no rows for (``resimulation_agreement.csv`` without ``--resimulation-reference``), the figures under
  ``--no-plots``, and a page it could not build -- the report never shows them as this run's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from aumann.errors import OutputError, ReportError
from aumann.studies import run_study, write_outputs
from aumann.studies.pages import render_report
from tests.tiny import TINY_STUDY, tiny_config

STUDY = {**TINY_STUDY, "permutations": 8, "ablations": False}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished two-run study (config A, with the re-simulation reference) with its manifest, tables, figures and
    report."""
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2, study={**STUDY, "resimulation_reference": True})
    out = tmp_path_factory.mktemp("rerun") / "run"
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run social-llm", seconds=0.0, plots=True, interactive=False)
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


def _files(out: Path, *folders: str) -> list[str]:
    return sorted(p.relative_to(out).as_posix() for f in folders for p in (out / f).iterdir())


def test_a_rerun_with_another_config_removes_the_runs_the_earlier_config_left(finished, tmp_path):
    """`aumann run midscale-social` (10 runs, N = 1000), then the README's `--agents 50 --runs 2 ...` into the same
    folder: runs 0-1 were recomputed but run-002 ... run-009 of N = 1000 stayed in runs/, panels/, attributions/ and
    timings/ beside them; and run 0 of the new config took the earlier run 0's attribution of a row it does not
    compute (sampled_shapley_resimulation) as its own (files_sha256)."""
    out = _copy(finished, tmp_path)
    (out / "panels" / "mine.npz").write_bytes(b"a file of yours")  # named by no record: kept
    (out / "attributions" / "notes.txt").write_text("yours")
    sc, other = tiny_config("social-llm", agents=6, steps=4, runs=1, seed=99, study=STUDY)  # no resimulation row
    res = run_study(sc, other, out_dir=out)
    assert _files(out, "runs", "timings") == ["runs/run-000.json", "runs/run-000.npz", "timings/run-000.json"]
    assert _files(out, "panels") == ["panels/mine.npz", "panels/run-000.npz"]
    attributions = _files(out, "attributions")
    assert "attributions/notes.txt" in attributions and "attributions/run-000-aumann_shapley.npz" in attributions
    assert [a for a in attributions if a.startswith("attributions/run-001") or "resimulation" in a] == []
    assert not any("resimulation" in name for name in res.records[0]["files_sha256"])
    write_outputs(res, out, command="aumann run social-llm --seed 99", seconds=0.0, plots=False, interactive=False)
    render_report(out, interactive=False, plots=False)  # `aumann report`: one run, of this config
    assert json.loads((out / "manifest.json").read_text())["runs"] == 1
    assert "1 run(s)" in (out / "report.md").read_text()


def test_runs_of_the_same_config_past_this_ones_runs_are_kept(finished, tmp_path):
    """Runs past ``runs`` of the same config are not another config's: `--runs 1` after `--runs 2` resumes run 0
    and keeps run 1 for a later `--runs 2` to resume."""
    out = _copy(finished, tmp_path)
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=1, study={**STUDY, "resimulation_reference": True})
    res = run_study(sc, cfg, out_dir=out)
    assert res.resumed == 1 and (out / "runs" / "run-001.json").is_file() and (out / "panels" / "run-001.npz").is_file()


def test_a_run_of_another_config_removes_only_its_own_files(finished, tmp_path):
    """A record of another config that lists a file of another run (run 0's panel, in run 1's files_sha256, sealed
    with a fixed-up checksum) takes only its own files with it: run 0 of this config is resumed, its panel kept."""
    from aumann.studies.rundir import seal

    out = _copy(finished, tmp_path)
    rec = json.loads((out / "runs" / "run-001.json").read_text())
    panel0 = json.loads((out / "runs" / "run-000.json").read_text())["files_sha256"]["panels/run-000.npz"]
    rec.update(digest="0" * 16, files_sha256={**rec["files_sha256"], "panels/run-000.npz": panel0})
    (out / "runs" / "run-001.json").write_text(json.dumps(seal(rec)))
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=1, study={**STUDY, "resimulation_reference": True})
    res = run_study(sc, cfg, out_dir=out)
    assert res.resumed == 1 and (out / "panels" / "run-000.npz").is_file()
    assert _files(out, "runs") == ["runs/run-000.json", "runs/run-000.npz"] and _files(out, "panels") == [
        "panels/run-000.npz"]


def test_a_changed_file_of_the_earlier_configs_run_is_refused_and_nothing_is_removed(finished, tmp_path):
    out = _copy(finished, tmp_path)
    (out / "panels" / "run-001.npz").write_bytes(b"edited since")  # not the file run 1's record vouches for
    before = _files(out, "runs", "panels", "attributions", "timings")
    sc, other = tiny_config("social-llm", agents=6, steps=4, runs=1, seed=99, study=STUDY)
    with pytest.raises(OutputError, match=r"panels/run-001\.npz.*is not the file an earlier aumann run recorded"):
        run_study(sc, other, out_dir=out)
    assert _files(out, "runs", "panels", "attributions", "timings") == before


def test_report_refuses_a_run_that_an_llm_cap_stopped(finished, tmp_path):
    out = _copy(finished, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    # what `aumann run` writes when --max-calls stops it (aumann.cli.llm_usage.record_usage): no report_kind
    stopped = {k: manifest[k] for k in ("command", "created", "config")}
    (out / "manifest.json").write_text(json.dumps({**stopped, "status": "stopped",
                                                   "stopped_because": "max_calls=25 reached"}))
    with pytest.raises(ReportError, match=r"stopped before it finished.*max_calls=25"):
        render_report(out, interactive=False, plots=False)


def test_a_rerun_with_other_options_leaves_no_table_figure_or_page_of_the_earlier_run(finished, tmp_path):
    out = _copy(finished, tmp_path)
    earlier = ["resimulation_agreement.csv", "resimulation_agreement.md", "macro_curve.png",
               "attribution_heatmap.png", "deletion_curves.png"]
    assert all((out / name).is_file() for name in earlier)
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2, study=STUDY)  # no re-simulation reference
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run social-llm --no-plots", seconds=0.0, plots=False, interactive=False)
    assert [name for name in earlier if (out / name).exists()] == []
    page = (out / "report.md").read_text()
    assert "was not run" in page and "resimulation_agreement.csv" not in page and ".png" not in page
    render_report(out, interactive=False)  # `aumann report` with figures: drawn inline, no earlier PNG linked
    assert ".png" not in (out / "report.md").read_text()


def test_a_page_that_cannot_be_built_leaves_no_earlier_page_behind(finished, tmp_path, monkeypatch):
    import aumann.studies.pages as pages

    out = _copy(finished, tmp_path)
    assert (out / "report.html").is_file()
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2, study={**STUDY, "resimulation_reference": True})
    res = run_study(sc, cfg, out_dir=out)  # every run resumed

    def broken(*args, **kwargs):
        raise ValueError("page cannot be built")

    monkeypatch.setattr(pages, "build_document", broken)
    files = write_outputs(res, out, command="aumann run social-llm", seconds=0.0, plots=False, interactive=False)
    assert files["html"] is None and not (out / "report.html").exists()
    assert "the report could not be built" in (out / "report.md").read_text()
    assert [f["stage"] for f in files["failures"]] == ["report: pages (report.html, report.md)"]


def test_a_figure_that_fails_leaves_no_earlier_figure_in_its_place(finished, tmp_path, monkeypatch):
    import aumann.studies.figures as figures

    out = _copy(finished, tmp_path)
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2, study={**STUDY, "resimulation_reference": True})
    res = run_study(sc, cfg, out_dir=out)  # every run resumed

    def broken(result, where):
        raise ValueError("figure cannot be drawn")

    monkeypatch.setattr(figures, "FIGURES", ((figures.MACRO_CURVE, broken), *figures.FIGURES[1:]))
    files = write_outputs(res, out, command="aumann run social-llm", seconds=0.0, plots=True, interactive=False)
    assert not (out / "macro_curve.png").exists() and (out / "deletion_curves.png").is_file()
    page = (out / "report.md").read_text()
    assert "macro_curve.png" not in page.replace("figure macro_curve.png skipped", "")
    assert [f["stage"] for f in files["failures"]] == ["report: figure macro_curve.png"]


def test_a_report_stage_interrupted_after_the_manifest_leaves_no_earlier_page(finished, tmp_path, monkeypatch):
    """Ctrl-C while the page of a re-run with another config was being built: the new manifest and tables were
    there, and report.html / report.md were still the earlier run's, showing its numbers for this directory."""
    import aumann.studies.report as report

    out = _copy(finished, tmp_path)
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2, seed=99, study=STUDY)
    res = run_study(sc, cfg, out_dir=out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_pages", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_outputs(res, out, command="aumann run social-llm --seed 99", seconds=0.0, plots=False,
                      interactive=False, config=cfg.model_dump(mode="json"))
    assert json.loads((out / "manifest.json").read_text())["config"]["seed"] == 99
    assert not (out / "report.html").exists() and not (out / "report.md").exists()


def _emptied(d: Path) -> None:
    (d / "faithfulness.csv").write_text("")


def _header_only(d: Path) -> None:
    (d / "faithfulness.csv").write_text((d / "faithfulness.csv").read_text().splitlines()[0] + "\n")


def _a_folder(d: Path) -> None:
    (d / "faithfulness.csv").unlink()
    (d / "faithfulness.csv").mkdir()


def _lists_a_missing_table(d: Path) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(json.dumps({**manifest, "analysis_tables": ["cascade"]}))


@pytest.mark.parametrize("damage", [_emptied, _header_only, _a_folder, _lists_a_missing_table],
                         ids=lambda f: f.__name__.strip("_"))
def test_report_refuses_a_headline_table_without_rows_and_a_listed_table_that_is_missing(finished, tmp_path, damage):
    """Each drew a page with an empty headline table (and cards without τ or AUC), or "cascade.csv is empty", exit 0."""
    out = _copy(finished, tmp_path)
    damage(out)
    with pytest.raises(ReportError, match=r"faithfulness\.csv|cascade\.csv"):
        render_report(out, interactive=False, plots=False)


def _a_number_edited(d: Path) -> None:
    lines = (d / "faithfulness.csv").read_text().splitlines()
    head, row = lines[0].split(","), lines[1].split(",")
    at = head.index("deletion_auc")
    row[at] = "9.999"  # a deletion AUC no run measures (it is at most 1)
    (d / "faithfulness.csv").write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n")


def _a_table_removed(d: Path) -> None:
    (d / "faithfulness_extended.csv").unlink()


def _a_table_replaced(d: Path) -> None:
    (d / "resimulation_agreement.csv").write_text("my,own\n1,2\n")


@pytest.mark.parametrize("damage", [_a_number_edited, _a_table_removed, _a_table_replaced],
                         ids=lambda f: f.__name__.strip("_"))
def test_report_refuses_a_table_that_is_not_the_one_the_run_wrote(finished, tmp_path, damage):
    """aumann report read the tables as they were: a number edited by hand in faithfulness.csv was the page's
    headline (Deletion AUC 9.999, exit 0), and a table removed (or replaced) by hand dropped its section without a
    word. The manifest records each table's SHA-256; one that is not the file the run wrote is refused by name."""
    out = _copy(finished, tmp_path)
    recorded = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    assert {"faithfulness.csv", "faithfulness_extended.csv", "resimulation_agreement.csv"} <= set(recorded)
    render_report(out, interactive=False, plots=False)  # as the run wrote it: the page is drawn
    damage(out)
    with pytest.raises(ReportError, match=r"\.csv' is not the one the run wrote: .*(changed or replaced|missing)"):
        render_report(out, interactive=False, plots=False)


def test_aumann_run_hashes_the_earlier_configs_files_once(finished, tmp_path, monkeypatch):
    """`aumann run` looked for the runs of another config (hashing every file of theirs) to say it removes them, then
    the study looked again and hashed them all a second time: GBs of reading in a MegaScale folder before anything
    was computed. Each is hashed once now, the list passed along; the files still go."""
    import aumann.io.outputs as outputs
    import aumann.studies.rundir as rundir
    from tests.cli_run import invoke_run

    out = _copy(finished, tmp_path)
    theirs = [n for n in _files(out, "runs", "panels", "attributions", "timings")
              if n.split("/")[1].startswith(("run-000", "run-001"))]
    hashed: list[str] = []
    for module in (outputs, rundir):
        real = module.sha256_file

        def counting(path, *a, _real=real, **kw):
            hashed.append(Path(path).resolve().relative_to(out.resolve()).as_posix())
            return _real(path, *a, **kw)

        monkeypatch.setattr(module, "sha256_file", counting)
    cfg = tmp_path / "other.toml"
    cfg.write_text("agents = 6\nsteps = 4\nruns = 1\nseed = 99\n[study]\n"
                   + "".join(f"{k} = {json.dumps(v)}\n" for k, v in STUDY.items()))
    seen: list[str] = []
    real_check = rundir.RunDir.other_config_runs

    def looked(self, digest):
        seen.append(digest)
        return real_check(self, digest)

    monkeypatch.setattr(rundir.RunDir, "other_config_runs", looked)
    assert invoke_run("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots") == 0
    assert len(seen) == 1
    counts = {n: hashed.count(n) for n in theirs if n.endswith(".npz")}  # the arrays, panels and attributions: the
    assert len(counts) >= 8 and counts == {n: 1 for n in counts}, counts  # GBs, hashed once each (were twice)
    assert _files(out, "runs", "timings") == ["runs/run-000.json", "runs/run-000.npz", "timings/run-000.json"]
    assert json.loads((out / "runs" / "run-000.json").read_text())["digest"] not in {
        json.loads((finished / "runs" / f"run-00{r}.json").read_text())["digest"] for r in (0, 1)}


def test_a_file_changed_after_the_check_is_refused_and_nothing_is_removed(finished, tmp_path):
    """The files checked once are confirmed unchanged (size, times, inode) when removed: one replaced after the check
    (a file of yours copied over it) is refused and kept, and nothing is removed; one passed along that is of this
    very config is refused."""
    import os

    from aumann.errors import StudyError
    from aumann.studies.faithfulness import config_digest
    from aumann.studies.rundir import OtherConfigRun, RunDir

    out = _copy(finished, tmp_path)
    sc, other = tiny_config("social-llm", agents=6, steps=4, runs=1, seed=99, study=STUDY)
    digest = config_digest(sc, other, "offline")
    found = RunDir(out).other_config_runs(digest)
    assert [o.name for o in found] == ["run-000", "run-001"]
    before = _files(out, "runs", "panels", "attributions", "timings")
    panel = out / "panels" / "run-001.npz"
    st = panel.stat()
    panel.write_bytes(b"yours, " + panel.read_bytes()[7:])  # the same size
    os.utime(panel, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime: its ctime tells
    with pytest.raises(OutputError, match=r"panels/run-001\.npz.*changed after it was checked as a file of run-001"):
        run_study(sc, other, out_dir=out, other_config=found)
    assert _files(out, "runs", "panels", "attributions", "timings") == before
    with pytest.raises(StudyError, match="other_config holds a run of this very config"):
        run_study(sc, other, out_dir=out, other_config=[OtherConfigRun(0, digest, found[0].files, found[0].checked)])
    assert _files(out, "runs", "panels", "attributions", "timings") == before
