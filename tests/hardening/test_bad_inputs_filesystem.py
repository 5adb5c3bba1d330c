"""Class 5 of issue 22, the filesystem: the run directory is confined (no read or write through a symbolic link
that leaves it), and every file a resume reads is covered by a checksum (damage is recomputed and reported)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from aumann import io
from aumann.cli import main
from aumann.errors import PathEscapeError, ReportError


# --------------------------------------------------------------------------- the primitives
def test_confine_refuses_dotdot_and_absolute_paths(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for p in (run / ".." / "x", tmp_path / "x", Path("/etc/passwd"), run / "runs" / ".." / ".." / "y"):
        with pytest.raises(PathEscapeError, match="outside the run directory"):
            io.confine(p, run)


def test_confine_refuses_a_folder_link_that_leaves(tmp_path):
    run, away = tmp_path / "run", tmp_path / "away"
    run.mkdir()
    away.mkdir()
    (run / "runs").symlink_to(away)
    with pytest.raises(PathEscapeError, match="through a symbolic link"):
        io.confine(run / "runs" / "run-000.json", run)
    with pytest.raises(PathEscapeError):
        io.write_json(run / "runs" / "run-000.json", {"a": 1}, within=run)
    assert list(away.iterdir()) == []  # nothing landed outside


def test_links_that_stay_inside_are_followed(tmp_path):
    run = tmp_path / "run"
    (run / "real").mkdir(parents=True)
    (run / "alias").symlink_to(run / "real")
    io.write_json(run / "alias" / "x.json", {"a": 1}, within=run)
    assert io.read_json(run / "alias" / "x.json", within=run) == {"a": 1}


def test_reading_a_file_link_that_leaves_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text('{"k": "v"}')
    (run / "manifest.json").symlink_to(secret)
    with pytest.raises(PathEscapeError):
        io.read_json(run / "manifest.json", within=run)
    with pytest.raises(PathEscapeError):
        io.sha256_file(run / "manifest.json", within=run)


def test_an_atomic_write_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (run / "report.md").symlink_to(victim)
    io.write_text(run / "report.md", "new", within=run)
    assert victim.read_text() == "keep me" and not (run / "report.md").is_symlink()
    assert (run / "report.md").read_text() == "new"


def test_npz_reads_are_confined(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    io.write_npz(tmp_path / "a.npz", {"x": np.zeros(2)})
    (run / "a.npz").symlink_to(tmp_path / "a.npz")
    with pytest.raises(PathEscapeError):
        io.read_npz(run / "a.npz", error=ValueError, within=run)


def test_file_digests_and_their_check(tmp_path):
    io.write_text(tmp_path / "a", "x")
    d = io.file_digests(tmp_path, ["a"])
    assert io.check_digests(tmp_path, d) == []
    (tmp_path / "a").write_text("y")
    assert io.check_digests(tmp_path, d)[0][0] == "a"
    (tmp_path / "a").unlink()
    assert "missing" in io.check_digests(tmp_path, d)[0][1]
    assert io.check_digests(tmp_path, {"a": 3})[0][1] == "the stored checksums are malformed"


# --------------------------------------------------------------------------- `aumann run` with links in --out
@pytest.mark.parametrize("folder", ["runs", "panels", "attributions", "timings"])
def test_a_symlinked_folder_in_out_stops_the_run_before_anything_lands_outside(tmp_path, folder, capsys):
    out, away = tmp_path / "out", tmp_path / "away"
    out.mkdir()
    away.mkdir()
    (out / folder).symlink_to(away)
    rc = main(["run", "social-llm", "--agents", "6", "--steps", "4", "--runs", "1", "--permutations", "8",
               "--no-ablations", "--no-plots", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "PathEscapeError" in err and folder in err
    assert list(away.iterdir()) == []


def test_a_symlinked_cells_folder_stops_the_crossscale_study(tmp_path):
    from aumann.data.bluesky.synth import SynthConfig, generate
    from aumann.studies.crossscale import CrossScaleConfig, run_crossscale

    counts = generate(SynthConfig(users=300, days=2, seed=1)).save(tmp_path / "counts")
    out, away = tmp_path / "out", tmp_path / "away"
    out.mkdir()
    away.mkdir()
    (out / "cells").symlink_to(away)
    with pytest.raises(PathEscapeError):
        run_crossscale(counts, out, CrossScaleConfig(sizes=[50], seeds=[0]))
    assert list(away.iterdir()) == []


# --------------------------------------------------------------------------- aumann report
@pytest.mark.parametrize("target", ["attributions/run-000-aumann_shapley.npz", "runs/run-000.json",
                                    "faithfulness.csv", "panels/run-000.npz", "runs"])
def test_the_report_never_reads_through_a_link_that_leaves(run_copy, tmp_path, target):
    from aumann.studies import render_report

    _, _, d = run_copy
    other = tmp_path / "other"
    shutil.copytree(d, other)
    (d / target).unlink() if not (d / target).is_dir() else shutil.rmtree(d / target)
    os.symlink(other / target, d / target)
    with pytest.raises(ReportError, match="symbolic link"):
        render_report(d, interactive=False)


# --------------------------------------------------------------------------- resume: every file it reads is covered
def _swap_attribution(d: Path) -> None:
    shutil.copy(d / "attributions" / "run-001-aumann_shapley.npz", d / "attributions" / "run-000-aumann_shapley.npz")


def _truncate_panel(d: Path) -> None:
    p = d / "panels" / "run-000.npz"
    p.write_bytes(p.read_bytes()[:100])


def _delete_panel(d: Path) -> None:
    (d / "panels" / "run-000.npz").unlink()


def _edit_timing(d: Path) -> None:
    p = d / "timings" / "run-000.json"
    p.write_text(p.read_text().replace('"run": 0', '"run": 0, "x": 1'))


def _link_attribution_out(d: Path) -> None:
    away = d.parent / "away.npz"
    shutil.copy(d / "attributions" / "run-000-sampled_shapley.npz", away)
    (d / "attributions" / "run-000-sampled_shapley.npz").unlink()
    (d / "attributions" / "run-000-sampled_shapley.npz").symlink_to(away)


def _old_record_without_file_checksums(d: Path) -> None:
    import json

    from aumann.io import record_checksum

    p = d / "runs" / "run-000.json"
    rec = json.loads(p.read_text())
    rec.pop("files_sha256")
    rec.pop("checksum")
    rec["checksum"] = record_checksum(rec)
    p.write_text(json.dumps(rec))


DAMAGE = {"swapped_in_valid_attribution": (_swap_attribution, "attributions/run-000-aumann_shapley.npz"),
          "truncated_panel": (_truncate_panel, "panels/run-000.npz"),
          "deleted_panel": (_delete_panel, "panels/run-000.npz"),
          "edited_timing": (_edit_timing, "timings/run-000.json"),
          "attribution_linked_outside": (_link_attribution_out, "attributions/run-000-sampled_shapley.npz"),
          "record_without_file_checksums": (_old_record_without_file_checksums, "older aumann")}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_resume_recomputes_every_damaged_file_and_reports_it(run_copy, case):
    from aumann.studies import render_report, run_study

    sc, cfg, d = run_copy
    damage, needle = DAMAGE[case]
    damage(d)
    again = run_study(sc, cfg, out_dir=d)
    assert (again.resumed, again.computed) == (1, 1)
    assert [f["run"] for f in again.failed_checks] == [0] and needle in again.failed_checks[0]["reason"]
    assert not (d / "attributions" / "run-000-sampled_shapley.npz").is_symlink()
    render_report(d, interactive=False)  # never fatal: the report reads the recomputed files
    third = run_study(sc, cfg, out_dir=d)
    assert (third.resumed, third.computed, third.failed_checks) == (2, 0, [])


def test_cli_resume_of_a_truncated_panel_exits_0_and_says_so(run_copy, capsys):
    _, _, d = run_copy
    _truncate_panel(d)
    rc = main(["run", "social-llm", "--agents", "6", "--steps", "4", "--runs", "2", "--set",
               "study.permutations=40", "--set", "study.random_orderings=3", "--set", "study.path_orders=3",
               "--set", "study.quadrature_steps=16", "--no-ablations", "--no-plots", "--out", str(d)])
    err = capsys.readouterr().err
    assert rc == 0 and "failed verification" in err and "panels/run-000.npz" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.timeout(60)
def test_a_system_prompt_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    """--system-prompt @FIFO opened the pipe and waited for a writer for ever (every other file flag refuses a file
    that is not regular: --config, --spec, --prices, the study config, ...)."""
    os.mkfifo(tmp_path / "prompt")
    rc = main(["run", "social-llm", "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
               "--system-prompt", f"@{tmp_path / 'prompt'}", "--out", str(tmp_path / "run")])
    assert rc == 2
    assert "is not a regular file (a pipe, socket or device)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
