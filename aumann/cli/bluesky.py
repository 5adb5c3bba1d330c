"""``aumann bluesky ...``: argument parsing for the Bluesky commands.

``build-panel`` and ``capture`` call :mod:`aumann.data.bluesky` (ingestion), ``synth`` calls
:mod:`aumann.data.bluesky.synth`, ``study`` calls :mod:`aumann.studies.crossscale` (the cross-scale
study). Each subcommand adds one parser and sets ``func`` (``run(args) -> int``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from aumann.cli.args import integer, memory_size, number, path, seed
from aumann.cli.command import command_line, refuse_if_busy
from aumann.cli.terminal import terminal_text
from aumann.errors import ConfigError

MAX_DAYS = 400  # aumann.data.bluesky.ingest.MAX_DAYS (not imported here: parsing stays light)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bluesky", help="Bluesky cross-scale study: ingest Jetstream captures, synthesise, study",
        description="Bluesky cross-scale study (paper, Section 3).",
    )
    sub = parser.add_subparsers(dest="bluesky_command", metavar="SUBCOMMAND")
    _register_build_panel(sub)
    _register_capture(sub)
    register_synth(sub)
    register_study(sub)

    def _help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    parser.set_defaults(func=_help)


# --------------------------------------------------------------------------- build-panel
def _register_build_panel(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build-panel", help="Jetstream v1 files → raw counts, window/daily panels per topic, ingest report",
        description="Ingest Jetstream v1 capture files (JSONL, .jsonl.zst, or per-message zstd frames; one "
                    "file per UTC day) into raw per-user per-day counts and per-topic panels.",
    )
    p.add_argument("files", nargs="+", type=path, metavar="FILES", help="Jetstream capture files")
    p.add_argument("--out", type=path, required=True, help="output directory")
    p.add_argument("--profiles", type=path, default=None,
                   help="profile snapshot CSV: did, followers_count[, created_at, handle]")
    p.add_argument("--topics", type=path, default=None,
                   help="directory of topic TOML files (default: the packaged aumann/configs/topics)")
    p.add_argument("--filters", type=path, default=None,
                   help="TOML with a [filters] table (default: the packaged aumann/configs/bluesky-ingest.toml)")
    p.add_argument("--days", default=None, metavar="FIRST:LAST",
                   help="inclusive UTC window YYYY-MM-DD:YYYY-MM-DD (default: first to last day seen)")
    p.add_argument("--zstd-dictionary", type=path, default=None,
                   help="zstd dictionary for per-message frames (Jetstream's published dictionary)")
    p.add_argument("--max-days", type=integer(minimum=1, maximum=100_000), default=None, metavar="N",
                   help=f"largest window (days) to ingest, explicit or automatic (default {MAX_DAYS}); a longer "
                        "--days window is refused unless this is raised")
    p.add_argument("--threads", type=integer(minimum=1, maximum=4096), default=None, help="DuckDB threads")
    p.add_argument("--memory-limit", type=memory_size, default=None,
                   help="DuckDB memory limit, e.g. 4GB (spills beyond it)")
    p.add_argument("--temp-dir", type=path, default=None, help="where DuckDB spills and frames are decoded")
    p.add_argument("--export-identifiers", action="store_true",
                   help="write DIDs and handles (users.parquet, identifiers.parquet); default: redacted")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.set_defaults(func=run_build_panel)


def _parse_days(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--days must be FIRST:LAST (YYYY-MM-DD:YYYY-MM-DD); got {text!r}")
    return parts[0], parts[1]


def run_build_panel(args: argparse.Namespace) -> int:
    refuse_if_busy(args.out, "bluesky", "build-panel")  # a busy --out: now, before pandas' and DuckDB's imports
    from aumann.data.bluesky.build import write_build_outputs
    from aumann.data.bluesky.filters import load_filters
    from aumann.data.bluesky.ingest import IngestOptions, ingest
    from aumann.io import ensure_output_dir, lock_output_dir

    options = IngestOptions(days=_parse_days(args.days), zstd_dictionary=args.zstd_dictionary,
                            threads=args.threads, memory_limit=args.memory_limit, temp_dir=args.temp_dir,
                            progress=not args.quiet, max_days=args.max_days or MAX_DAYS)
    ensure_output_dir(args.out, "--out")  # before ingesting: an unwritable --out fails now
    lock_output_dir(args.out, command=command_line("bluesky", "build-panel"))  # one writer per folder
    counts, report = ingest(args.files, profiles=args.profiles, topics=args.topics,
                            filters=load_filters(args.filters), options=options)
    config = {"files": [str(f) for f in args.files], "profiles": args.profiles, "topics": args.topics,
              "filters": args.filters, "days": args.days, "zstd_dictionary": args.zstd_dictionary,
              "export_identifiers": args.export_identifiers}
    write_build_outputs(counts, report.to_dict(), args.out, export_identifiers=args.export_identifiers,
                        config=config, command=command_line("bluesky", "build-panel"))
    if not args.quiet:
        print(f"{report.valid_events:,} events, {report.malformed_lines:,} malformed lines, "
              f"{report.duplicates:,} duplicates; {report.users_kept:,} of {report.users_seen:,} users kept "
              f"(dropped {json.dumps(report.dropped_users)}); {len(report.days)} day(s); "
              f"{report.throughput_mb_s:.0f} MB/s → {terminal_text(args.out)}")
    return 0


# --------------------------------------------------------------------------- capture
def _register_capture(sub: argparse._SubParsersAction) -> None:
    from aumann.data.bluesky.capture import DEFAULT_COLLECTIONS, DEFAULT_ENDPOINT

    p = sub.add_parser(
        "capture", help="record the live Jetstream into daily YYYY-MM-DD.jsonl files (needs aumann[capture])",
        description="Record the public Jetstream v1 stream into one JSONL file per UTC day (by time_us), "
                    "reconnecting with a rewound cursor. Needs network access and the 'websockets' package.",
    )
    p.add_argument("--out", type=path, required=True, help="directory for the daily files")
    p.add_argument("--collections", nargs="+", default=list(DEFAULT_COLLECTIONS), metavar="NSID",
                   help="wantedCollections (default: posts, reposts, likes, follows)")
    p.add_argument("--duration", type=number(0, exclusive_minimum=True, maximum=10 * 366 * 86400), default=None,
                   metavar="S",
                   help="seconds to record (default: forever)")
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="Jetstream /subscribe URL")
    p.add_argument("--cursor", type=integer(minimum=0), default=None, help="start cursor (unix µs; default: live tail)")
    p.add_argument("--rewind", type=number(0, maximum=86400), default=5.0, metavar="S",
                   help="cursor rewind on reconnect (seconds)")
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace) -> int:
    from aumann.data.bluesky.capture import capture
    from aumann.io import check_outputs, ensure_output_dir, lock_output_dir
    from aumann.manifest import write_manifest

    ensure_output_dir(args.out, "capture directory")
    lock_output_dir(args.out, command=command_line("bluesky", "capture"))  # two captures would mix their day files
    # the manifest written when the capture ends: a manifest.json of your own, or another command's folder (a
    # build-panel's counts), is refused now, not overwritten after hours of recording (an earlier capture's is
    # replaced: its day files are appended to)
    check_outputs(args.out, ["manifest.json"], commands=("aumann bluesky capture",))
    stats = capture(args.out, collections=args.collections, duration_s=args.duration, endpoint=args.endpoint,
                    cursor=args.cursor, rewind_s=args.rewind)
    write_manifest(args.out, command_line("bluesky", "capture"),
                   {"collections": args.collections, "duration": args.duration, "endpoint": args.endpoint,
                    "cursor": args.cursor, "rewind": args.rewind},
                   extra={"messages": stats.messages, "unparsed": stats.unparsed, "reconnects": stats.reconnects,
                          "files": stats.files})
    print(f"{stats.messages:,} messages ({stats.unparsed} without time_us), {stats.reconnects} reconnects "
          f"→ {terminal_text(args.out)}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- synth, study

_INT_SIZE = integer(minimum=2)


def _size(text: str) -> int | str:
    if text.strip().lower() == "full":
        return "full"
    try:
        return _INT_SIZE(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"size must be an integer ≥ 2 (1e3 allowed) or 'full'; got {text!r}") from None


def register_synth(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``synth``: write a calibrated SYNTHETIC RawCounts directory."""
    p = subparsers.add_parser("synth", help="generate a calibrated SYNTHETIC Bluesky-like panel of raw counts",
                              description="Generate SYNTHETIC raw counts (heavy-tailed followers, sparse topic "
                              "activity, replies concentrated on large accounts, five topics) and calibration.json.")
    p.add_argument("--users", type=integer(minimum=100, maximum=100_000_000), default=1_671_587,
                   help="number of users (default 1,671,587)")
    p.add_argument("--days", type=integer(minimum=1, maximum=366), default=14, help="days from 2026-04-07 (default 14)")
    p.add_argument("--seed", type=seed, default=0, help="generator seed (default 0)")
    p.add_argument("--out", required=True, type=path, help="output directory")
    p.set_defaults(func=run_synth)
    return p


