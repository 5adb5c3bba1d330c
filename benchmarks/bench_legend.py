"""Where a line chart's legend goes, on long series: the page's rule against matplotlib's ``loc="best"``.

    python benchmarks/bench_legend.py                      # 10 runs of 1,000, 20,000 and 100,000 steps
    python benchmarks/bench_legend.py --steps 20000 --runs 10

``macro_curve.png`` (one line per run, the first run's original indicator dashed) drawn and saved as PNG two
ways, in the same run:

* ``best``: ``ax.legend(loc="best")``, matplotlib's search over its nine places (what the figure did);
* ``rule``: :func:`aumann.studies.charts.legend_place` (the page's charts' rule) and
  :func:`~aumann.studies.charts.mpl_legend`.

Reference: the same figure saved with its legend at a fixed corner (no placement at all). Each is printed as a
multiple of it (the best of ``--repeat`` rounds), with the load average; the rule's own cost (``legend_place``
alone) as a share of the reference.
"""

from __future__ import annotations

import argparse
import io
import time

import numpy as np
from _env import header

from aumann.studies.charts import Line, legend_place, mpl_legend
from aumann.studies.plotting import pyplot


def _curves(steps: int, runs: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [np.cumsum(rng.normal(size=steps)) for _ in range(runs + 1)]  # the last: run 0's original indicator


def _series(curves: list[np.ndarray]) -> list[Line]:
    x = np.arange(len(curves[0]))
    return [*(Line("C² surrogate", x, f, legend=r == 0) for r, f in enumerate(curves[:-1])),
            Line("original", x, curves[-1])]


def _draw(curves: list[np.ndarray], how: str) -> float:
    """Seconds to draw and save the figure with its legend placed ``how``."""
    plt = pyplot()
    t0 = time.perf_counter()
    fig, ax = plt.subplots(figsize=(7, 4))
    for r, f in enumerate(curves[:-1]):
        ax.plot(f, lw=1.2, alpha=0.8, label="C² surrogate" if r == 0 else None)
    ax.plot(curves[-1], ls="--", lw=1, label="original")
    if how == "best":
        ax.legend(fontsize=8, loc="best")
    elif how == "rule":
        mpl_legend(ax, legend_place(_series(curves)), fontsize=8)
    else:
        ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(io.BytesIO(), dpi=120, format="png")
    plt.close(fig)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[1_000, 20_000, 100_000])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    header("legend placement on long series (macro_curve.png)")
    print(f"{'steps':>8} {'runs':>5} {'fixed s':>8} {'best ×':>7} {'rule ×':>7} {'legend_place / fixed':>21}")
    for steps in args.steps:
        curves = _curves(steps, args.runs)
        _draw(curves, "fixed")  # warm-up: fonts, the Agg backend
        best = {how: min(_draw(curves, how) for _ in range(args.repeat)) for how in ("fixed", "best", "rule")}
        place = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            legend_place(_series(curves))
            place.append(time.perf_counter() - t0)
        fixed = best["fixed"]
        print(f"{steps:>8} {args.runs:>5} {fixed:>8.3f} {best['best'] / fixed:>7.2f} {best['rule'] / fixed:>7.2f} "
              f"{min(place) / fixed:>21.2f}", flush=True)
    header("after")


if __name__ == "__main__":
    main()
