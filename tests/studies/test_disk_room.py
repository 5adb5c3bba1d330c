"""A large study warns up front when its disks look too small (RunDir.room_warning), instead of failing on a full
disk after the hours it took to compute the run."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections import namedtuple

import pytest

from aumann.errors import AumannWarning
from aumann.studies import faithfulness
from aumann.studies.rundir import RUN_BYTES_PER_AGENT_STEP, SPILL_BYTES_PER_AGENT_STEP, RunDir
from tests.tiny import tiny_config

_Usage = namedtuple("_Usage", "total used free")


def _free(monkeypatch, free: dict[str, int] | int) -> None:
    """Make shutil.disk_usage report ``free`` bytes (one number, or by path)."""
    def usage(path):
        got = free if isinstance(free, int) else free[str(path)]
        return _Usage(10**13, 10**13 - got, got)

    monkeypatch.setattr(shutil, "disk_usage", usage)


def test_enough_room_says_nothing(tmp_path, monkeypatch):
    _free(monkeypatch, 10**12)
    assert RunDir(tmp_path).room_warning(10_000_000, 30, 1) is None


def test_a_short_disk_names_the_folder_the_need_and_the_free_space(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the spill lands on the same disk: both count there
    need = (RUN_BYTES_PER_AGENT_STEP + SPILL_BYTES_PER_AGENT_STEP) * 10_000_000 * 30
    _free(monkeypatch, need - 1)
    msg = RunDir(tmp_path).room_warning(10_000_000, 30, 1)
    assert msg is not None
    assert str(tmp_path) in msg and f"{(need - 1) / 1e9:.1f} GB free" in msg and f"{need / 1e9:.1f} GB" in msg
    assert "10,000,000 agents × 30 steps" in msg
    _free(monkeypatch, need)
    assert RunDir(tmp_path).room_warning(10_000_000, 30, 1) is None


def test_the_temporary_directory_on_another_disk_is_checked_for_the_spill_alone(tmp_path, monkeypatch):
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    real_stat = type(out).stat

    def stat(self, *a, **k):  # the two folders on two devices
        st = real_stat(self, *a, **k)
        if str(self) == str(tmp):
            fields = list(st)
            fields[2] = st.st_dev + 1
            return type(st)(fields)
        return st

    monkeypatch.setattr(type(out), "stat", stat)
    agents, steps, runs = 1_000_000, 30, 3
    need_out, need_tmp = RUN_BYTES_PER_AGENT_STEP * agents * steps * runs, SPILL_BYTES_PER_AGENT_STEP * agents * steps
    _free(monkeypatch, {str(out): need_out, str(tmp): need_tmp - 1})
    msg = RunDir(out).room_warning(agents, steps, runs)
    assert msg is not None and str(tmp) in msg and str(out) not in msg
    _free(monkeypatch, {str(out): need_out - 1, str(tmp): need_tmp})
    msg = RunDir(out).room_warning(agents, steps, runs)
    assert msg is not None and str(out) in msg and str(tmp) not in msg


def test_unreadable_free_space_is_no_warning(tmp_path, monkeypatch):
    def broken(path):
        raise OSError("no statvfs here")

    monkeypatch.setattr(shutil, "disk_usage", broken)
    assert RunDir(tmp_path).room_warning(10_000_000, 30, 1) is None


def test_a_large_study_warns_before_its_first_run_and_a_small_one_never_looks(tmp_path, monkeypatch):
    sc, cfg = tiny_config("social-llm", agents=8, steps=4, runs=1)
    _free(monkeypatch, 1)
    seen: list[str] = []

    class Stop(Exception):
        pass

    def first_run(*a, **k):  # the warning must come before any run is computed
        seen.append("run")
        raise Stop

    monkeypatch.setattr(faithfulness, "compute_run", first_run)
    monkeypatch.setattr(faithfulness, "LARGE_N", 8)  # 8 agents count as large here
    with pytest.warns(AumannWarning, match="the disk may be too small for this study") as caught, \
            pytest.raises(Stop):
        faithfulness.run_study(sc, cfg, out_dir=tmp_path / "big")
    assert seen == ["run"] and len(caught) == 1
    monkeypatch.setattr(faithfulness, "LARGE_N", 9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AumannWarning)
        with pytest.raises(Stop):
            faithfulness.run_study(sc, cfg, out_dir=tmp_path / "small")
