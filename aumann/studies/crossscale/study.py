"""The Bluesky cross-scale study: the grid, resumable cells, tables, figures and ``summary.json``.

``run_crossscale(counts_dir, out_dir, config)`` reads a :class:`RawCounts` directory (ingested or
SYNTHETIC), and for every topic × protocol × size × seed attributes the four indicators on the
sub-panel at its own scale (grid.py). Each finished (topic, protocol, size) cell is written
atomically to ``cells/<topic>/<protocol>__<size>.json`` (the full panel to ``cells/<topic>/FULL.json``)
together with a key of everything it depends on; a rerun skips cells whose key matches and says how
many it skipped, so an interrupted study resumes where it stopped. Tables (tables.py), figures
(figures.py), ``summary.json`` and ``manifest.json`` are rebuilt from the cells at the end.

Outputs are aggregates (tiers, anchors, follower-percentile bins, days) unless ``export_per_user`` is
set, and then per-user rows are keyed by the opaque user index only (never DIDs or handles).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, NonNegativeInt, field_validator

from aumann.configs import ConfigModel, load_toml
from aumann.data.bluesky.counts import RawCounts
from aumann.errors import ConfigError, OutputError, StudyError, ZeroDeltaVError
from aumann.io import (
    OUTPUTS_COMPLETE,
    atomic_path,
    check_outputs,
    check_stale,
    child_path,
    confine,
    ensure_output_dir,
    journaled,
    output_lock,
    plain,
    read_json,
    record_checksum,
    recorded_outputs,
    remove_stale,
    safe_component,
    settle_journal,
    write_json,
)
from aumann.manifest import write_manifest
from aumann.progress import StageTimer, progress_bar
from aumann.studies.crossscale.protocols import PROTOCOLS

INDICATORS = ("lin", "heat", "var", "gini")
#: what the study's manifest records as its command (the CLI: its whole command line, which starts with this)
STUDY_COMMAND = "aumann bluesky study"
#: users kept per topic for the report's who-table (SYNTHETIC panels or ``export_per_user`` only)
TOP_USERS = 50
DEFAULT_SIZES: tuple[int | str, ...] = (100, 1_000, 10_000, 100_000, 1_000_000, "full")


def _once_each(v: list[Any] | None) -> list[Any] | None:
    """``v`` when no value repeats; a repeat is refused: the grid runs a cell per listed value and every mean weighs
    each listing, so ``seeds = [0, 1, 1]`` drew seed 1's subsets twice and counted them twice (the RAND mean shift
    -0.56 pp where seeds [0, 1] give -0.18 pp, its std over three "seeds"), silently."""
    seen: set[Any] = set()
    for x in v or []:
        if x in seen:
            raise ValueError(f"{x!r} is listed more than once (each value once)")
        seen.add(x)
    return v


class DeepSetSettings(ConfigModel):
    """The learned DeepSet indicator of Appendix Q (``--deepset``)."""

    config_error = StudyError

    model_config = ConfigDict(extra="forbid")
    topic: str = "mythos"
    width: int = Field(16, ge=2, le=4096)
    train_steps: int = Field(1500, ge=1, le=10_000_000)
    batch: int = Field(16, ge=1, le=100_000)
    lr: float = Field(3e-3, gt=0, le=10)
    sizes: list[Annotated[int, Field(ge=2, le=100_000_000)]] = Field(default_factory=lambda: [64, 256, 1024],
                                                                     min_length=1, max_length=64)
    steps: int = Field(120, ge=1, le=4096)  # K (Gauss–Legendre's cap)
    power: float = Field(4.0, gt=0, le=1000)  # tau = u^power
    seed: NonNegativeInt = 0
    n_subset: int = Field(100, ge=2, le=100_000_000)
    reference_passes: int = Field(24, ge=1, le=10_000)  # network passes timed for the K-pass reference (scaled to K)
    device: str = "cpu"  # torch device of the attribution (and of the reference passes): "cpu", "cuda", "cuda:1"

    _sizes_once = field_validator("sizes")(_once_each)


Protocol = Literal["BIAS_visibility", "BIAS_topic_x_follow", "BIAS_topic_top", "RAND"]


class CrossScaleConfig(ConfigModel):
    """The study grid (``configs/bluesky-study.toml``); CLI flags override single fields."""

    config_error = StudyError

    model_config = ConfigDict(extra="forbid")
    topics: list[str] | None = Field(None, max_length=10_000)  # None: every topic in the counts
    protocols: list[Protocol] = Field(default_factory=lambda: list(PROTOCOLS), min_length=1, max_length=64)
    sizes: list[Annotated[int, Field(ge=1, le=100_000_000)] | Literal["full"]] = Field(
        default_factory=lambda: list(DEFAULT_SIZES), min_length=1, max_length=256)
    seeds: list[NonNegativeInt] = Field(default_factory=lambda: list(range(10)), max_length=10_000)
    indicators: list[Literal["lin", "heat", "var", "gini"]] = Field(default_factory=lambda: list(INDICATORS),
                                                                     min_length=1)
    pool_fraction: float = Field(0.05, gt=0, le=1)
    k_min: int = Field(100, ge=1, le=100_000_000)
    daily_topics: list[str] = Field(default_factory=lambda: ["mythos"])
    daily_protocols: list[str] = Field(default_factory=lambda: ["BIAS_visibility"])
    headline_size: int = Field(100, ge=2, le=100_000_000)
    deepset: bool = False
    deepset_settings: DeepSetSettings = Field(default_factory=DeepSetSettings)
    export_per_user: bool = False

    _once = field_validator("topics", "protocols", "sizes", "seeds", "indicators", "daily_topics",
                            "daily_protocols")(_once_each)

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str] | None) -> list[str] | None:
        for t in v or []:
            safe_component(t, "topic")  # a topic names a folder of cells/ and a file of per_user/
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("at least one seed is needed")
        return v

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> CrossScaleConfig:
        """The ``[study]`` table (or the whole file) of a TOML file.

        Raises:
            StudyError: a missing, binary or malformed file, or invalid settings (named in one line).
        """
        p = Path(path)
        try:
            raw = load_toml(p, what="study config")
        except ConfigError as exc:
            raise StudyError(str(exc)) from exc
        section = raw.get("study", raw)
        if not isinstance(section, dict):
            raise StudyError(f"study config {str(p)!r}: [study] must be a table")
        try:
            return cls.model_validate(section)
        except ConfigError as exc:
            raise StudyError(f"invalid study config {str(p)!r}: {str(exc).split(': ', 1)[-1]}") from exc


def _fingerprint(counts_dir: Path, counts: RawCounts) -> str:
    h = hashlib.sha256((counts_dir / "counts.json").read_bytes())
    h.update(str((counts.n_users, len(counts.daily), int(counts.daily["posts"].sum()),
                  int(counts.daily["replies_received"].sum()), int(counts.followers().sum()))).encode())
    return h.hexdigest()[:16]


#: the study's pages (written after its manifest, and added to it: :func:`~aumann.studies.pages.render_report`)
_PAGES = ("report.html", "report.md")
#: keys every finished cell holds (besides its own results); a cell without them is recomputed
CELL_KEYS = ("topic", "protocol", "size", "key", "checksum")


def _write_cell(path: Path, cell: dict[str, Any]) -> None:
    """Write a finished cell with a checksum of its content (NaN/inf are stored as null)."""
    body = plain({k: v for k, v in cell.items() if k != "checksum"})
    write_json(path, {**body, "checksum": record_checksum(body)}, within=path.parents[2])  # cells/<topic>/<file>


def _cell_status(path: Path, key: str) -> tuple[str, str | None]:
    """("done", None) for a finished cell with this key whose checksum verifies; ("todo", None) for a missing
    cell or one computed under other settings; ("corrupt", why) for a cell that cannot be trusted."""
    if not path.exists():
        return "todo", None
    from aumann.records import OutsideRecord, check

    try:  # bounded reader, confined to the study's directory (cells/<topic>/<file>), the shared record rule
        cell = check(OutsideRecord, read_json(path, error=StudyError, what="cell", within=path.parent.parent.parent,
                                              object_only=True), error=StudyError, what="cell")
    except (StudyError, OSError) as exc:
        return "corrupt", f"unreadable ({type(exc).__name__}: {str(exc)[:160]})"
    missing = [k for k in CELL_KEYS if k not in cell]
    if missing:
        return "corrupt", f"missing keys {missing}"
    if record_checksum({k: v for k, v in cell.items() if k != "checksum"}) != cell["checksum"]:
        return "corrupt", "checksum mismatch (edited or damaged)"
    return ("done", None) if cell["key"] == key else ("todo", None)


def plan(counts: RawCounts, cfg: CrossScaleConfig) -> tuple[list[str], list[int], list[int]]:
    """(topics, sizes run, sizes skipped because they reach the population)."""
    topics = cfg.topics or list(counts.topics)
    unknown = sorted(set(topics) - set(counts.topics))
    if unknown:
        raise StudyError(f"unknown topics {unknown}; the counts have {counts.topics}")
    ints = sorted({int(s) for s in cfg.sizes if s != "full"})
    if any(s < 2 for s in ints):
        raise StudyError(f"sizes must be ≥ 2 (ε needs two agents); got {ints}")
    return topics, [s for s in ints if s < counts.n_users], [s for s in ints if s >= counts.n_users]


def _table_names() -> list[str]:
    """Every file a study may write in ``tables/``: each table's CSV and its Markdown twin (names relative to the
    study's folder)."""
    from aumann.studies.crossscale.tables import TABLES

    return [f"tables/{name}.{ext}" for name in TABLES for ext in ("csv", "md")]


