"""What the page of an ``aumann run`` directory is built from: :class:`StudyPage`, the run directory read once
(run records with their seconds, run arrays, attributions, features at t*, ``faithfulness.csv``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import ReportError
from aumann.studies.charts import Charts
from aumann.studies.rundir import (
    FAITHFULNESS,
    RunDir,
    offline_policy_record,
    offline_policy_text,
    verify_run,
    with_timing,
)
from aumann.studies.sections import (
    _offline_policy_decided,
    load_arrays,
    load_attribution,
    load_panel_alive,
    load_panel_step,
    read_csv,
    read_json,
)


def _verified(rd: RunDir, r: int, rec: dict[str, Any]) -> None:
    """Refuse run ``r`` unless its record, arrays and every file it lists in ``files_sha256`` (panel,
    attributions, timing) verify -- the same check resume makes (:func:`~aumann.studies.rundir.verify_run`):
    a valid attribution of another run copied or linked over this run's would otherwise be drawn as this run's.
    Files this process wrote and that are unchanged since are not read again (``reuse``: a copy, a link or an
    edit changes their signature); ``aumann report`` in a new process reads them all."""
    status, reason, _, _ = verify_run(rd.record(r), str(rec.get("digest", "")), reuse=True)
    if status != "done":
        raise ReportError(f"run {r} of {str(rd.root)!r} ({rd.record(r).name}, {rd.arrays(r).name}) does not verify: "
                          f"{reason}; run the same `aumann run` command with this --out again to recompute it")


def _same_config(rd: RunDir, manifest: dict[str, Any], recs: list[dict[str, Any]], start: int = 0) -> None:
    """Refuse runs computed under another config than the manifest's (its ``config_digest``; a manifest written
    before it was recorded: than run 0's). Each record verifies on its own, so an ``aumann run`` with another config
    or seed into this directory that was interrupted leaves runs of both configs beside the earlier invocation's
    manifest and tables (and none of the earlier config's past them: that run removed them first): the page would
    show them as one study. ``start``: the runs before it were checked already."""
    expected = manifest.get("config_digest") or (recs[0].get("digest") if recs else None)
    for r, rec in enumerate(recs[start:], start):
        if rec.get("digest") != expected:
            raise ReportError(
                f"run {r} of {str(rd.root)!r} ({rd.record(r).name}) was computed under another config (digest "
                f"{rec.get('digest')}) than {'manifest.json records' if manifest.get('config_digest') else 'run 0'} "
                f"({expected}): a later `aumann run` with another config or seed into this directory did not finish; "
                "run that command again to finish it, or the original command to recompute these runs")


@dataclass
class StudyPage:
    """Everything the page is built from, read once from the run directory ``d``."""

    d: RunDir
    manifest: dict[str, Any]
    charts: Charts
    top: int
    plots: bool
    recs: list[dict[str, Any]]  # run records, seconds back in place
    arrs: list[dict[str, np.ndarray]]  # run arrays
    ats: list[Any]  # Aumann–Shapley attributions (every step), per run
    refs: list[Any]  # sampled-Shapley attributions at t* (None where missing)
    features_t_star: list[dict[str, np.ndarray] | None]  # each run's features at its t*, by name (None: no panel)
    faith: list[dict[str, Any]]  # faithfulness.csv
    # each run's alive mask at its t*, (N,) (None: no panel, or one without a mask: every agent alive)
    alive_t_star: list[np.ndarray | None] = field(default_factory=list)

    @classmethod
    def load(cls, d: Path, manifest: dict[str, Any], charts: Charts, *, top: int, plots: bool) -> StudyPage:
        from aumann.records import RunRecord

        rd = RunDir(d)
        # a registered backend whose factory returned None: the offline policy decided, and what was written before
        # that was known says "LLM (nothing)" (record, manifest, faithfulness.csv); shown as "offline policy", read
        # only (the files, their checksums and the digests are left as they are)
        backend = str(manifest.get("backend") or "")
        offline = _offline_policy_decided(manifest) and backend not in ("", "offline")
        if offline and "policy" in manifest:
            manifest = {**manifest, "policy": offline_policy_text(manifest["policy"], backend)}
        config = manifest.get("config") or {}
        n_runs = int(manifest.get("runs") or config.get("runs") or len(rd.finished_records()))
        recs, arrs = [], []
        for r in range(n_runs):
            rec = read_json(rd.record(r), "run record", schema=RunRecord)  # finite, ranged, typed (t_star ≥ 0)
            _verified(rd, r, rec)
            if not rd.arrays(r).is_file():
                raise ReportError(f"run arrays {str(rd.arrays(r))!r} are missing: not a finished run directory")
            # φ over every step comes from the Aumann–Shapley attribution file (ats): not read twice (240 MB at 10⁶)
            arrs.append(load_arrays(rd.arrays(r), "run arrays", skip=("phi_all",)))
            if not int(rec["t_star"]) < len(arrs[-1].get("f_values", ())):
                raise ReportError(f"run record {str(rd.record(r))!r}: t_star = {rec['t_star']} is not a step of the "
                                  "run (damaged)")
            if offline:  # written before such a run was known to be the offline policy's: "LLM (nothing)"
                rec = offline_policy_record(rec, backend)
            recs.append(with_timing(rec, rd.read_timing(r)))  # the seconds live beside the record
            _same_config(rd, manifest, recs, start=r)  # before the next run is read: it may be gone (removed as stale)
        refs = [load_attribution(p) if (p := rd.attribution(r, reference_method(rec))).is_file() else None
                for r, rec in enumerate(recs)]
        # only the step the page shows (a 10⁶-agent panel is 720 MB; its step t* is 24 MB)
        feats = [load_panel_step(p, int(rec["t_star"])) if (p := rd.panel(r)).is_file() else None
                 for r, rec in enumerate(recs)]
        faith = read_csv(rd.table(FAITHFULNESS))
        if not faith or any("method" not in row for row in faith):  # aumann writes a row per method, always
            raise ReportError(f"table {str(rd.table(FAITHFULNESS))!r} holds no rows of methods (emptied, replaced or "
                              "damaged); run the same `aumann run` command with this --out again to rewrite it")
        if offline:  # (MegaScale's policy column said "LLM nothing")
            faith = [{**row, "policy": offline_policy_text(row["policy"], backend)} if "policy" in row else row
                     for row in faith]
        for name in manifest.get("analysis_tables") or []:  # written whenever listed: one missing is damage
            if not rd.table(name).is_file():
                raise ReportError(f"table {str(rd.table(name))!r}, which manifest.json lists, is missing or not a "
                                  "file; run the same `aumann run` command with this --out again to rewrite it")
        ats = [load_attribution(rd.attribution(r, "aumann_shapley")) for r in range(n_runs)]
        alive = [_alive_at(rd.panel(r), att.phi.shape, int(rec["t_star"]))
                 for r, (att, rec) in enumerate(zip(ats, recs, strict=True))]
        return cls(d=rd, manifest=manifest, charts=charts, top=top, plots=plots, recs=recs, arrs=arrs, ats=ats,
                   refs=refs, features_t_star=feats, faith=faith, alive_t_star=alive)

    @property
    def config(self) -> dict[str, Any]:
        return self.manifest.get("config") or {}

    @property
    def synthetic(self) -> bool:
        return bool(self.manifest.get("synthetic", False))

    @property
    def reference(self) -> dict[str, Any]:
        """The reference estimator of run 0 (``rec["reference"]``: method, game, permutations, median_stderr);
        run directories written before it was recorded had plain sampling as the reference."""
        rec = self.recs[0] if self.recs else {}
        return dict(rec.get("reference") or {"method": reference_method(rec)})

    @property
    def methods(self) -> list[str]:
        return [str(r["method"]) for r in self.faith if "method" in r]

    def figure_ref(self, name: str) -> str | None:
        """``name`` for the Markdown twin when that PNG is in the run directory."""
        return name if self.d.figure(name).is_file() else None


def _alive_at(path: Path, shape: tuple[int, int], t: int) -> np.ndarray | None:
    """Which agents are alive at step ``t`` (N,), from the panel file's alive mask alone; ``None`` without a panel
    file or a mask (every agent alive)."""
    alive = load_panel_alive(path, shape) if path.is_file() else None
    return None if alive is None else alive[t]


def reference_method(rec: dict[str, Any]) -> str:
    """The reference row of a run record (``sampled_shapley`` in records written before it was recorded)."""
    return str((rec.get("reference") or {}).get("method") or "sampled_shapley")


__all__ = ["StudyPage", "reference_method"]
