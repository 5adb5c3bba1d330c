"""Real and SYNTHETIC raw counts never mix in one folder: `aumann bluesky synth` run where `build-panel` wrote left
the real capture's `panels/` and `ingest_report.json` beside the synthetic counts (and synth's manifest recorded no
outputs), and `build-panel` run where synth wrote refused synth's own files one by one, then left its
`calibration.json` ("SYNTHETIC") beside the real counts. Each command now removes the other's recorded outputs and
refuses a file of an output's name that aumann did not record (a user's own), before writing anything."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from aumann.cli import main

CAPTURE = Path(__file__).parent / "wheel_capture"
SYNTH_FILES = {"users.parquet", "daily.parquet", "follows.parquet", "counts.json", "calibration.json"}
TOPICS = ("earth-day-climate", "mythos", "the-masters", "trump-tariffs", "wrestlemania")
BUILD_FILES = {"users.parquet", "daily.parquet", "follows.parquet", "counts.json", "ingest_report.json",
               *(f"panels/{s}/{t}.npz" for s in ("window", "daily") for t in TOPICS)}


def _build(out: Path, rc: int = 0) -> None:
    assert main(["bluesky", "build-panel", *map(str, sorted(CAPTURE.glob("*.jsonl"))), "--out", str(out),
                 "--quiet"]) == rc


def _synth(out: Path, rc: int = 0) -> None:
    assert main(["bluesky", "synth", "--users", "300", "--days", "2", "--seed", "1", "--out", str(out)]) == rc


def _refused(capsys, path: Path) -> None:
    """The command said, on one line, that it refused the file at ``path`` (a typed OutputError naming it)."""
    err = capsys.readouterr().err
    assert f"aumann: error: OutputError: {str(path)!r} is in the output folder but is not the file" in err, err


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _study_says_synthetic(counts: Path, out: Path) -> bool:
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    return summary["synthetic"]


def _digests(root: Path) -> dict[str, str]:
    return {n: hashlib.sha256((root / n).read_bytes()).hexdigest() for n in _files(root)}


def test_synth_where_build_panel_wrote_leaves_only_the_synthetic_population(tmp_path) -> None:
    out = tmp_path / "counts"
    _build(out)
    (out / "notes.txt").write_text("mine")
    _synth(out)
    assert _files(out) == SYNTH_FILES | {"manifest.json", "notes.txt"}  # no real panels, no ingest report
    assert not (out / "panels").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["synthetic"] is True and manifest["outputs_complete"] is True
    assert manifest["outputs_sha256"] == {n: hashlib.sha256((out / n).read_bytes()).hexdigest()
                                          for n in sorted(SYNTH_FILES)}
    assert _study_says_synthetic(out, tmp_path / "study") is True


def test_build_panel_where_synth_wrote_leaves_only_the_real_counts(tmp_path) -> None:
    out = tmp_path / "counts"
    _synth(out)
    (out / "notes.txt").write_text("mine")
    _build(out)  # before: refused synth's users.parquet as "not the file an earlier aumann run recorded"
    assert _files(out) == BUILD_FILES | {"manifest.json", "notes.txt"}  # no SYNTHETIC calibration.json
    assert json.loads((out / "manifest.json").read_text())["synthetic"] is False
    assert _study_says_synthetic(out, tmp_path / "study") is False


def test_build_panel_where_an_older_synth_wrote_removes_its_calibration(tmp_path) -> None:
    """An older aumann's synth manifest recorded no outputs: the files synth always writes are taken as its own."""
    out = tmp_path / "counts"
    _synth(out)
    manifest = json.loads((out / "manifest.json").read_text())
    for key in ("outputs_sha256", "outputs_complete", "outputs"):
        del manifest[key]
    (out / "manifest.json").write_text(json.dumps(manifest))
    _build(out)
    assert _files(out) == BUILD_FILES | {"manifest.json"}


@pytest.mark.parametrize("name", ["calibration.json", "ingest_report.json", "panels/window/mythos.npz"])
def test_synth_refuses_a_users_own_file_of_an_outputs_name_and_writes_nothing(tmp_path, capsys, name) -> None:
    """In a build-panel folder: calibration.json (synth would replace it), ingest_report.json or a panel changed
    since the build (synth would remove it) is a file of the user's own: refused by name, every file kept."""
    out = tmp_path / "counts"
    _build(out)
    (out / name).write_text("my own notes")
    before = _digests(out)
    capsys.readouterr()
    _synth(out, rc=2)
    _refused(capsys, out / name)
    assert _digests(out) == before


