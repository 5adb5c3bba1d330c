"""``write_npz`` deflates what deflates and stores what does not, with fixed timestamps (same arrays, same
bytes); ``read_npz(rows=...)`` / ``Panel.load_step`` stream one step of a member without loading it."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest

from aumann import npz
from aumann.errors import PanelError
from aumann.io import read_npz, write_npz
from aumann.panel import Panel


def test_incompressible_members_are_stored_and_compressible_ones_deflated(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"phi": rng.normal(size=200_000), "flags": np.repeat([0.0, 1.0], 100_000), "tiny": rng.normal(size=3)}
    path = write_npz(tmp_path / "a.npz", arrays, meta={"k": 1})
    with zipfile.ZipFile(path) as zf:
        kinds = {i.filename: i.compress_type for i in zf.infolist()}
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert kinds["phi.npy"] == zipfile.ZIP_STORED  # random float64: deflate would keep > 85 %
    assert kinds["flags.npy"] == kinds["tiny.npy"] == zipfile.ZIP_DEFLATED
    data, meta = read_npz(path, error=PanelError)
    assert meta == {"k": 1} and all(np.array_equal(data[k], v) for k, v in arrays.items())
    again = write_npz(tmp_path / "b.npz", arrays, meta={"k": 1})
    assert path.read_bytes() == again.read_bytes()
    with zipfile.ZipFile(write_npz(tmp_path / "c.npz", arrays, compressed=False)) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}


@pytest.mark.parametrize("kind", ["random", "smooth"])  # stored and deflated members
def test_load_step_is_that_step_of_the_panel(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(npz, "_CHUNK", 1000)  # stream in many small pieces
    rng = np.random.default_rng(1)
    v = rng.normal(size=(6, 5000, 3)) if kind == "random" else np.tile(np.arange(5000.0)[None, :, None], (6, 1, 3))
    p = Panel(v.astype(np.float64), features=["a", "b", "c"])
    path = p.save(tmp_path / "p.npz")
    full = Panel.load(path)
    for t in range(6):
        step = Panel.load_step(path, t)
        assert list(step) == ["a", "b", "c"]
        for j, f in enumerate("abc"):
            np.testing.assert_array_equal(step[f], full.values[t, :, j])
    with pytest.raises(PanelError, match="has no row 6"):
        Panel.load_step(path, 6)


def test_load_step_of_a_truncated_panel_is_a_panel_error(tmp_path):
    p = Panel(np.random.default_rng(2).normal(size=(4, 3000, 2)), features=["a", "b"])
    path = p.save(tmp_path / "p.npz")
    raw = path.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(PanelError):
        Panel.load_step(cut, 3)
    with pytest.raises(PanelError, match="not an aumann panel"):
        Panel.load_step(write_npz(tmp_path / "x.npz", {"values": np.zeros((2, 3, 1))}, meta={"format": "other"}), 0)
