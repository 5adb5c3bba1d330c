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
import time
import tomllib
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from aumann.data.bluesky.counts import RawCounts
from aumann.errors import StudyError, ZeroDeltaVError
from aumann.io import atomic_path, write_json
from aumann.manifest import write_manifest
from aumann.progress import StageTimer, progress_bar
from aumann.studies.crossscale.protocols import PROTOCOLS

INDICATORS = ("lin", "heat", "var", "gini")
#: users kept per topic for the report's who-table (SYNTHETIC panels or ``export_per_user`` only)
TOP_USERS = 50
DEFAULT_SIZES: tuple[int | str, ...] = (100, 1_000, 10_000, 100_000, 1_000_000, "full")


class DeepSetSettings(BaseModel):
    """The learned DeepSet indicator of Appendix Q (``--deepset``)."""

    model_config = ConfigDict(extra="forbid")
    topic: str = "mythos"
    width: int = Field(16, ge=2)
    train_steps: int = Field(1500, ge=1)
    batch: int = Field(16, ge=1)
    lr: float = 3e-3
    sizes: list[int] = [64, 256, 1024]
    steps: int = Field(120, ge=1)  # K
    power: float = 4.0  # tau = u^power
    seed: int = 0
    n_subset: int = 100
    reference_passes: int = Field(24, ge=1)  # network passes timed for the K-pass reference (scaled to K)
    device: str = "cpu"  # torch device of the attribution (and of the reference passes): "cpu", "cuda", "cuda:1"


class CrossScaleConfig(BaseModel):
    """The study grid (``configs/bluesky-study.toml``); CLI flags override single fields."""

    model_config = ConfigDict(extra="forbid")
    topics: list[str] | None = None  # None: every topic in the counts
    protocols: list[Literal["BIAS_visibility", "BIAS_topic_x_follow", "BIAS_topic_top", "RAND"]] = list(PROTOCOLS)
    sizes: list[int | Literal["full"]] = list(DEFAULT_SIZES)
    seeds: list[int] = list(range(10))
    indicators: list[Literal["lin", "heat", "var", "gini"]] = list(INDICATORS)
    pool_fraction: float = Field(0.05, gt=0, le=1)
    k_min: int = Field(100, ge=1)
    daily_topics: list[str] = ["mythos"]
    daily_protocols: list[str] = ["BIAS_visibility"]
    headline_size: int = 100
    deepset: bool = False
    deepset_settings: DeepSetSettings = DeepSetSettings()
    export_per_user: bool = False

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("at least one seed is needed")
        return v

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str]) -> CrossScaleConfig:
        p = Path(path)
        if not p.exists():
            raise StudyError(f"study config {str(p)!r} does not exist")
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise StudyError(f"study config {str(p)!r} is not valid TOML: {exc}") from exc
        try:
            return cls.model_validate(raw.get("study", raw))
        except ValueError as exc:
            raise StudyError(f"invalid study config {str(p)!r}: {exc}") from exc


def _fingerprint(counts_dir: Path, counts: RawCounts) -> str:
    h = hashlib.sha256((counts_dir / "counts.json").read_bytes())
    h.update(str((counts.n_users, len(counts.daily), int(counts.daily["posts"].sum()),
                  int(counts.daily["replies_received"].sum()), int(counts.followers().sum()))).encode())
    return h.hexdigest()[:16]