@pytest.mark.parametrize("name", ["calibration.json", "ingest_report.json", "panels/daily/mythos.npz"])
def test_build_panel_refuses_a_users_own_file_of_an_outputs_name_and_writes_nothing(tmp_path, capsys, name) -> None:
    """In a synth folder: a file with the name of an output of either command that aumann did not record."""
    out = tmp_path / "counts"
    _synth(out)
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text("my own notes")
    before = _digests(out)
    capsys.readouterr()
    _build(out, rc=2)
    _refused(capsys, out / name)
    assert _digests(out) == before


def test_synth_into_a_fresh_folder_keeps_a_users_own_counts_table(tmp_path, capsys) -> None:
    """synth checked nothing: it overwrote a users.parquet of the user's own without a word."""
    out = tmp_path / "counts"
    out.mkdir()
    (out / "users.parquet").write_text("mine")
    _synth(out, rc=2)
    _refused(capsys, out / "users.parquet")
    assert _files(out) == {"users.parquet"} and (out / "users.parquet").read_text() == "mine"


def test_synth_again_replaces_its_own_outputs(tmp_path) -> None:
    out = tmp_path / "counts"
    _synth(out)
    assert main(["bluesky", "synth", "--users", "400", "--days", "2", "--seed", "2", "--out", str(out)]) == 0
    assert _files(out) == SYNTH_FILES | {"manifest.json"}
    assert json.loads((out / "calibration.json").read_text())["users"] == 400


def _as_older_build(out: Path) -> None:
    """The manifest an aumann before `outputs_complete` (8c0794c) wrote: its outputs by name, no digests."""
    manifest = json.loads((out / "manifest.json").read_text())
    for key in ("outputs_sha256", "outputs_complete", "ingest"):
        manifest.pop(key, None)
    assert manifest["outputs"][0] == "."  # (that aumann listed the raw counts as the folder itself)
    (out / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(("command", "name"), [("build", "calibration.json"), ("build", "identifiers.parquet"),
                                               ("synth", "calibration.json")])
def test_a_folder_an_older_build_panel_wrote_keeps_a_users_own_file(tmp_path, capsys, command, name) -> None:
    """A build-panel manifest without outputs_complete vouched for every file of an output's name: the next
    build-panel removed a calibration.json (or identifiers.parquet it had not exported) the user put there, and
    synth overwrote the calibration.json, without a word. Only what that build's manifest lists is its own now."""
    out = tmp_path / "counts"
    _build(out)
    _as_older_build(out)
    (out / name).write_text("my own notes")
    before = _digests(out)
    capsys.readouterr()
    (_build if command == "build" else _synth)(out, rc=2)
    _refused(capsys, out / name)
    assert _digests(out) == before


def test_a_folder_an_older_build_panel_wrote_is_still_replaced_by_either_command(tmp_path) -> None:
    out = tmp_path / "counts"
    _build(out)
    _as_older_build(out)
    _build(out)
    assert _files(out) == BUILD_FILES | {"manifest.json"}
    _as_older_build(out)
    _synth(out)  # its panels and ingest report, listed in that manifest, are removed
    assert _files(out) == SYNTH_FILES | {"manifest.json"}


def test_a_panel_write_killed_before_its_rename_does_not_stop_the_next_command(tmp_path, capsys) -> None:
    """A build-panel killed while it wrote a panel leaves the atomic write's temporary file in panels/<scale>/
    (`.mythos.npz.XXXXXXXX.tmp.npz`); the next build-panel and synth refused it by name as "a file of your own"
    (move or rename it), though no one but aumann's own interrupted write made it. It is passed over now, and the
    next command that writes (build-panel) or removes (synth) that panel removes it with it once it is older than the
    grace (a fresh one may be another program's write in progress: kept, and said)."""
    out = tmp_path / "counts"
    _build(out)
    partial = out / "panels" / "window" / ".mythos.npz.k3j2h1ab.tmp.npz"
    partial.write_bytes((out / "panels" / "window" / "mythos.npz").read_bytes()[:1000])
    _build(out)
    assert partial.stat().st_size == 1000  # seconds old: kept
    assert "kept 1 modified in the last 10 minutes" in capsys.readouterr().err
    _synth(out)
    assert _files(out) == SYNTH_FILES | {"manifest.json", "panels/window/.mythos.npz.k3j2h1ab.tmp.npz"}
    _build(out)
    t = time.time() - 3600
    os.utime(partial, (t, t))
    capsys.readouterr()
    _synth(out)  # the panel it removes goes with what its killed write left, and the panel folders with them
    assert _files(out) == SYNTH_FILES | {"manifest.json"} and not (out / "panels").exists()
    assert "removed 1 temporary file left by a write of it killed before the rename (.mythos.npz.k3j2h1ab" \
        in capsys.readouterr().err
