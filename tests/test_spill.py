"""Spilled arrays (aumann.io.spill): the same bytes, read-only, out of the resident set once dropped, written
byte-identically; and the study's spill of a large run's panel and φ (aumann.studies.stages._spill)."""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import pytest

from aumann import io as aio
from aumann.attribution import AumannShapley, Panel, attribute


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        import os

        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_spill_keeps_bytes_shape_dtype_and_is_read_only(tmp_path, dtype):
    a = (np.random.default_rng(0).standard_normal((3, 1001, 6)) * 100).astype(dtype)
    s = aio.spill(a, tmp_path)
    assert s.shape == a.shape and s.dtype == a.dtype
    assert s.tobytes() == a.tobytes()
    with pytest.raises(ValueError):
        s[0, 0, 0] = 1
    aio.drop_resident(s)
    aio.drop_spilled()
    assert s.tobytes() == a.tobytes()  # dropped pages come back from the file unchanged
    assert list(tmp_path.iterdir()) == []  # the backing file has no name


def test_spill_of_views_and_empty_arrays(tmp_path):
    a = np.arange(60.0).reshape(3, 20)[:, ::2]  # not contiguous
    s = aio.spill(a, tmp_path)
    np.testing.assert_array_equal(s, a)
    assert s.flags.c_contiguous
    e = aio.spill(np.empty((0, 3)), tmp_path)
    assert e.shape == (0, 3)
    aio.drop_resident(np.ones(3))  # not spilled: nothing happens
    aio.drop_resident(s[1])  # a view of a spilled array
    np.testing.assert_array_equal(s, a)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_dropped_pages_leave_the_resident_set(tmp_path):
    a = np.ones(64 * 2**20 // 8)  # 64 MiB
    s = aio.spill(a, tmp_path)
    del a
    before = _rss_bytes()
    assert float(s.sum()) == 64 * 2**20 // 8  # every page read: resident
    read = _rss_bytes()
    aio.drop_spilled()
    after = _rss_bytes()
    assert read - before > 48 * 2**20
    assert read - after > 48 * 2**20


def test_write_npz_of_a_spilled_array_is_byte_identical(tmp_path, monkeypatch):
    monkeypatch.setattr(aio, "SPILL_CHUNK", 4096)  # drop behind the write many times
    rng = np.random.default_rng(1)
    arrays = {"values": rng.standard_normal((4, 5000, 6)).astype(np.float32), "phi": rng.standard_normal((4, 5000)),
              "ones": np.ones((4, 5000), dtype=np.float32)}
    plain = aio.write_npz(tmp_path / "plain.npz", arrays)
    spilled = aio.write_npz(tmp_path / "spilled.npz", {k: aio.spill(v) for k, v in arrays.items()})
    assert hashlib.sha256(plain.read_bytes()).digest() == hashlib.sha256(spilled.read_bytes()).digest()
    back, _ = aio.read_npz(spilled, error=ValueError)
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)


def test_study_spill_keeps_panel_and_attribution(tmp_path):
    from aumann.studies.stages import _spill

    rng = np.random.default_rng(2)
    panel = Panel(rng.standard_normal((3, 50, 2)).astype(np.float32), features=["a", "b"])
    values = panel.values.copy()

    def f(z):
        return (z[..., 0] * z[..., 1]).sum(-1)

    res = attribute(f, panel, method=AumannShapley(steps=8, closed_form=False), baseline=np.zeros((50, 2)))
    out = _spill(panel, res)
    assert aio._mapping_of(panel.values) is not None and aio._mapping_of(out.phi) is not None
    np.testing.assert_array_equal(panel.values, values)
    np.testing.assert_array_equal(out.phi, res.phi)
    np.testing.assert_array_equal(out.delta_v, res.delta_v)
    assert out.efficiency_gap.tobytes() == res.efficiency_gap.tobytes()  # the method's own Σ φ kept
    assert (out._phi_sums is None) == (res._phi_sums is None)
    assert out.method == res.method


@pytest.mark.parametrize("alive", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_living_mean_of_a_spilled_panel_has_the_same_bits(alive, dtype):
    """The step-at-a-time mean of a spilled panel against numpy's mean over every living row (the
    population-mean baseline of the ablations at 10⁶ agents and more)."""
    from aumann.attribution.problem import _living_mean

    rng = np.random.default_rng(3)
    values = (rng.random((7, 20001, 4)) * rng.integers(1, 1000, 4)).astype(dtype)
    mask = rng.random((7, 20001)) > 0.2 if alive else None
    panel = Panel(values, alive=mask)
    want = _living_mean(panel)
    assert not aio.spilled(panel.values)
    panel.values = aio.spill(panel.values)
    assert aio.spilled(panel.values) and aio.spilled(panel.values[2])
    got = _living_mean(panel)
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()


def test_a_study_with_the_panel_and_phi_spilled_gives_the_same_run(tmp_path, monkeypatch):
    """A MegaScale run with the large-run spill forced on (LARGE_N lowered) against the same run in memory:
    the same record (but wall-clock seconds), the same arrays and the same written files, byte for byte."""
    import json

    from aumann import scenarios
    from aumann.studies import stages
    from aumann.studies.faithfulness import run_study

    sc = scenarios.get("megascale-social")
    cfg = sc.load_config(agents=600, steps=6, study={"permutations": 40, "random_orderings": 2, "path_orders": 2},
                         fidelity_agents=0, llm_ablation=False, tier_panel_draws=2, cascade_permutations=40)
    plain = run_study(sc, cfg, out_dir=tmp_path / "plain")
    calls = []
    real = stages._spill

    def counted(panel, res):
        calls.append(panel.shape)
        return real(panel, res)

    monkeypatch.setattr(stages, "LARGE_N", 1)
    monkeypatch.setattr(stages, "_spill", counted)
    spilled_run = run_study(sc, cfg, out_dir=tmp_path / "spilled")
    assert calls == [(6, 600, 6)]
    assert aio.spilled(spilled_run.panels[0].values) and aio.spilled(spilled_run.arrays[0]["phi_all"])

    def strip(obj):
        if isinstance(obj, dict):
            return {k: strip(v) for k, v in obj.items() if k not in ("seconds", "timings", "checksum")}
        if isinstance(obj, list):
            return [strip(v) for v in obj]
        return obj

    assert json.dumps(strip(plain.records), sort_keys=True, default=str) == \
        json.dumps(strip(spilled_run.records), sort_keys=True, default=str)
    for k, v in plain.arrays[0].items():
        assert np.asarray(v).tobytes() == np.asarray(spilled_run.arrays[0][k]).tobytes(), k
    for name in ("panels/run-000.npz", "runs/run-000.npz", "attributions/run-000-aumann_shapley.npz"):
        assert (tmp_path / "plain" / name).read_bytes() == (tmp_path / "spilled" / name).read_bytes(), name


def test_a_spill_without_room_keeps_the_run_in_memory(monkeypatch):
    from aumann.errors import AumannWarning
    from aumann.studies import stages

    panel = Panel(np.ones((2, 30, 2), dtype=np.float32))
    res = attribute(lambda z: z.sum((-1, -2)), panel, method=AumannShapley(steps=4, closed_form=False),
                    baseline=np.zeros((30, 2)))

    def full(arr, directory=None):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(aio, "spill", full)
    with pytest.warns(AumannWarning, match="could not be spilled"):
        out = stages._spill(panel, res)
    assert out is res and not aio.spilled(panel.values)
