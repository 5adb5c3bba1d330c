"""A command that fails leaves no empty ``--out`` it made behind (``aumann bluesky build-panel <missing file> --out X``
left an empty ``X``), and never removes a folder that was there before it, nor one it wrote a file in."""

from __future__ import annotations

import pytest

from aumann.cli import main
from aumann.io import ensure_output_dir, forget_created_output_dirs, remove_unused_output_dirs


@pytest.mark.parametrize("argv", [
    ["bluesky", "build-panel", "{tmp}/missing.jsonl", "--out", "{out}"],
    ["bluesky", "study", "{tmp}/missing-counts", "--out", "{out}"],
    ["attribute", "{tmp}/missing.npz", "--indicator", "mean", "--out", "{out}"],
], ids=["build-panel", "study", "attribute"])
def test_a_failed_command_leaves_no_empty_folder_it_made(tmp_path, capsys, argv):
    out = tmp_path / "new" / "deeper"  # its parent made too: removed as well
    assert main([a.format(tmp=tmp_path, out=out) for a in argv]) == 2
    assert "aumann: error:" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_folder_that_was_there_before_is_kept(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    assert main(["bluesky", "study", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert out.is_dir()
    sub = out / "sub"  # made by the command inside a folder of yours: that one only goes
    assert main(["bluesky", "study", str(tmp_path / "missing"), "--out", str(sub)]) == 2
    assert out.is_dir() and not sub.exists()


def test_a_made_folder_with_a_file_in_it_is_kept_whole(tmp_path):
    forget_created_output_dirs()
    made = ensure_output_dir(tmp_path / "a" / "b")
    ensure_output_dir(made / "runs")  # empty folders inside, as a study's prepare() makes them
    (made / "runs" / "run-000.json").write_text("{}")
    ensure_output_dir(tmp_path / "c" / "d")  # nothing written: removed, with the parent made for it
    (tmp_path / "c" / "d" / "empty").mkdir()
    assert remove_unused_output_dirs() == [tmp_path / "c"]
    assert (made / "runs" / "run-000.json").is_file() and not (tmp_path / "c").exists()
    assert remove_unused_output_dirs() == []  # forgotten once handled


def test_a_made_folder_with_a_link_in_it_is_kept(tmp_path):
    forget_created_output_dirs()
    made = ensure_output_dir(tmp_path / "out")
    (made / "link").symlink_to(tmp_path)
    assert remove_unused_output_dirs() == []
    assert (made / "link").is_symlink()


def test_a_successful_command_keeps_its_folder(tmp_path):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--agents", "10", "--steps", "2", "--static"]) == 0
    assert out.is_dir() and any(out.iterdir())
