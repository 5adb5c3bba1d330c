"""``aumann attribute PANEL --indicator heat [--method closed|path] [--steps K] --out DIR``, or
``aumann attribute --trace FILE [--spec SPEC.toml] --indicator ... --out DIR`` for an event log of another
simulator (OASIS, OpenTelemetry spans, Concordia, a long table; see docs/traces.md)."""

from __future__ import annotations

import argparse
import dataclasses
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from aumann.cli.args import integer, number, path, recorded
from aumann.cli.terminal import terminal_text
from aumann.errors import BaselineError, ConfigError, UnusedArgumentWarning


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attribute",
        help="attribute a saved panel with the Aumann–Shapley engine",
        description="Attribute a macro indicator to every agent and step of a saved panel (.npz written "
        "by Panel.save). Writes attribution.npz, phi_by_step.csv, top_agents.csv, summary.json, manifest.json "
        "and the reports report.html (one self-contained page) and report.md. With --trace, an event log of "
        "another simulator is read into a panel first (panel.npz, trace_report.json) and the deletion study is "
        "the masking game (deletion_masking.json/.csv): a log cannot be re-simulated.",
    )
    p.add_argument("panel", type=path, nargs="?", help="panel file written by Panel.save (.npz); or give --trace")
    t = p.add_argument_group("traces (event logs of other simulators; docs/traces.md)")
    t.add_argument("--trace", type=path, help="an OASIS SQLite database, OpenTelemetry JSONL spans (a file or a "
                   "directory of shards), a Concordia structured log, or a CSV/Parquet/JSONL long table")
    t.add_argument("--spec", type=path, help="trace spec (TOML): agent, step, action, features, alive rule "
                   "(default: the detected format's built-in spec)")
    t.add_argument("--trace-format", help="the trace's format (oasis, otel, concordia, table; default: detected)")
    t.add_argument("--bin", help="bin timestamps into steps of this width (e.g. 1h, 30m, 1d); overrides step.bin")
    t.add_argument("--skip-bad", action="store_true", help="skip and count records with a missing or unusable "
                   "field instead of stopping at the first (on_bad = 'skip')")
    t.add_argument("--features", help="comma-separated features the indicator sees (default: all the spec builds)")
    t.add_argument("--deletion-k", type=integer(minimum=1, maximum=10_000_000), default=None,
                   help="agents deleted at most in the masking deletion study (default: 5%% of the living, 10-200)")
    t.add_argument("--no-deletion", action="store_true", help="skip the masking deletion study")
    t.add_argument("--real-people", action="store_true", help="the log records real people: key agents by "
                   "opaque indices and report activity tiers (also real_people = true in the spec)")
    t.add_argument("--export-identifiers", action="store_true", help="with real people: also write "
                   "identifiers.csv (opaque index → real id)")
    p.add_argument("--indicator", required=True,
                   help="registered indicator name (lin, heat, var, gini, gini_coefficient, ...) or your own as "
                        "path/to/file.py:fn or package.module:fn (an Indicator or a batched torch function)")
    p.add_argument("--method", choices=("auto", "closed", "path"), default="auto",
                   help="closed form, path integral, or closed form when available (default)")
    p.add_argument("--steps", type=integer(minimum=1, maximum=1_000_000), default=None,
                   help="integration points K for the path integral (at most 4096 with --rule gauss-legendre, "
                        "exact for polynomials of degree 2K − 1; 10⁶ with midpoint; default 30)")
    p.add_argument("--rule", choices=("gauss-legendre", "midpoint"), default=None,
                   help="quadrature rule of the path integral (default gauss-legendre)")
    p.add_argument("--power", type=number(0, exclusive_minimum=True, maximum=1000), default=None,
                   help="substitution τ = u^p (4 for log-type integrands; default 1)")
    p.add_argument("--tol", type=number(0, exclusive_minimum=True, maximum=1), default=None,
                   help="adaptive mode: raise K until the relative gap ≤ tol")
    p.add_argument("--baseline", default="zero", help="zero | mean | pre-event | previous")
    p.add_argument("--per-feature", action="store_true", help="also store per-feature attributions")
    p.add_argument("--out", type=path, required=True, help="output directory")
    p.add_argument("--static", action="store_true", help="static PNG figures in report.html even with Bokeh installed")
    p.add_argument("--no-report", action="store_true", help="skip report.html / report.md (aumann report writes them)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aumann.cli.command import command_line, refuse_if_busy

    if (args.panel is None) == (args.trace is None):
        raise ConfigError("give a panel file or --trace FILE (one of them)")
    given = (args.spec, args.trace_format, args.bin, args.skip_bad, args.features, args.real_people,
             args.export_identifiers)  # given at all: `--features ""` is given too
    if args.trace is None and any(v is not None and v is not False for v in given):
        raise ConfigError("--spec, --trace-format, --bin, --skip-bad, --features, --real-people and "
                          "--export-identifiers apply to --trace")
    if args.deletion_k is not None and (args.trace is None or args.no_deletion):  # it had nothing to act on
        raise ConfigError("--deletion-k sizes the masking deletion study, which --no-deletion skips: leave one "
                          "of them out"
                          if args.trace is not None else
                          "--deletion-k sizes the masking deletion study, which only --trace runs: a saved panel "
                          "gets none (leave --deletion-k out)")
    path_given = _path_flags(args)
    if args.static and args.no_report:  # no page is written: the flag had nothing to act on
        raise ConfigError("--static sets the figures of report.html, which --no-report skips: leave one of them out")
    if args.panel is not None and not args.panel.exists():
        raise ConfigError(f"panel file {str(args.panel)!r} does not exist")
    if args.panel is not None and _table_suffix(args.panel) is not None:
        raise ConfigError(f"{str(args.panel)!r} is a {_table_suffix(args.panel)} table, not a panel file (.npz written "
                          "by Panel.save): read a long table (one row per agent and step) with --trace FILE --spec "
                          "SPEC.toml (docs/traces.md), or save it as a panel first (Panel.from_dataframe(df).save)")
    refuse_if_busy(args.out, "attribute")  # an --out another live command writes: now, before torch's import
    from rich.table import Table

    from aumann.attribution import BASELINES, AumannShapley, Panel, attribute, indicators
    from aumann.io import ensure_output_dir, lock_output_dir
    from aumann.progress import StageTimer, rich_console

    # the flags and --out are checked before the work: a trace's read takes minutes, and an unknown --indicator or
    # --baseline, or an --out that is a file, used to be found only after it
    f = indicators.get(args.indicator)
    if args.baseline not in BASELINES:
        raise BaselineError(f"unknown --baseline {args.baseline!r}; use one of {list(BASELINES)}")
    closed = {"auto": None, "closed": True, "path": False}[args.method]
    # only the flags given reach the method: those left out are its defaults, not arguments it could find unused
    method = AumannShapley(**{k: getattr(args, k) for k in path_given}, closed_form=closed)
    if args.trace is not None:
        _out_apart_from_trace(args.out, args.trace)
    out: Path = ensure_output_dir(args.out, "--out")
    lock_output_dir(out, command=command_line("attribute"))  # one writer: another command writing there stops now
    _check_outputs(out, args)  # a file of your own with a result's name stops the command now, not after the work
    _stale_outputs(out, args)
    timer = StageTimer()
    trace = None
    if args.trace is not None:
        timer.start("read trace")
        trace = _read_trace(args)
        panel = trace["panel"]
    else:
        timer.start("load panel")
        panel = Panel.load(args.panel)
    timer.start("attribute")
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # said below in the command's words (--steps, --method path), not the method's
        warnings.simplefilter("ignore", UnusedArgumentWarning)
        res = attribute(f, panel, method=method, baseline=args.baseline, per_feature=args.per_feature, progress=True)
    seconds = time.perf_counter() - t0
    unused = _unused_path_flags(args, path_given, res.provenance)

    timer.start("write results")
    from aumann.io import journaled, settle_journal

    with journaled(out):  # each result recorded before it is in place: interrupted, the next run knows it as ours
        _write_results(out, args, f, panel, res, seconds, timer, trace, unused)
    settle_journal(out)

    con = rich_console()
    name = terminal_text(f.name, rich=True)
    tab = Table(title=f"{name} on {panel.T}×{panel.N}×{panel.D} ({res.provenance.get('rule')})")
    for col in ("method", "K", "seconds", "max |Σφ−Δv|", "Δv (first step)"):
        tab.add_column(col)
    tab.add_row(res.method, str(res.provenance.get("steps")), f"{seconds:.4f}", f"{res.max_efficiency_gap:.3g}",
                f"{res.delta_v[0]:.6g}")
    con.print(tab)
    con.print(f"wrote {terminal_text(out, rich=True)}/attribution.npz, phi_by_step.csv, top_agents.csv, summary.json, "
              "manifest.json"
              + ("" if trace is None else ", panel.npz, trace_report.json"
                 + ("" if args.no_deletion else ", deletion_masking.json, deletion_masking.csv"))
              + ("" if args.no_report else ", report.html, report.md"))
    return 0


#: the suffixes of long tables (``--trace`` reads them), which the panel argument took for .npz archives
_TABLE_SUFFIXES = {".csv": "CSV", ".tsv": "CSV", ".parquet": "Parquet", ".pq": "Parquet", ".jsonl": "JSON lines",
                   ".ndjson": "JSON lines", ".json": "JSON"}


def _table_suffix(p: Path) -> str | None:
    """The kind of long table ``p``'s name says it is (``.csv``, ``.csv.gz``, ``.parquet``, ...), else None (also
    for a zip archive, whatever its name: a panel saved under another name loads as before)."""
    if not p.is_file():  # a FIFO would block the open; a directory: Panel.load says what it is
        return None
    try:
        with open(p, "rb") as fh:
            if fh.read(2) == b"PK":
                return None
    except OSError:
        return None  # (a directory, an unreadable file: Panel.load says which)
    suffixes = [x.lower() for x in p.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".zst"):
        suffixes = suffixes[:-1]
    return _TABLE_SUFFIXES.get(suffixes[-1]) if suffixes else None


#: the path integral's flags and their defaults (given with --method closed, they had nothing to act on)
_PATH_FLAGS = {"steps": 30, "rule": "gauss-legendre", "power": 1.0, "tol": None}


def _path_flags(args: argparse.Namespace) -> list[str]:
    """Refuse the path integral's flags with ``--method closed`` (the closed form has no integration points: a
    ``--tol 1e-6`` or ``--steps 500`` was dropped without a word, and the manifest recorded it as if it had been
    used), then fill in their defaults. Returns the names of those given (``["steps", "tol"]``)."""
    given = [k for k in _PATH_FLAGS if getattr(args, k) is not None]
    if args.method == "closed" and given:
        raise ConfigError(f"{', '.join(f'--{k}' for k in given)} set the path integral, which --method closed does "
                          "not compute: leave them out, or use --method path (or auto)")
    for k, default in _PATH_FLAGS.items():
        if getattr(args, k) is None:
            setattr(args, k, default)
    return given


def _unused_path_flags(args: argparse.Namespace, given: list[str], provenance: dict) -> list[str]:
    """The path integral's flags given (``--steps 500``) where ``--method auto`` picked the closed form, so no
    path integral ran: said once as an :class:`~aumann.errors.UnusedArgumentWarning` and returned for the manifest
    (``unused_flags``). They were dropped without a word while manifest.json recorded them as the run's setting."""
    if not given or not provenance.get("closed_form"):
        return []
    flags = [f"--{k} {getattr(args, k):g}" if isinstance(getattr(args, k), float) else f"--{k} {getattr(args, k)}"
             for k in given]
    warnings.warn(f"{', '.join(flags)} given but unused: --method auto used the closed form of {args.indicator!r} "
                  f"(it has one at the zero baseline), so no path integral ran; --method path integrates with "
                  f"{'them' if len(flags) > 1 else 'it'}", UnusedArgumentWarning, stacklevel=2)
    return [f.split(" ")[0] for f in flags]


def _write_results(out: Path, args: argparse.Namespace, f: Any, panel: Any, res: Any, seconds: float, timer: Any,
                   trace: dict | None, unused: list[str]) -> None:
    """The result files, the manifest (recording each with its SHA-256) and the pages."""
    from aumann.cli.command import command_line
    from aumann.io import OUTPUTS_COMPLETE, adopt_outputs, plain, write_csv, write_json
    from aumann.manifest import redact_text, write_manifest
    from aumann.studies.pages import not_alive_rows, render_report, unfinish, write_top_agents

    _remove_stale(out, args)  # checked again: the folder may have changed while the attribution ran
    names = _check_outputs(out, args)
    adopt_outputs(out, names)  # the earlier run's files stay known as aumann's once its manifest goes (below)
    unfinish(out)  # until the new manifest: interrupted here, the folder is no finished run, not a mix of two
    # the result files hold what the panel and flags determine (the same bytes on every run); the wall-clock
    # seconds are in manifest.json alone (attribute_seconds, seconds, stage_seconds)
    dataclasses.replace(res, provenance=_timeless(res.provenance)).save(out / "attribution.npz")
    rows = zip(plain(res.steps), res.delta_v.tolist(), res.by_step().tolist(), res.efficiency_gap.tolist())
    write_csv(out / "phi_by_step.csv", [{"step": s, "delta_v": dv, "sum_phi": sp, "efficiency_gap": eg}
                                        for s, dv, sp, eg in rows])
    write_top_agents(out, res, panel)
    summary = {**_timeless(res.summary()),
               "panel": redact_text(str(args.panel if trace is None else args.trace)),  # as the manifest records it
               "synthetic": bool(panel.meta.get("synthetic", False))}
    if "tier" in res.groups and np.all(res.delta_v != 0) and float(res.delta_v.sum()) != 0:
        summary["tier_shares"] = res.group_shares("tier")
    dead = not_alive_rows(res, panel)  # the page's heatmap draws these cells as "not alive", not as φ = 0
    if dead is not None:
        summary["not_alive"] = dead
    extra: dict = {}
    if trace is not None:
        extra = _write_trace_outputs(out, args, trace, f, panel, res, timer)
        summary["trace"] = {k: extra["trace"][k] for k in ("format", "records", "events", "n_skipped",
                                                           "n_edges_skipped", "agents", "steps")}
        if "deletion" in extra:
            summary["deletion_masking"] = extra["deletion"]
    write_json(out / "summary.json", summary, indent=2)
    timer.stop()
    from aumann.io import file_digests

    # what a later run into this folder may replace or remove as this run's (a file of your own of such a name, never)
    outputs = file_digests(out, sorted(n for n in names if n not in _PAGES and (out / n).is_file()
                                       and not (out / n).is_symlink()))
    write_manifest(out, command_line("attribute"), config=recorded(args), seeds=None,
                   extra={OUTPUTS_COMPLETE: True, "panel_meta": panel.meta, "report_kind": "attribute",
                          "seconds": timer.total, "attribute_seconds": seconds,
                          "stage_seconds": timer.seconds, "synthetic": summary["synthetic"], "outputs_sha256": outputs,
                          **({"unused_flags": unused} if unused else {}), **extra})
    if not args.no_report:
        render_report(out, interactive=False if args.static else None)


#: the files ``aumann attribute --trace`` writes in --out (report.html and report.md by render_report)
_OUTPUTS = frozenset({"attribution.npz", "phi_by_step.csv", "top_agents.csv", "summary.json", "manifest.json",
                      "panel.npz", "trace_report.json", "deletion_masking.json", "deletion_masking.csv",
                      "identifiers.csv", "report.html", "report.md"})


#: the files of --out that one run of ``aumann attribute`` writes and another may not (removed as stale)
_STALE = ("deletion_masking.csv", "deletion_masking.json", "identifiers.csv", "trace_report.json")


_PAGES = ("manifest.json", "report.html", "report.md")
#: the commands whose output folder this one may write again (both write attribution.npz, summary.json and pages)
_SAME_KIND = ("aumann attribute", "aumann demo")


def _check_outputs(out: Path, args: argparse.Namespace) -> list[str]:
    """The files of --out this run writes (or, the pages with --no-report, removes), each checked to be absent or one
    an aumann command recorded writing there (:func:`aumann.io.check_outputs`): a file of your own with a result's
    name — in a folder no aumann command wrote too — stops the command, before the panel is read."""
    from aumann.io import check_outputs, recorded_outputs

    names = ["attribution.npz", "phi_by_step.csv", "top_agents.csv", "summary.json"]
    if args.trace is not None:
        names += ["panel.npz", "trace_report.json"]
        if not args.no_deletion:
            names += ["deletion_masking.json", "deletion_masking.csv"]
        if args.export_identifiers:
            names.append("identifiers.csv")
    rec = recorded_outputs(out)
    if not args.no_report or rec.aumann:  # written, or an earlier aumann command's removed (unfinish)
        names += _PAGES
    else:
        names.append("manifest.json")
    # (a folder another command wrote — a study's, a run's, a counts folder — is refused: its manifest would go)
    check_outputs(out, names, recorded=rec, commands=_SAME_KIND)
    return names


def _stale_outputs(out: Path, args: argparse.Namespace) -> list[str]:
    """The result files an earlier run left in --out that this run does not write, each checked to be one that
    earlier run recorded writing (:func:`_remove_stale` removes them once the results are computed). Called before
    the panel or trace is read and the attribution computed (a file of your own there stopped the command only
    after that work), and again just before the removal (the folder may have changed meanwhile)."""
    from aumann.io import check_stale, recorded_outputs

    rec = recorded_outputs(out, command="aumann attribute ")
    if not rec.aumann:
        return []  # a folder of your own keeps its files
    # the files the earlier run recorded writing (an older aumann recorded none: every such file is kept and refused)
    ours = rec.digests
    written = set()
    if args.trace is not None and not args.no_deletion:
        written |= {"deletion_masking.json", "deletion_masking.csv"}
    # (--export-identifiers without real people stops the read with a ConfigError: identifiers.csv is then written)
    if args.trace is not None and args.export_identifiers:
        written.add("identifiers.csv")
    stale = set(_STALE) - {"trace_report.json"}  # (the pages: unfinish)
    if args.trace is None:
        stale.add("trace_report.json")  # a trace run's; the panel given may be that run's panel.npz, which stays
    given = {p.resolve() for p in (args.panel, args.trace, args.spec) if p is not None}
    names = [name for name in sorted(stale - written) if (out / name).resolve() not in given]
    for name in names:  # every file checked before any goes: a refusal leaves the earlier run whole
        check_stale(out / name, within=out, recorded=ours)
    return names


def _remove_stale(out: Path, args: argparse.Namespace) -> None:
    """Remove the result files an earlier run left in --out that this run does not write: re-run into the same
    folder with --no-deletion, the report presented the earlier run's deletion study (its t*, its agents, its f)
    as this run's; without --export-identifiers, an earlier run's identifiers.csv (real ids) stayed beside the
    opaque indices (the earlier report pages, which described another attribution, go in :func:`unfinish`).
    Only in a folder whose manifest.json says an earlier ``aumann attribute`` wrote it (a folder of your own keeps
    its files), and only a file that manifest records writing (``outputs_sha256``: its name and SHA-256): a file of
    your own of such a name put there since (or one changed since) is kept and refused with an
    :class:`~aumann.errors.OutputError` naming it (:func:`_stale_outputs`), since the report would show it as this
    run's; a file given as the input is never removed."""
    from aumann.io import remove_stale

    for name in _stale_outputs(out, args):
        remove_stale(out / name, within=out)  # each checked by _stale_outputs


def _out_apart_from_trace(out: Path, trace: Path) -> None:
    """Refuse, before the trace is read, an --out where the results would land among the trace's own files: the
    directory of shards itself (or a glob's folder), whose next read then took phi_by_step.csv, summary.json ...
    for shards of the table or span files, or a folder where an output would replace the trace file."""
    from aumann.data.traces.duck import table_files
    from aumann.errors import OutputError

    dest = out.resolve()
    if trace.is_dir():
        folders = {trace.resolve()}
    elif trace.is_file() or trace.is_symlink():  # a file: only an output of the same name would replace it
        named = {(trace.parent.resolve(), trace.name), (trace.resolve().parent, trace.resolve().name)}
        hit = next((name for folder, name in named if folder == dest and name in _OUTPUTS), None)
        if hit is not None:
            raise OutputError(f"--out {str(out)!r} would replace the trace {str(trace)!r} with "
                              f"the result file {hit}: give another --out")
        return
    else:  # a glob: the folders of the files it matches
        folders = {f.resolve().parent for f in table_files(trace)}
    if dest in folders:
        raise OutputError(f"--out {str(out)!r} is the folder the trace {str(trace)!r} is read "
                          "from: the results (CSV and JSON files) would become files of the trace, read with it next "
                          "time; give another --out (a subfolder is fine)")


def _read_trace(args: argparse.Namespace) -> dict:
    """The trace's panel (features selected, pseudonymised for real people) and its read report."""
    from aumann.data.traces import read_trace
    from aumann.data.traces.privacy import pseudonymise, retier
    from aumann.progress import rich_console

    names = None if args.features is None else [x.strip() for x in args.features.split(",") if x.strip()]
    if names is not None and not names:  # `--features ""` or `,,`: refused before the trace is read
        raise ConfigError(f"--features {args.features!r} names no feature: give the features the indicator sees, "
                          "comma-separated (e.g. --features posts,likes)")
    twice = sorted({x for x in names or () if names.count(x) > 1})
    if twice:  # refused before the read, not as the panel's 'feature names must be unique' after it
        raise ConfigError(f"--features {args.features!r} names {twice} more than once")
    # --real-people is the spec's real_people for the read: the read's own messages (an overflowing sum, ids one
    # label) named the real id, and trace_report.json and panel.npz recorded real_people = false
    read = read_trace(args.trace, args.spec, format=args.trace_format, bin=args.bin,
                      on_bad="skip" if args.skip_bad else None, real_people=True if args.real_people else None,
                      progress=True)
    con = rich_console(stderr=True)
    for line in read.report.lines():
        con.print(terminal_text(line), markup=False, highlight=False)
    panel = read.panel
    if names is not None:
        missing = [x for x in names if x not in panel.features]
        if missing:
            raise ConfigError(f"--features {args.features!r}: {missing} not among the trace's features "
                              f"{list(panel.features)}")
        panel = panel.select_features(names)
    real = bool(args.real_people or panel.meta.get("real_people"))
    mapping = read.identifiers  # the spec's real_people: read_trace keyed the panel by opaque indices already
    if mapping is not None:
        panel = retier(panel) if names is not None else panel  # tiers of the features the indicator sees
    elif real:
        panel, mapping = pseudonymise(panel)
    elif args.export_identifiers:
        raise ConfigError("--export-identifiers applies with --real-people (simulated agents keep their ids)")
    return {"panel": panel, "report": read.report, "real_people": real, "mapping": mapping}


#: the trace report's wall-clock entries (kept in manifest.json, not in trace_report.json)
_WALL_CLOCK = ("seconds", "events_per_second")


def _write_trace_outputs(out: Path, args: argparse.Namespace, trace: dict, f, panel, res, timer) -> dict:
    """panel.npz, trace_report.json, identifiers.csv (on request) and the masking deletion study."""
    from aumann.io import write_csv, write_json
    from aumann.manifest import int64_digits, redact

    # its paths as the manifest records them (a key in a path or URL), and a rounded_largest past int64 as its digits
    report = int64_digits(redact(trace["report"].to_dict()))
    if trace["real_people"] and not args.export_identifiers:
        report["spec"] = _withhold_ids(report["spec"])
    panel.save(out / "panel.npz")
    # what the trace and the spec determine (the same bytes on every run); how long reading took (seconds,
    # events_per_second) is in manifest.json's "trace" alone
    write_json(out / "trace_report.json", {k: v for k, v in report.items() if k not in _WALL_CLOCK}, indent=2)
    extra: dict = {"trace": {k: v for k, v in report.items() if k != "spec"}, "trace_spec": report["spec"],
                   "real_people": trace["real_people"]}
    if trace["mapping"] is not None and args.export_identifiers:
        write_csv(out / "identifiers.csv", trace["mapping"], ["index", "id"])
    if not args.no_deletion:
        from aumann.evaluation.panel_deletion import deletion_rows, masking_deletion

        timer.start("masking deletion")
        study = masking_deletion(f, panel, res, baseline=args.baseline, k_del=args.deletion_k)
        write_json(out / "deletion_masking.json", study, indent=2)
        write_csv(out / "deletion_masking.csv", deletion_rows(study), ["k", "f_k", "relative_drop",
                                                                        "relative_drop_random"])
        extra["deletion"] = {k: study[k] for k in ("game", "t_star", "step", "k_del", "k_drop", "living")}
        extra["deletion"].update({"deletion_auc": study["aumann_shapley"]["deletion_auc"],
                                  "deletion_auc_random": study["random"]["deletion_auc"],
                                  "drop_at_k": study["aumann_shapley"]["drop_at_k"],
                                  "drop_at_k_random": study["random"]["drop_at_k"]})
    return extra


_WITHHELD = "<withheld: real people>"


def _withhold_ids(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as trace_report.json and manifest.json record it for a log of real people: the ids it lists
    (``[agent] exclude``, a ``[where]`` list on the agent field) withheld, one placeholder per id; they were written
    as they are, real handles beside the opaque indices (``--export-identifiers`` keeps them)."""
    import copy

    spec = copy.deepcopy(spec)
    agent = spec.get("agent") or {}
    if agent.get("exclude"):
        agent["exclude"] = [_WITHHELD] * len(agent["exclude"])
    where = spec.get("where") or {}
    if agent.get("field") in where:
        where[agent["field"]] = [_WITHHELD] * len(where[agent["field"]])
    return spec


def _timeless(prov: Any) -> Any:
    """``prov`` without its wall-clock ``seconds`` (at any depth)."""
    if isinstance(prov, dict):
        return {k: _timeless(v) for k, v in prov.items() if k != "seconds"}
    if isinstance(prov, list | tuple):
        return type(prov)(_timeless(v) for v in prov)
    return prov
