"""``aumann attribute PANEL --indicator heat [--method closed|path] [--steps K] --out DIR``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from aumann.cli.args import integer, number, path
from aumann.cli.terminal import terminal_text
from aumann.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attribute",
        help="attribute a saved panel with the Aumann–Shapley engine",
        description="Attribute a macro indicator to every agent and step of a saved panel (.npz written "
        "by Panel.save). Writes attribution.npz, phi_by_step.csv, top_agents.csv, summary.json, manifest.json "
        "and the reports report.html (one self-contained page) and report.md.",
    )
    p.add_argument("panel", type=path, help="panel file written by Panel.save (.npz)")
    p.add_argument("--indicator", required=True, help="registered indicator name (lin, heat, var, gini, ...)")
    p.add_argument("--method", choices=("auto", "closed", "path"), default="auto",
                   help="closed form, path integral, or closed form when available (default)")
    p.add_argument("--steps", type=integer(minimum=1, maximum=1_000_000), default=30,
                   help="integration points K for the path integral")
    p.add_argument("--rule", choices=("gauss-legendre", "midpoint"), default="gauss-legendre")
    p.add_argument("--power", type=number(0, exclusive_minimum=True, maximum=1000), default=1.0,
                   help="substitution τ = u^p (4 for log-type integrands)")
    p.add_argument("--tol", type=number(0, exclusive_minimum=True, maximum=1), default=None,
                   help="adaptive mode: raise K until the relative gap ≤ tol")
    p.add_argument("--baseline", default="zero", help="zero | mean | pre-event | previous")
    p.add_argument("--per-feature", action="store_true", help="also store per-feature attributions")
    p.add_argument("--out", type=path, required=True, help="output directory")
    p.add_argument("--static", action="store_true", help="static PNG figures in report.html even with Bokeh installed")
    p.add_argument("--no-report", action="store_true", help="skip report.html / report.md (aumann report writes them)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from aumann.attribution import AumannShapley, Panel, attribute, indicators
    from aumann.io import ensure_output_dir, plain, write_csv, write_json
    from aumann.manifest import write_manifest
    from aumann.progress import StageTimer
    from aumann.studies.pages import render_report, write_top_agents

    if not args.panel.exists():
        raise ConfigError(f"panel file {str(args.panel)!r} does not exist")
    timer = StageTimer()
    timer.start("load panel")
    panel = Panel.load(args.panel)
    f = indicators.get(args.indicator)
    closed = {"auto": None, "closed": True, "path": False}[args.method]
    method = AumannShapley(steps=args.steps, rule=args.rule, power=args.power, tol=args.tol, closed_form=closed)
    out: Path = ensure_output_dir(args.out, "--out")  # before the work: an unwritable --out fails now
    timer.start("attribute")
    t0 = time.perf_counter()
    res = attribute(f, panel, method=method, baseline=args.baseline, per_feature=args.per_feature, progress=True)
    seconds = time.perf_counter() - t0

    timer.start("write results")
    res.save(out / "attribution.npz")
    rows = zip(plain(res.steps), res.delta_v.tolist(), res.by_step().tolist(), res.efficiency_gap.tolist())
    write_csv(out / "phi_by_step.csv", [{"step": s, "delta_v": dv, "sum_phi": sp, "efficiency_gap": eg}
                                        for s, dv, sp, eg in rows])
    write_top_agents(out, res, panel)
    summary = {**res.summary(), "seconds": seconds, "panel": str(args.panel),
               "synthetic": bool(panel.meta.get("synthetic", False))}
    if "tier" in res.groups and np.all(res.delta_v != 0) and float(res.delta_v.sum()) != 0:
        summary["tier_shares"] = res.group_shares("tier")
    write_json(out / "summary.json", summary, indent=2)
    timer.stop()
    write_manifest(out, "aumann attribute", config=vars(args), seeds=None,
                   extra={"panel_meta": panel.meta, "report_kind": "attribute", "seconds": timer.total,
                          "stage_seconds": timer.seconds, "synthetic": summary["synthetic"]})
    if not args.no_report:
        render_report(out, interactive=False if args.static else None)

    con = Console()
    name = terminal_text(f.name, rich=True)
    tab = Table(title=f"{name} on {panel.T}×{panel.N}×{panel.D} ({res.provenance.get('rule')})")
    for col in ("method", "K", "seconds", "max |Σφ−Δv|", "Δv (first step)"):
        tab.add_column(col)
    tab.add_row(res.method, str(res.provenance.get("steps")), f"{seconds:.4f}", f"{res.max_efficiency_gap:.3g}",
                f"{res.delta_v[0]:.6g}")
    con.print(tab)
    con.print(f"wrote {terminal_text(out, rich=True)}/attribution.npz, phi_by_step.csv, top_agents.csv, summary.json, "
              "manifest.json"
              + ("" if args.no_report else ", report.html, report.md"))
    return 0