def _earlier_tables(out: Path) -> list[str]:
    """The tables an earlier study recorded writing in ``out`` (its manifest's ``outputs_sha256``: their CSVs and
    ``.md`` twins), each checked to be that file still: a table of your own there, or one changed since, is refused
    and kept (:func:`~aumann.io.check_stale`). The study removes them before it writes its own
    (:func:`_remove_earlier_tables`) and checks them before its grid too, so that a refusal comes before the work.

    Only a table's name counts (an older study recorded any ``tables/*.csv``, a CSV of yours too). The ``.md`` twin
    of a recorded CSV that an older study's manifest (no ``outputs_complete``) does not list is taken as that
    study's, as the older rule is (:func:`~aumann.io.check_outputs`): it was written with it, and is removed with it."""
    rec = recorded_outputs(out, command=STUDY_COMMAND)
    earlier = rec.digests
    ours = _table_names()
    names = [n for n in ours if n in earlier]
    for name in names:  # every one checked before any goes
        check_stale(out / name, within=out, recorded=earlier)
    if rec.aumann and not rec.complete:
        twins = [f"{n[:-len('.csv')]}.md" for n in names if n.endswith(".csv")]
        twins = [t for t in twins if t not in earlier and ((out / t).exists() or (out / t).is_symlink())]
        check_outputs(out, twins, recorded=rec, removing=True)
        names += twins
    return sorted(names)


