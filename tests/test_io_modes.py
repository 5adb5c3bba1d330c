"""Atomic writes leave files with the ordinary permissions (not mkstemp's 0600), so a report can be shared."""

from __future__ import annotations

import os
import stat

from aumann.io import write_text


def test_atomically_written_files_get_the_umask_permissions(tmp_path):
    mask = os.umask(0o022)
    os.umask(mask)
    path = write_text(tmp_path / "report.html", "<p>x</p>")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