def run_synth(args: argparse.Namespace) -> int:
    refuse_if_busy(args.out, "bluesky", "synth")  # a busy --out: now, before pandas' import
    from aumann.data.bluesky.synth import SynthConfig, generate, write_synth
    from aumann.io import ensure_output_dir, lock_output_dir

    cfg = SynthConfig(users=args.users, days=args.days, seed=args.seed)  # SynthError (a ConfigError) if invalid
    ensure_output_dir(args.out, "--out")
    lock_output_dir(args.out, command=command_line("bluesky", "synth"))  # one writer per folder
    t0 = time.perf_counter()
    counts = generate(cfg)
    gen_s = time.perf_counter() - t0
    cal = write_synth(counts, args.out, command=command_line("bluesky", "synth"), config=cfg.model_dump(),
                      seeds=[cfg.seed], extra={"generate_seconds": gen_s})
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
    p.add_argument("counts", type=path, help="RawCounts directory (from build-panel or synth)")
    p.add_argument("--out", required=True, type=path, help="output directory")
    p.add_argument("--config", type=path, default=None, help="study config TOML (default: built-in grid)")
    p.add_argument("--sizes", nargs="+", type=_size, default=None, help="panel sizes, e.g. 100 1000 full")
    p.add_argument("--seeds", nargs="+", type=seed, default=None, help="subset seeds (default 0..9)")
    p.add_argument("--topics", nargs="+", default=None, help="topics (default: all in the counts)")
    p.add_argument("--protocols", nargs="+", default=None, help="sampling protocols (default: all four)")
    p.add_argument("--deepset", action="store_true", help="also train and attribute the learned DeepSet indicator")
    p.add_argument("--export-per-user", action="store_true",
                   help="also write full-panel per-user shares keyed by opaque index (no DIDs/handles)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--static", action="store_true", help="static PNG figures in report.html even with Bokeh installed")
    p.set_defaults(func=run_study_cmd)
    return p


