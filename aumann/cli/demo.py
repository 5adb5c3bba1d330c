"""``aumann demo``: attribute a synthetic heavy-tailed panel and print tier shares and timings."""

from __future__ import annotations

import argparse
import dataclasses
import time

from aumann.cli.args import integer, path, recorded, seed
from aumann.cli.terminal import terminal_text

#: the files ``aumann demo --out`` writes
_OUTPUTS = ("attribution.npz", "top_agents.csv", "summary.json", "manifest.json", "report.html", "report.md")
#: the commands whose output folder demo may write again (another's, a study's or a run's, is refused)
_SAME_KIND = ("aumann demo", "aumann attribute")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="quick demo: attribute a synthetic heavy-tailed panel (tier shares, timings)")
    p.add_argument("--agents", type=integer(minimum=10, maximum=100_000_000), default=100_000,
                   help="number of agents (≥ 10)")
    p.add_argument("--steps", type=integer(minimum=1, maximum=1_000_000), default=14, help="number of steps")
    p.add_argument("--seed", type=seed, default=0, help="generator seed (non-negative)")
    p.add_argument("--out", type=path, default=None,
                   help="optional directory: summary.json, the heat attribution (attribution.npz, top_agents.csv), "
                   "manifest and report.html / report.md (marked SYNTHETIC)")
    p.add_argument("--static", action="store_true", help="static PNG figures in report.html even with Bokeh installed")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aumann.cli.command import command_line
    from aumann.io import (
        OUTPUTS_COMPLETE,
        adopt_outputs,
        check_outputs,
        ensure_output_dir,
        file_digests,
        journaled,
        lock_output_dir,
        settle_journal,
        write_json,
    )

    if args.static and args.out is None:  # no page is written without --out: the flag had nothing to act on
        from aumann.errors import ConfigError

        raise ConfigError("--static sets the figures of report.html, which aumann demo writes only with --out DIR: "
                          "give --out, or leave --static out")
    if args.out:  # before the imports below (torch, the pages: seconds), so a busy folder is refused at once
        ensure_output_dir(args.out, "--out")
        lock_output_dir(args.out, command=command_line("demo"))  # one writer: another command there stops now
        # a file of your own with a result's name is never replaced (refused now), nor another command's folder
        check_outputs(args.out, _OUTPUTS, commands=_SAME_KIND)
    from rich.table import Table

    from aumann.attribution import AumannShapley, attribute, indicators
    from aumann.cli.attribute import _timeless
    from aumann.data.synthetic import heavy_tailed_panel
    from aumann.errors import ZeroDeltaVError
    from aumann.manifest import write_manifest
    from aumann.progress import StageTimer, rich_console
    from aumann.studies.pages import render_report, unfinish, write_top_agents

    con = rich_console()
    t0 = time.perf_counter()
    panel = heavy_tailed_panel(args.agents, args.steps, rng=args.seed)
    con.print(f"synthetic heavy-tailed panel (SYNTHETIC, not calibrated): {panel} in "
              f"{time.perf_counter() - t0:.2f} s")
    tab = Table(title="tier shares R_G (whole window) and timings")
    for col in ("indicator", "method", "top 1%", "mid 9%", "tail 90%", "max |Σφ−Δv|", "seconds"):
        tab.add_column(col, justify="right")
    rows = []
    timer = StageTimer()
    timer.add("generate panel", time.perf_counter() - t0)
    heat_res = None
    runs = [(name, AumannShapley()) for name in ("lin", "heat", "var", "gini")]
    runs.append(("heat", AumannShapley(steps=30, closed_form=False)))
    for name, method in runs:
        t = time.perf_counter()
        res = attribute(indicators.get(name), panel, method=method, progress=True)
        sec = time.perf_counter() - t
        timer.add(f"attribute {name} ({'closed form' if res.provenance['closed_form'] else 'path'})", sec)
        if name == "heat" and heat_res is None:
            heat_res = res
        try:
            shares = res.group_shares("tier")
        except ZeroDeltaVError:  # a tiny panel with no activity: nothing to share out (shown as –, stored as null)
            shares = {}
        label = "closed form" if res.provenance["closed_form"] else f"path K={res.provenance['steps']}"
        tab.add_row(name, label, *(f"{100 * shares[g]:.1f}%" if g in shares else "–" for g in ("top", "mid", "tail")),
                    f"{res.max_efficiency_gap:.2e}", f"{sec:.3f}")
        rows.append({"indicator": name, "method": label, "shares": shares,  # its seconds: the manifest's stage
                     "max_efficiency_gap": res.max_efficiency_gap})
    con.print(tab)
    if args.out:
        t = time.perf_counter()
        check_outputs(args.out, _OUTPUTS, commands=_SAME_KIND)  # again: the folder may have changed meanwhile
        with journaled(args.out):  # each file recorded before it is in place: interrupted, the next run knows it
            adopt_outputs(args.out, _OUTPUTS)  # the earlier run's files stay known as aumann's once its manifest goes
            unfinish(args.out)  # until the new manifest: interrupted here, the folder is no finished run, not a mix
            # what the seed determines, the same bytes on every run: the seconds are in the manifest
            dataclasses.replace(heat_res, provenance=_timeless(heat_res.provenance)).save(args.out / "attribution.npz")
            write_top_agents(args.out, heat_res, panel)
            write_json(args.out / "summary.json", {"synthetic": True, "rows": rows, "panel": "heavy_tailed_panel "
                                                   f"(N = {args.agents}, T = {args.steps}, seed {args.seed})"},
                       indent=2)
            timer.add("write results", time.perf_counter() - t)
            outputs = file_digests(args.out, [n for n in _OUTPUTS if n.endswith((".npz", ".csv", ".json"))
                                              and n != "manifest.json"])
            write_manifest(args.out, command_line("demo"), config=recorded(args), seeds={"seed": args.seed},
                           extra={OUTPUTS_COMPLETE: True, "report_kind": "attribute", "synthetic": True,
                                  "panel_meta": panel.meta, "seconds": timer.total, "stage_seconds": timer.seconds,
                                  "outputs_sha256": outputs})
            paths = render_report(args.out, interactive=False if args.static else None)
        settle_journal(args.out)
        con.print(f"SYNTHETIC demo written to {terminal_text(args.out, rich=True)} (report: {paths['html'].name})")
    return 0
