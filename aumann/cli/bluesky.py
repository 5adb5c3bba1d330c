"""``aumann bluesky ...``: the Bluesky cross-scale study's commands.

This module builds the ``bluesky`` command group and its ingestion subcommands (``build-panel``,
``capture``). Other subcommands plug in without editing this file: every entry of
``SUBCOMMAND_PROVIDERS`` names a module and the registration functions in it; each function takes
the group's ``subparsers`` object, adds one parser and sets ``func`` (``run(args) -> int``), the
same contract as a top-level command module. The study's module
``aumann.scenarios.bluesky.cli_study`` provides ``register_synth`` and ``register_study``; a
provider module that does not exist (yet) is skipped, a missing function in it is skipped too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

SUBCOMMAND_PROVIDERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("aumann.scenarios.bluesky.cli_study", ("register_synth", "register_study")),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bluesky", help="Bluesky cross-scale study: ingest Jetstream captures, synthesise, study",
        description="Bluesky cross-scale study (paper, Section 3).",
    )
    sub = parser.add_subparsers(dest="bluesky_command", metavar="SUBCOMMAND")
    _register_build_panel(sub)
    _register_capture(sub)
    for module_name, functions in SUBCOMMAND_PROVIDERS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and module_name.startswith(exc.name):
                continue
            raise
        for fn in functions:
            if hasattr(module, fn):
                getattr(module, fn)(sub)

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
    p.add_argument("files", nargs="+", type=Path, metavar="FILES", help="Jetstream capture files")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--profiles", type=Path, default=None,
                   help="profile snapshot CSV: did, followers_count[, created_at, handle]")
    p.add_argument("--topics", type=Path, default=None, help="directory of topic TOML files (default configs/topics)")
    p.add_argument("--filters", type=Path, default=None,
                   help="TOML with a [filters] table (default configs/bluesky-ingest.toml)")
    p.add_argument("--days", default=None, metavar="FIRST:LAST",
                   help="inclusive UTC window YYYY-MM-DD:YYYY-MM-DD (default: first to last day seen)")
    p.add_argument("--zstd-dictionary", type=Path, default=None,
                   help="zstd dictionary for per-message frames (Jetstream's published dictionary)")
    p.add_argument("--threads", type=int, default=None, help="DuckDB threads")
    p.add_argument("--memory-limit", default=None, help="DuckDB memory limit, e.g. 4GB (spills beyond it)")
    p.add_argument("--temp-dir", type=Path, default=None, help="where DuckDB spills and frames are decoded")
    p.add_argument("--export-identifiers", action="store_true",
                   help="write DIDs and handles (users.parquet, identifiers.parquet); default: redacted")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.set_defaults(func=run_build_panel)


def _parse_days(text: str | None) -> tuple[str, str] | None:
    from aumann.errors import ConfigError

    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"--days must be FIRST:LAST (YYYY-MM-DD:YYYY-MM-DD); got {text!r}")
    return parts[0], parts[1]


def run_build_panel(args: argparse.Namespace) -> int:
    from aumann.scenarios.bluesky.build import write_build_outputs
    from aumann.scenarios.bluesky.filters import load_filters
    from aumann.scenarios.bluesky.ingest import IngestOptions, ingest

    options = IngestOptions(days=_parse_days(args.days), zstd_dictionary=args.zstd_dictionary,
                            threads=args.threads, memory_limit=args.memory_limit, temp_dir=args.temp_dir,
                            progress=not args.quiet)
    counts, report = ingest(args.files, profiles=args.profiles, topics=args.topics,
                            filters=load_filters(args.filters), options=options)
    config = {"files": [str(f) for f in args.files], "profiles": args.profiles, "topics": args.topics,
              "filters": args.filters, "days": args.days, "zstd_dictionary": args.zstd_dictionary,
              "export_identifiers": args.export_identifiers}
    write_build_outputs(counts, report.to_dict(), args.out, export_identifiers=args.export_identifiers,
                        config=config)
    if not args.quiet:
        print(f"{report.valid_events:,} events, {report.malformed_lines:,} malformed lines, "
              f"{report.duplicates:,} duplicates; {report.users_kept:,} of {report.users_seen:,} users kept "
              f"(dropped {json.dumps(report.dropped_users)}); {len(report.days)} day(s); "
              f"{report.throughput_mb_s:.0f} MB/s → {args.out}")
    return 0


# --------------------------------------------------------------------------- capture
def _register_capture(sub: argparse._SubParsersAction) -> None:
    from aumann.scenarios.bluesky.capture import DEFAULT_COLLECTIONS, DEFAULT_ENDPOINT

    p = sub.add_parser(
        "capture", help="record the live Jetstream into daily YYYY-MM-DD.jsonl files (needs aumann[capture])",
        description="Record the public Jetstream v1 stream into one JSONL file per UTC day (by time_us), "
                    "reconnecting with a rewound cursor. Needs network access and the 'websockets' package.",
    )
    p.add_argument("--out", type=Path, required=True, help="directory for the daily files")
    p.add_argument("--collections", nargs="+", default=list(DEFAULT_COLLECTIONS), metavar="NSID",
                   help="wantedCollections (default: posts, reposts, likes, follows)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="seconds to record (default: forever)")
    p.add_argument("--endpoint", default=DEFAULT_ENDPOINT, help="Jetstream /subscribe URL")
    p.add_argument("--cursor", type=int, default=None, help="start cursor (unix µs; default: live tail)")
    p.add_argument("--rewind", type=float, default=5.0, metavar="S", help="cursor rewind on reconnect (seconds)")
    p.set_defaults(func=run_capture)


def run_capture(args: argparse.Namespace) -> int:
    from aumann.manifest import write_manifest
    from aumann.scenarios.bluesky.capture import capture

    stats = capture(args.out, collections=args.collections, duration_s=args.duration, endpoint=args.endpoint,
                    cursor=args.cursor, rewind_s=args.rewind)
    write_manifest(args.out, "aumann bluesky capture",
                   {"collections": args.collections, "duration": args.duration, "endpoint": args.endpoint,
                    "cursor": args.cursor, "rewind": args.rewind},
                   extra={"messages": stats.messages, "unparsed": stats.unparsed, "reconnects": stats.reconnects,
                          "files": stats.files})
    print(f"{stats.messages:,} messages ({stats.unparsed} without time_us), {stats.reconnects} reconnects "
          f"→ {args.out}", file=sys.stderr)
    return 0