def _finite(obj: Any) -> Any:
    """NaN/inf → None (JSON has neither), recursively."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _write_json(path: Path, obj: Any) -> None:
    write_json(path, _finite(obj))


def _cell_done(path: Path, key: str) -> bool:
    if not path.exists():
        return False
    try:
        return json.loads(path.read_text()).get("key") == key
    except (OSError, json.JSONDecodeError):
        return False


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


def run_crossscale(counts_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                   cfg: CrossScaleConfig | None = None, *, progress: bool = False, log: Any = print,
                   report: bool = True, interactive: bool | None = None) -> dict[str, Any]:
    """Run (or resume) the study; returns the summary (also written to ``summary.json``).

    With ``report`` (default) the directory also gets ``report.html`` (one self-contained page) and
    ``report.md`` (:mod:`aumann.studies.crossscale.page`); ``interactive`` picks Bokeh or PNG figures.
    """
    from aumann.studies.crossscale import figures, tables
    from aumann.studies.crossscale.grid import full_cell, grid_cell, prepare_topic

    cfg = cfg or CrossScaleConfig()
    t_start = time.perf_counter()
    timer = StageTimer()
    timer.start("load counts")
    src, out = Path(counts_dir), Path(out_dir)
    counts = RawCounts.load(src)
    synthetic = bool(counts.meta.get("synthetic", False))
    topics, sizes, skipped = plan(counts, cfg)
    per_agent = synthetic or cfg.export_per_user  # per-user rows: never for real data unless asked for
    if skipped:
        log(f"sizes {skipped} reach the population ({counts.n_users:,} users): skipped (the full panel is 'full')")
    fp = _fingerprint(src, counts)
    base_key = json.dumps({"counts": fp, "seeds": cfg.seeds, "indicators": cfg.indicators,
                           "pool_fraction": cfg.pool_fraction, "k_min": cfg.k_min}, sort_keys=True)
    cells_dir = out / "cells"
    jobs: list[tuple[str, str, int, bool]] = []
    for topic in topics:
        jobs.append((topic, "FULL", counts.n_users, False))
        for protocol in cfg.protocols:
            daily = topic in cfg.daily_topics and protocol in cfg.daily_protocols
            jobs.extend((topic, protocol, s, daily) for s in sizes)

    def path_of(topic: str, protocol: str, size: int) -> Path:
        return cells_dir / topic / ("FULL.json" if protocol == "FULL" else f"{protocol}__{size}.json")

    def key_of(protocol: str, daily: bool) -> str:
        extra = f"|top={TOP_USERS}" if protocol == "FULL" and per_agent else ""
        return hashlib.sha256(f"{base_key}|{protocol}|daily={daily}{extra}".encode()).hexdigest()[:16]

    todo = [j for j in jobs if not _cell_done(path_of(*j[:3]), key_of(j[1], j[3]))]
    n_skip = len(jobs) - len(todo)
    if n_skip:
        log(f"resuming: {n_skip} of {len(jobs)} cells already finished, skipped")
    topics_skipped: dict[str, str] = {}
    computed = 0
    bar = progress_bar(progress, len(todo), "study cells", transient=False, minimum=1)
    t_grid = time.perf_counter()
    timer.start("grid cells (attribution)")
    try:
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
                    cell = full_cell(counts, data, top_agents=TOP_USERS if per_agent else 0)
                else:
                    cell = grid_cell(data, protocol, size, cfg.seeds, list(cfg.indicators),
                                     daily_panel if daily else None)
                cell.update({"key": key_of(protocol, daily), "synthetic": synthetic})
                _write_json(path_of(topic, protocol, size), cell)
                computed += 1
                if bar is not None:
                    bar.advance()
            if cfg.export_per_user:
                _export_per_user(out, data)
            del data, daily_panel
    finally:
        if bar is not None:
            bar.stop()
    grid_seconds = time.perf_counter() - t_grid

    jobs = [j for j in jobs if j[0] not in topics_skipped]
    cells = [json.loads(path_of(*j[:3]).read_text()) for j in jobs]
    timer.start("tables")
    summary_tables = tables.write_tables(cells, out / "tables", synthetic=synthetic,
                                         headline_size=cfg.headline_size, days=list(counts.days))
    timer.start("figures")
    fig_paths = figures.write_figures(cells, out / "figures", synthetic=synthetic, headline_size=cfg.headline_size)
    summary: dict[str, Any] = {
        "synthetic": synthetic,
        "data": "SYNTHETIC panel (not real Bluesky data)" if synthetic else "ingested capture",
        "users": counts.n_users, "topics": topics, "protocols": list(cfg.protocols), "sizes": sizes,
        "sizes_skipped": skipped, "topics_skipped": topics_skipped, "seeds": cfg.seeds,
        "indicators": list(cfg.indicators),
        "cells": len(jobs), "cells_skipped_on_resume": n_skip, **summary_tables,
        "figures": [str(p.relative_to(out)) for p in fig_paths],
        "timings": {"grid_seconds": grid_seconds, "cells_computed": computed},
    }
    if cfg.deepset:
        from aumann.studies.crossscale.deepset import run_deepset

        timer.start("DeepSet (train + attribute)")
        summary["deepset"] = run_deepset(counts, out / "deepset", cfg, log=log)
    timer.stop()
    summary["timings"]["total_seconds"] = time.perf_counter() - t_start
    summary["timings"]["stage_seconds"] = timer.seconds
    _write_json(out / "summary.json", summary)
    write_manifest(out, "aumann bluesky study", config=cfg.model_dump(), seeds=cfg.seeds,
                   extra={"counts_dir": str(src), "counts_fingerprint": fp, "synthetic": synthetic,
                          "report_kind": "crossscale", "seconds": summary["timings"]["total_seconds"],
                          "stage_seconds": timer.seconds})
    if report:
        from aumann.studies.pages import render_report

        render_report(out, interactive=interactive)
    return summary


def _export_per_user(out: Path, data: Any) -> None:
    """Full-panel per-user shares keyed by the opaque user index (no DIDs, no handles)."""
    import pandas as pd

    df = pd.DataFrame({"user": np.arange(data.n_users, dtype=np.int64), "tier_code": data.tier_code,
                       **{f"share_{k}": v["share"] for k, v in data.full.items()}})
    with atomic_path(out / "per_user" / f"{data.topic}.parquet") as tmp:
        df.to_parquet(tmp, index=False)


__all__ = ["DEFAULT_SIZES", "INDICATORS", "CrossScaleConfig", "DeepSetSettings", "StudyError", "plan", "run_crossscale"]
