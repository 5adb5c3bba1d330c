"""The pages' "max relative" efficiency gap where Δv is 0 or round-off.

``Attribution.relative_efficiency_gap`` divides by ``max(|Δv|, tiny)``: at a step where f did not change (or changed
by round-off only: 64-bit account numbers near 2**53, where float64's spacing is 2), a gap of round-off size read
4.357e+307 in the report's efficiency table. The pages now leave such steps out of the relative gap (shown as "–"
when no step is left) and say how many they left out; the absolute gap still covers them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from aumann.cli import main
from aumann.studies.sections import max_relative_gap, relative_gaps

LEDGER = Path(__file__).resolve().parents[1] / "scenarios" / "ledger" / "scenario.py"


def _att(delta_v, f, f0, gap):
    dv = np.asarray(delta_v, dtype=float)
    return SimpleNamespace(delta_v=dv, f_values=np.asarray(f, dtype=float), f_baseline=np.asarray(f0, dtype=float),
                           relative_efficiency_gap=np.asarray(gap, dtype=float) / np.maximum(np.abs(dv), 2.2e-308))


def test_steps_where_delta_v_is_zero_or_roundoff_have_no_relative_gap():
    att = _att([0.0, 2.0, 1.0, 0.5], [1.0, 2.0**53 + 2, 3.0, 1.5], [1.0, 2.0**53, 2.0, 1.0], [1.0, 1.0, 0.01, 0.1])
    rel = relative_gaps(att)
    assert np.isnan(rel[:2]).all()  # Δv = 0; Δv = 2 beside |f| ≈ 2**53 (round-off)
    np.testing.assert_allclose(rel[2:], [0.01, 0.2])
    assert max_relative_gap(att) == (0.2, 2)


def test_no_step_defined_gives_nan_and_every_step_left_out():
    worst, left_out = max_relative_gap(_att([0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1e-3, 0.0]))
    assert np.isnan(worst) and left_out == 2


def test_the_run_report_shows_no_relative_gap_of_round_off(tmp_path):
    out = tmp_path / "run"
    assert main(["run", f"{LEDGER}:scenario", "--runs", "1", "--steps", "4", "--permutations", "20",
                 "--no-plots", "--no-ablations", "--judge", "off", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    table = md[md.index("Efficiency gap |Σ_i φ_i,t − Δv_t| (quadrature error)"):]
    row = next(line for line in table.splitlines() if line.startswith("| 0 |"))
    assert "e+30" not in row and row.rstrip(" |").endswith("–"), row  # was 4.357e+307
    assert "max relative leaves out 4 step(s) where Δv is 0 or round-off" in md