def run_study_cmd(args: argparse.Namespace) -> int:
    refuse_if_busy(args.out, "bluesky", "study")  # a busy --out: now, before the study's imports (pandas, torch)
    from aumann.io import check_outputs
    from aumann.studies.crossscale.study import STUDY_COMMAND, CrossScaleConfig, refuse_counts_dir, run_crossscale

    refuse_counts_dir(Path(args.counts), Path(args.out))  # said as such, not as "another command's folder" below
    if Path(args.out).is_dir():  # a page or summary of your own with a result's name stops the study now, kept
        check_outputs(args.out, ["report.html", "report.md", "summary.json", "manifest.json"],
                      commands=(STUDY_COMMAND,))  # (a counts or run folder: another command's, refused)
    cfg = CrossScaleConfig.from_toml(args.config) if args.config else CrossScaleConfig()
    updates: dict[str, Any] = {}
    for name in ("sizes", "seeds", "topics", "protocols"):
        if getattr(args, name) is not None:
            updates[name] = getattr(args, name)
    if args.deepset:
        updates["deepset"] = True
    if args.export_per_user:
        updates["export_per_user"] = True
    try:
        cfg = CrossScaleConfig.model_validate({**cfg.model_dump(), **updates})
    except ConfigError as exc:
        raise ConfigError(f"invalid study settings: {str(exc).split(': ', 1)[-1]}") from exc
    from aumann.io import ensure_output_dir, lock_output_dir

    ensure_output_dir(args.out, "study output directory")
    lock_output_dir(args.out, command=command_line("bluesky", "study"))  # one writer per folder
    summary = run_crossscale(args.counts, args.out, cfg, progress=not args.no_progress,
                             interactive=False if getattr(args, "static", False) else None,
                             command=command_line("bluesky", "study"))
    keys = ("data", "flip_cells_positive", "epsilon", "residual_law_max_deviation", "rand_mean_shift_pp",
            "cells_skipped_on_resume", "cells_recomputed_after_failed_check", "timings")
    from aumann.io import dumps_json

    print(dumps_json({k: summary.get(k) for k in keys}, indent=1), end="")  # strict JSON: NaN is null
    print(f"tables, figures, summary.json, report.html and report.md in {terminal_text(args.out)}")
    return 0
