"""``aumann report RUN_DIR``: rewrite ``report.html`` and ``report.md`` of a finished run directory.

Works on the run directories of ``aumann run``, ``aumann attribute``, ``aumann demo --out`` and
``aumann bluesky study``. Nothing is recomputed: attributions, deletion curves, tables, timings and
LLM usage are read back from the directory. Figures are interactive (Bokeh) when the
``aumann[report]`` extra is installed, static PNG otherwise (``--static`` forces PNG).

Examples::

    aumann report runs/midscale-social-seed0
    aumann report out/ --top 50 --static
"""

from __future__ import annotations

import argparse
from typing import Any

from aumann.cli.args import integer, path
from aumann.cli.terminal import terminal_text


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="rewrite report.html and report.md of a finished run directory",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=path, metavar="RUN_DIR", help="a finished run directory")
    p.add_argument("--top", type=integer(minimum=1, maximum=10_000_000), default=None,
                   help="agents in the who-tables and the heatmap (default 20; 1 to 10⁷: more than the run has shows "
                        "all of them, with a note saying so)")
    p.add_argument("--static", action="store_true", help="static PNG figures even when Bokeh is installed")
    p.add_argument("--no-plots", action="store_true", help="leave the figures out")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aumann.cli.command import command_line
    from aumann.io.lock import lock_output_dir

    if args.run_dir.is_dir():  # (a missing folder is refused by render_report, and not made here)
        # a run still writing there stops this now, before the pages' imports (torch, the study's rows: seconds)
        lock_output_dir(args.run_dir, command=command_line("report"))
    from aumann.studies.pages import TOP_AGENTS, render_report

    paths = render_report(args.run_dir, interactive=False if args.static else None,
                          top=TOP_AGENTS if args.top is None else args.top, plots=not args.no_plots)
    size = paths["html"].stat().st_size
    print(terminal_text(f"wrote {paths['html']} ({size / 1e6:.2f} MB) and {paths['md']}"))
    return 0


__all__ = ["register", "run"]