def _remove_earlier_tables(out: Path) -> None:
    """Remove :func:`_earlier_tables`: which tables a study writes depends on its settings (the heat indicator's, the
    daily ones), and one an earlier study wrote that this one did not stayed in ``tables/``, was drawn on this
    study's page and recorded in its manifest as its own -- another study's numbers, of other counts maybe."""
    for name in _earlier_tables(out):
        remove_stale(out / name, within=out)


def _earlier_cells(out: Path, ours: Collection[str]) -> list[str]:
    """The cells an earlier study recorded writing in ``out`` (its manifest's ``outputs_sha256``, or the journal of
    one interrupted before its manifest) that this study does not write (``ours``: names relative to ``out``), each
    checked to be that file still: a cell changed since, or a link there, is refused and kept
    (:func:`~aumann.io.check_stale`). A file in ``cells/`` that no record names (a file of yours, or an older
    aumann's) is neither removed nor read: the page reads the cells its summary lists."""
    earlier = recorded_outputs(out, command=STUDY_COMMAND).digests
    names = [n for n in sorted(earlier) if n.startswith("cells/") and n not in ours]
    for name in names:  # every one checked before any goes
        check_stale(out / name, within=out, recorded=earlier)
    return names


def _remove_earlier_cells(out: Path, ours: Collection[str]) -> int:
    """Remove :func:`_earlier_cells` (and the topic folders of ``cells/`` they leave empty); how many were there. A
    study re-run into its folder with fewer sizes, protocols or topics left the earlier study's other cells in
    ``cells/`` for ever (its summary no longer lists them, but nothing said they were another study's)."""
    removed = 0
    for name in _earlier_cells(out, ours):
        removed += remove_stale(out / name, within=out)
        folder = (out / name).parent
        if folder.parent == out / "cells" and folder.is_dir() and not folder.is_symlink():
            try:
                folder.rmdir()
            except OSError:
                pass  # not empty (this study's cells, or a file of yours): kept
    return removed


