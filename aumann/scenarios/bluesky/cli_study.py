"""``aumann bluesky synth`` and ``aumann bluesky study``: argument parsing only; the work is in
synth.py and study.py. ``aumann/cli/bluesky.py`` calls :func:`register_synth` and
:func:`register_study` on its sub-parsers.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from aumann.errors import ConfigError


def _size(text: str) -> int | str:
    if text == "full":
        return text
    try:
        return int(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be an integer (1e3 allowed) or 'full'; got {text!r}") from None


def register_synth(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``synth``: write a calibrated SYNTHETIC RawCounts directory."""
    p = subparsers.add_parser("synth", help="generate a calibrated SYNTHETIC Bluesky-like panel of raw counts",
                              description="Generate SYNTHETIC raw counts (heavy-tailed followers, sparse topic "
                              "activity, replies concentrated on large accounts, five topics) and calibration.json.")
    p.add_argument("--users", type=int, default=1_671_587, help="number of users (default 1,671,587)")
    p.add_argument("--days", type=int, default=14, help="days from 2026-04-07 (default 14)")
    p.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.set_defaults(func=run_synth)
    return p


def run_synth(args: argparse.Namespace) -> int:
    from aumann.manifest import write_manifest
    from aumann.scenarios.bluesky.synth import SynthConfig, generate, write_synth

    try:
        cfg = SynthConfig(users=args.users, days=args.days, seed=args.seed)
    except ValueError as exc:
        raise ConfigError(f"invalid synth settings: {exc}") from exc
    t0 = time.perf_counter()
    counts = generate(cfg)
    gen_s = time.perf_counter() - t0
    cal = write_synth(counts, args.out)
    write_manifest(args.out, "aumann bluesky synth", config=cfg.model_dump(), seeds=[cfg.seed],
                   extra={"synthetic": True, "generate_seconds": gen_s})
    f = cal["followers"]["achieved"]
    print(f"SYNTHETIC panel: {counts.n_users:,} users, {len(counts.days)} days, {len(counts.daily):,} topic rows, "
          f"generated in {gen_s:.1f} s -> {args.out}")
    print(f"followers P(F<=1)={f['P(F<=1)']:.3f} p95={f['p95']:.0f} p99={f['p99']:.0f} max={f['max']:,} "
          "(targets 0.5 / ~95-100 / 400-600 / ~1e6); see calibration.json")
    return 0


def register_study(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``study``: the cross-scale study over a RawCounts directory."""
    p = subparsers.add_parser("study", help="run (or resume) the cross-scale attribution study",
                              description="Tiers, sampling protocols, sizes and seeds; attribution at each scale; "
                              "tables, figures, summary.json. Finished cells are reused on rerun.")
    p.add_argument("counts", type=Path, help="RawCounts directory (from build-panel or synth)")
    p.add_argument("--out", required=True, type=Path, help="output directory")
    p.add_argument("--config", type=Path, default=None, help="study config TOML (default: built-in grid)")
    p.add_argument("--sizes", nargs="+", type=_size, default=None, help="panel sizes, e.g. 100 1000 full")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="subset seeds (default 0..9)")
    p.add_argument("--topics", nargs="+", default=None, help="topics (default: all in the counts)")
    p.add_argument("--protocols", nargs="+", default=None, help="sampling protocols (default: all four)")
    p.add_argument("--deepset", action="store_true", help="also train and attribute the learned DeepSet indicator")
    p.add_argument("--export-per-user", action="store_true",
                   help="also write full-panel per-user shares keyed by opaque index (no DIDs/handles)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_study_cmd)
    return p


def run_study_cmd(args: argparse.Namespace) -> int:
    from aumann.scenarios.bluesky.study import StudyConfig, run_study

    cfg = StudyConfig.from_toml(args.config) if args.config else StudyConfig()
    updates: dict[str, Any] = {}
    for name in ("sizes", "seeds", "topics", "protocols"):
        if getattr(args, name) is not None:
            updates[name] = getattr(args, name)
    if args.deepset:
        updates["deepset"] = True
    if args.export_per_user:
        updates["export_per_user"] = True
    try:
        cfg = StudyConfig.model_validate({**cfg.model_dump(), **updates})
    except ValueError as exc:
        raise ConfigError(f"invalid study settings: {exc}") from exc
    summary = run_study(args.counts, args.out, cfg, progress=not args.no_progress)
    keys = ("data", "flip_cells_positive", "epsilon", "residual_law_max_deviation", "rand_mean_shift_pp",
            "cells_skipped_on_resume", "timings")
    print(json.dumps({k: summary.get(k) for k in keys}, indent=1))
    print(f"tables, figures and summary.json in {args.out}")
    return 0


__all__ = ["register_study", "register_synth", "run_study_cmd", "run_synth"]
