"""A write killed before its rename (SIGKILL, the OOM killer) leaves its temporary file, `.NAME.XXXXXXXX.tmpSUFFIX`,
beside NAME; commands passed over it but never removed it (a 28 MB panel's stayed for ever). A command writing (or
removing) NAME in a folder whose lock it holds now removes the temporary files of NAME that match the atomic write's
exact pattern, are no write of its own in flight and were not modified in the last minutes (another program the lock
does not bind may still be writing one), and says so in one PartialWriteWarning naming each. Nothing else goes: no
file of another name or pattern, no link, no folder, nothing outside a folder the process holds the lock of."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest

from aumann.errors import PartialWriteWarning
from aumann.io import atomic_path, output_lock, remove_stale, write_bytes
from aumann.io import files as io_files

HOUR = 3600


def _old(path: Path, seconds: float = HOUR) -> Path:
    t = time.time() - seconds
    os.utime(path, (t, t))
    return path


def _plant(d: Path, name: str, data: bytes = b"x" * 2000, age: float = HOUR) -> Path:
    p = d / name
    p.write_bytes(data)
    return _old(p, age)


def _names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()}


def test_writing_an_output_under_the_lock_removes_the_partial_writes_of_its_name_only(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    gone = [_plant(out, ".panel.npz.k3j2h1ab.tmp.npz", b"x" * 28_000), _plant(out, ".panel.npz.a_b0c9zz.tmp.npz")]
    kept = {
        ".panel.npz.abcdefgh.tmp.npz.bak",  # not the pattern (a suffix after it)
        ".panel.npz.ABCDEFGH.tmp.npz",  # mkstemp never gives capitals
        ".panel.npz.abcdefg.tmp.npz",  # 7 characters
        ".panel.npz.abcdefgh.tmp.csv",  # another suffix than the name's
        ".other.npz.abcdefgh.tmp.npz",  # another output's (not written now)
        "panel.npz.abcdefgh.tmp.npz",  # no leading dot
        ".notes.txt",
    }
    for name in kept:
        _plant(out, name)
    (out / ".panel.npz.dirdirdi.tmp.npz").mkdir()  # a folder of that name: never removed
    os.symlink(tmp_path / "elsewhere", out / ".panel.npz.linklink.tmp.npz")  # a link: never removed
    kept |= {".panel.npz.dirdirdi.tmp.npz", ".panel.npz.linklink.tmp.npz"}
    with output_lock(out), pytest.warns(PartialWriteWarning) as caught:
        write_bytes(out / "panel.npz", b"new", within=out)
    assert not any(p.exists() for p in gone)
    assert _names(out) == kept | {"panel.npz"}
    (msg,) = [str(w.message) for w in caught]
    assert "removed 2 temporary files" in msg and ".panel.npz.k3j2h1ab.tmp.npz" in msg and "30.0 kB" in msg, msg


def test_a_partial_write_modified_in_the_last_minutes_is_kept_and_said(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    fresh = _plant(out, ".t.csv.abcdefgh.tmp.csv", age=5)  # another program (an older aumann) may still write it
    old = _plant(out, ".t.csv.zyxwvuts.tmp.csv")
    with output_lock(out), pytest.warns(PartialWriteWarning) as caught:
        write_bytes(out / "t.csv", b"a\n", within=out)
    assert fresh.exists() and not old.exists()
    (msg,) = [str(w.message) for w in caught]
    assert "removed 1 temporary file " in msg and "kept 1 modified in the last 10 minutes" in msg
    assert ".t.csv.abcdefgh.tmp.csv, 5 s ago" in msg


def test_without_the_folders_lock_nothing_is_removed(tmp_path) -> None:
    """A write outside a folder this process holds the lock of (a Panel.save from a script, a folder on a file
    system without flock) cannot know no other program writes there: it removes nothing, and says nothing."""
    out = tmp_path / "out"
    out.mkdir()
    left = _plant(out, ".t.csv.abcdefgh.tmp.csv")
    other = tmp_path / "other"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_bytes(out / "t.csv", b"a\n", within=out)
        with output_lock(other):  # the lock of another folder
            write_bytes(out / "t.csv", b"b\n", within=out)
    assert left.exists()


def test_a_folder_inside_the_locked_one_is_swept_too(tmp_path) -> None:
    out = tmp_path / "out"
    (out / "cells" / "mythos").mkdir(parents=True)
    left = _plant(out / "cells" / "mythos", ".RAND__100.json.abcdefgh.tmp.json")
    with output_lock(out), pytest.warns(PartialWriteWarning):
        write_bytes(out / "cells" / "mythos" / "RAND__100.json", b"{}", within=out)
    assert not left.exists()


def test_a_write_of_the_same_name_in_flight_in_this_process_is_never_removed(tmp_path) -> None:
    """Another thread of this process writing the same name: its temporary file is in flight, whatever its age."""
    out = tmp_path / "out"
    out.mkdir()
    with output_lock(out), atomic_path(out / "a.json") as tmp:
        tmp.write_bytes(b"{}")
        _old(tmp)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            write_bytes(out / "a.json", b"[]", within=out)
        assert tmp.exists()
    assert (out / "a.json").read_bytes() == b"{}"  # (the outer write renamed into place last)


def test_removing_an_earlier_output_removes_its_partial_writes_too(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.csv").write_text("a\n")
    left = _plant(out, ".old.csv.abcdefgh.tmp.csv")
    with output_lock(out), pytest.warns(PartialWriteWarning, match="removed 1 temporary file"):
        assert remove_stale(out / "old.csv", within=out)
    assert not left.exists() and not (out / "old.csv").exists()


def test_the_grace_is_read_when_the_write_is_made(tmp_path, monkeypatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    left = _plant(out, ".t.csv.abcdefgh.tmp.csv", age=30)
    monkeypatch.setattr(io_files, "PARTIAL_WRITE_GRACE_S", 10.0)
    with output_lock(out), pytest.warns(PartialWriteWarning):
        write_bytes(out / "t.csv", b"a\n", within=out)
    assert not left.exists()


def test_a_fresh_one_kept_is_said_once_however_often_its_name_is_written(tmp_path) -> None:
    """The manifest is written two or three times by one command: a fresh temporary file of it beside is said once."""
    out = tmp_path / "out"
    out.mkdir()
    _plant(out, ".manifest.json.abcdefgh.tmp.json", age=1)
    with output_lock(out), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            write_bytes(out / "manifest.json", b"{}", within=out)
    assert [type(w.message) for w in caught] == [PartialWriteWarning]