def _page_inputs(out: Path, jobs: list[Any], cells: _Cells, figures: list[Path],
                 other: list[str]) -> dict[str, str]:
    """``{name: SHA-256}`` of every file the page reads (summary.json, the tables, the cells, the figures), of the
    tables' ``.md`` twins and of ``other`` (the DeepSet's and the per-user files: with them, every output but the
    pages, which the page adds once written), for the manifest: ``aumann report`` refuses a study directory in which
    one of them is not the file the study wrote (a number edited by hand in summary.json or a table was shown as the
    study's result), and the next study may remove those of them it does not write (the cells, the tables)."""
    from aumann.io import file_digests

    # the tables this study wrote (CSVs and .md twins): the earlier ones were removed before it wrote its own
    # (_remove_earlier_tables), so a table's name there is this study's; never any other file of tables/ (a
    # tables/mine.csv of yours was recorded as the study's, and the next study removed it as an earlier study's)
    names = ["summary.json", *_table_names(),
             *(cells.path(*j[:3]).relative_to(out).as_posix() for j in jobs),
             *(p.relative_to(out).as_posix() for p in figures), *other]
    return file_digests(out, [n for n in dict.fromkeys(names) if (out / n).is_file()])


@dataclass
class _Cells:
    """The study's cells: one job ``(topic, protocol, size, daily)`` per cell (the full panel first, as
    protocol ``FULL``), where each is written, and the key of everything it depends on (a rerun skips a
    finished cell whose key matches)."""

    out: Path
    base_key: str
    per_agent: bool  # the FULL cells keep the top users (SYNTHETIC panels or export_per_user)
    jobs: list[tuple[str, str, int, bool]]

    @classmethod
    def of(cls, counts: RawCounts, cfg: CrossScaleConfig, out: Path, topics: list[str], sizes: list[int],
           fingerprint: str, per_agent: bool) -> _Cells:
        base_key = json.dumps({"counts": fingerprint, "seeds": cfg.seeds, "indicators": cfg.indicators,
                               "pool_fraction": cfg.pool_fraction, "k_min": cfg.k_min}, sort_keys=True)
        jobs: list[tuple[str, str, int, bool]] = []
        for topic in topics:
            jobs.append((topic, "FULL", counts.n_users, False))
            for protocol in cfg.protocols:
                daily = topic in cfg.daily_topics and protocol in cfg.daily_protocols
                jobs.extend((topic, protocol, s, daily) for s in sizes)
        return cls(out, base_key, per_agent, jobs)

    def path(self, topic: str, protocol: str, size: int) -> Path:
        return child_path(self.out / "cells", topic, "FULL.json" if protocol == "FULL" else f"{protocol}__{size}.json",
                          what="study cell name")

    def names(self, jobs: list[tuple[str, str, int, bool]]) -> set[str]:
        """The cells of ``jobs``, as names relative to the study's folder (as its manifest records them)."""
        return {self.path(*j[:3]).relative_to(self.out).as_posix() for j in jobs}

    def key(self, protocol: str, daily: bool) -> str:
        extra = f"|top={TOP_USERS}" if protocol == "FULL" and self.per_agent else ""
        return hashlib.sha256(f"{self.base_key}|{protocol}|daily={daily}{extra}".encode()).hexdigest()[:16]

    def pending(self) -> tuple[list[tuple[str, str, int, bool]], list[dict[str, Any]]]:
        """(the jobs to compute, the finished cells that failed verification: ``{cell, reason}``)."""
        todo, failed = [], []
        for j in self.jobs:
            status, why = _cell_status(self.path(*j[:3]), self.key(j[1], j[3]))
            if status != "done":
                todo.append(j)
            if status == "corrupt":
                failed.append({"cell": str(self.path(*j[:3]).relative_to(self.out)), "reason": why})
        return todo, failed


def refuse_counts_dir(src: Path, out: Path) -> None:
    """An ``OutputError`` when the study's output directory ``out`` is the raw counts directory ``src`` it reads
    (its manifest.json and summary.json would overwrite the counts' own)."""
    if out.resolve() == src.resolve():
        raise OutputError(f"study output directory {str(out)!r} is the raw counts directory it reads; "
                          "give another --out")


def _open(src: Path, out: Path) -> RawCounts:
    """The raw counts, once ``out`` is known to be a writable directory other than theirs."""
    counts = RawCounts.load(src)
    refuse_counts_dir(src, out)
    ensure_output_dir(out, "study output directory")  # before the grid: an unwritable --out fails now
    for sub in ("cells", "tables", "figures", "deepset", "per_user", "summary.json", "manifest.json"):
        confine(out / sub, out, what="study output")  # no symbolic link inside --out leads out of it
    return counts


def _say_resume(n_skip: int, n_jobs: int, failed: list[dict[str, Any]], log: Any) -> None:
    if n_skip:
        log(f"resuming: {n_skip} of {n_jobs} cells already finished, skipped")
    if failed:
        print(f"aumann: resume: {len(failed)} finished cell(s) failed verification and will be recomputed: "
              + "; ".join(f"{f['cell']}: {f['reason']}" for f in failed[:5]) + (" ..." if len(failed) > 5 else ""),
              file=sys.stderr)


def _compute_cells(counts: RawCounts, cfg: CrossScaleConfig, cells: _Cells, todo: list[tuple[str, str, int, bool]],
                   topics: list[str], *, synthetic: bool, bar: Any, out: Path, log: Any,
                   ) -> tuple[dict[str, str], int, dict[str, float]]:
    """Compute and write the cells ``todo``, topic by topic: (topics skipped with the reason, cells computed, the
    wall-clock seconds of each computed cell by its file name under ``cells/``: kept out of the cell, whose bytes
    the data and settings determine, for the manifest)."""
    from aumann.studies.crossscale.grid import full_cell, grid_cell, prepare_topic

    topics_skipped: dict[str, str] = {}
    computed = 0
    seconds: dict[str, float] = {}
    for topic in topics:
        mine = [j for j in todo if j[0] == topic]
        if not mine and not cfg.export_per_user:
            continue
        try:
            data = prepare_topic(counts, topic, list(cfg.indicators), pool_fraction=cfg.pool_fraction,
                                 k_min=cfg.k_min)
        except ZeroDeltaVError as exc:
            log(f"topic {topic!r} skipped: {exc}")
            topics_skipped[topic] = str(exc)
            if bar is not None:
                bar.advance(len(mine))
            continue
        daily_panel = counts.daily_panel(topic) if any(j[3] for j in mine) else None
        for _, protocol, size, daily in mine:
            if protocol == "FULL":
                cell = full_cell(counts, data, top_agents=TOP_USERS if cells.per_agent else 0)
            else:
                cell = grid_cell(data, protocol, size, cfg.seeds, list(cfg.indicators),
                                 daily_panel if daily else None)
            cell.update({"key": cells.key(protocol, daily), "synthetic": synthetic})
            path = cells.path(topic, protocol, size)
            secs = cell.pop("seconds", None)
            if secs is not None:
                seconds[path.relative_to(out).as_posix()] = float(secs)
            _write_cell(path, cell)
            computed += 1
            if bar is not None:
                bar.advance()
        if cfg.export_per_user:
            _export_per_user(out, data)
        del data, daily_panel
    return topics_skipped, computed, seconds


def _deepset(counts: RawCounts, out: Path, cfg: CrossScaleConfig, log: Any) -> dict[str, Any]:
    """The learned DeepSet indicator's section of the summary (``{"skipped": why}`` when Δv = 0)."""
    from aumann.studies.crossscale.deepset import run_deepset

    try:
        return run_deepset(counts, out / "deepset", cfg, log=log)
    except ZeroDeltaVError as exc:
        log(f"deepset skipped: {exc}")
        return {"skipped": str(exc)}


def run_crossscale(counts_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                   cfg: CrossScaleConfig | None = None, *, progress: bool = False, log: Any = print,
                   report: bool = True, interactive: bool | None = None,
                   command: str = STUDY_COMMAND) -> dict[str, Any]:
    """Run (or resume) the study; returns the summary (also written to ``summary.json``).

    ``command``: what ``manifest.json`` records as the command (the CLI gives its whole, redacted command line).

    With ``report`` (default) the directory also gets ``report.html`` (one self-contained page) and
    ``report.md`` (:mod:`aumann.studies.crossscale.page`); ``interactive`` picks Bokeh or PNG figures.

    The study holds ``out_dir``'s lock (:func:`~aumann.io.output_lock`, recording ``command``) from its first cell to
    its pages: while another live aumann command or call writes there, it stops at once with an
    :class:`~aumann.errors.OutputBusyError`.
    """
    from aumann.studies.crossscale import figures, tables

    cfg = cfg or CrossScaleConfig()
    t_start = time.perf_counter()
    timer = StageTimer()
    timer.start("load counts")
    src, out = Path(counts_dir), Path(out_dir)
    counts = _open(src, out)
    # one writer per folder for the whole study, cells to pages (re-entrant: `aumann bluesky study` holds it already):
    # a second study into the same folder would compute the same cells and interleave their files and manifests;
    # each file is journaled before it is renamed into place (journaled): a study interrupted before its manifest
    # leaves cells and tables the next one knows as a study's (and may remove, when it does not write them)
    with output_lock(out, command=command), journaled(out):
        # a folder another aumann command wrote (a build-panel or synth counts folder, a run's, an attribution's) is
        # refused before the grid: the study's manifest would replace that command's, its files left unrecorded
        check_outputs(out, ["manifest.json"], commands=(STUDY_COMMAND,))
        _earlier_tables(out)  # (a table of yours among them: refused now, not after the grid)
        # a table, page or summary of yours with an output's name: refused now, not overwritten after the grid
        check_outputs(out, [*_table_names(), "summary.json", *_PAGES],
                      recorded=recorded_outputs(out, command=STUDY_COMMAND))
        synthetic = bool(counts.meta.get("synthetic", False))
        topics, sizes, skipped = plan(counts, cfg)
        if skipped:
            log(f"sizes {skipped} reach the population ({counts.n_users:,} users): skipped (the full panel is 'full')")
        fp = _fingerprint(src, counts)
        # per-user rows: never for real data unless asked for
        cells = _Cells.of(counts, cfg, out, topics, sizes, fp, per_agent=synthetic or cfg.export_per_user)
        _earlier_cells(out, cells.names(cells.jobs))  # (a cell changed since among them: refused now, not after grid)
        todo, failed = cells.pending()
        n_skip = len(cells.jobs) - len(todo)
        _say_resume(n_skip, len(cells.jobs), failed, log)
        bar = progress_bar(progress, len(todo), "study cells", transient=False, minimum=1)
        t_grid = time.perf_counter()
        timer.start("grid cells (attribution)")
        try:
            topics_skipped, computed, cell_seconds = _compute_cells(counts, cfg, cells, todo, topics,
                                                                    synthetic=synthetic, bar=bar, out=out, log=log)
        finally:
            if bar is not None:
                bar.stop()
        grid_seconds = time.perf_counter() - t_grid

        jobs = [j for j in cells.jobs if j[0] not in topics_skipped]
        finished = [read_json(cells.path(*j[:3]), error=StudyError, what="cell", within=out, object_only=True)
                    for j in jobs]
        if n_gone := _remove_earlier_cells(out, cells.names(jobs)):
            log(f"removed {n_gone} cell(s) of an earlier study in this folder that this one does not compute")
        timer.start("tables")
        _remove_earlier_tables(out)
        summary_tables = tables.write_tables(finished, out / "tables", synthetic=synthetic,
                                             headline_size=cfg.headline_size, days=list(counts.days))
        timer.start("figures")
        fig_paths = figures.write_figures(finished, out / "figures", synthetic=synthetic,
                                          headline_size=cfg.headline_size)
        summary: dict[str, Any] = {
            "synthetic": synthetic,
            "data": "SYNTHETIC panel (not real Bluesky data)" if synthetic else "ingested capture",
            "users": counts.n_users, "topics": topics, "protocols": list(cfg.protocols), "sizes": sizes,
            "sizes_skipped": skipped, "topics_skipped": topics_skipped, "seeds": cfg.seeds,
            "indicators": list(cfg.indicators),
            "cells": len(jobs), "cells_skipped_on_resume": n_skip,
            "cells_recomputed_after_failed_check": len(failed), "cells_failed_check": failed, **summary_tables,
            "figures": [str(p.relative_to(out)) for p in fig_paths],
            "timings": {"cells_computed": computed},
        }
        deepset_seconds = None
        if cfg.deepset:
            from aumann.studies.crossscale.deepset import wall_clock, without_wall_clock

            timer.start("DeepSet (train + attribute)")
            deepset = _deepset(counts, out, cfg, log)
            summary["deepset"], deepset_seconds = without_wall_clock(deepset), wall_clock(deepset) or None
        timer.stop()
        total_seconds = time.perf_counter() - t_start
        # summary.json holds what the counts and the settings determine (the same bytes on every run); how long each
        # part took is the manifest's (and the returned summary's, for the command's printout)
        write_json(out / "summary.json", summary)
        # the earlier study's pages go before the manifest that no longer records them (this study writes its own
        # next): they showed another study's results, and the new manifest, which lists every output
        # (outputs_complete), would leave them looking like a file of yours
        check_outputs(out, _PAGES, recorded=recorded_outputs(out, command=STUDY_COMMAND), removing=True)
        for page in _PAGES:
            remove_stale(out / page, within=out)
        written = [*(f"per_user/{t}.parquet" for t in topics if t not in topics_skipped and cfg.export_per_user),
                   *(f"deepset/deepset.{ext}" for ext in ("json", "md")
                     if cfg.deepset and "skipped" not in summary.get("deepset", {}))]
        write_manifest(out, command, config=cfg.model_dump(), seeds=cfg.seeds,
                       extra={OUTPUTS_COMPLETE: True, "counts_dir": str(src), "counts_fingerprint": fp,
                              "synthetic": synthetic,
                              "outputs_sha256": _page_inputs(out, jobs, cells, fig_paths, written),
                              "report_kind": "crossscale", "seconds": total_seconds, "grid_seconds": grid_seconds,
                              "stage_seconds": timer.seconds, "cell_seconds": cell_seconds,
                              **({"deepset_seconds": deepset_seconds} if deepset_seconds else {}),
                              "resume": {"cells_skipped": n_skip, "cells_recomputed_after_failed_check": len(failed),
                                         "cells_failed_check": failed}})
        settle_journal(out)
        if report:
            from aumann.studies.pages import render_report

            render_report(out, interactive=interactive)
        return {**summary, "timings": {"grid_seconds": grid_seconds, "cells_computed": computed,
                                       "total_seconds": total_seconds, "stage_seconds": timer.seconds,
                                       **({"deepset_seconds": deepset_seconds} if deepset_seconds else {})}}


def _export_per_user(out: Path, data: Any) -> None:
    """Full-panel per-user shares keyed by the opaque user index (no DIDs, no handles)."""
    import pandas as pd

    df = pd.DataFrame({"user": np.arange(data.n_users, dtype=np.int64), "tier_code": data.tier_code,
                       **{f"share_{k}": v["share"] for k, v in data.full.items()}})
    with atomic_path(child_path(out, "per_user", f"{data.topic}.parquet", what="per-user file")) as tmp:
        df.to_parquet(tmp, index=False)


__all__ = ["DEFAULT_SIZES", "INDICATORS", "STUDY_COMMAND", "CrossScaleConfig", "DeepSetSettings", "StudyError", "plan",
           "refuse_counts_dir", "run_crossscale"]
