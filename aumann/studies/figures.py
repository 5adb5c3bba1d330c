"""The run directory's PNG figures (matplotlib, Agg backend, imported lazily).

* ``macro_curve.png``: f over steps per run, t* marked (and labelled above the plot, as on the page), original
  indicator dashed, the legend where the page's charts put theirs (:func:`~aumann.studies.charts.legend_place`);
* ``attribution_heatmap.png``: agent × step φ of run 0, the 20 agents with the largest signed
  Φ_i = Σ_t φ_{i,t}, top first (the agents of the report's who-table); a step at which an agent is not alive
  is hatched grey ("not alive"), not drawn as the white of φ = 0;
* ``deletion_curves.png``: mean normalised drop vs k per method, re-simulation and masking oracles (at K_del = 1,
  one point per method, each its own marker, set side by side and named under it: on one spot they hid each other;
  past it, the legend where the page's charts put theirs: :func:`~aumann.studies.charts.legend_place`).

Names and ids are drawn as plain text, never mathtext (:mod:`aumann.studies.plotting`); the heatmap's colour-bar
label, a constant, is the one mathtext string (φ with the subscript i,t). Each is its own
function (:data:`FIGURES`), so that the report stage can draw them as separate optional parts
(:class:`aumann.studies.report.ReportParts`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from aumann.attribution.metrics import largest_first
from aumann.errors import StudyError
from aumann.io import atomic_path, read_npz, remove_stale
from aumann.studies.charts import (
    POINT_LABEL_TITLE_PAD,
    Line,
    Point,
    hatch_not_alive,
    legend_place,
    mpl_legend,
    mpl_pad,
    mpl_point_labels,
    short_label,
    t_star_label,
)
from aumann.studies.plotting import plain_text_figures, pyplot
from aumann.studies.rundir import DELETION_CURVES, HEATMAP, MACRO_CURVE, RunDir, StudyResult
from aumann.studies.tables import methods_of

#: the colour bar's label of ``attribution_heatmap.png``: φ with the subscript i,t (matplotlib mathtext)
COLORBAR_LABEL = r"$\varphi_{i,t}$"


def _save(fig: Any, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    return path


def _whole_numbers(ax: Any) -> None:
    """Tick the x axis (steps t, agents deleted k) at whole numbers only: a short run was ticked 0, 0.5, 1, …"""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


@plain_text_figures
def macro_curve_figure(result: StudyResult, out: Path) -> Path:
    """``macro_curve.png``: f over steps per run, t* marked (● per run, labelled "t*" above the plot as on the page:
    :func:`~aumann.studies.charts.t_star_label`), the original indicator dashed; the legend where the page's charts
    put theirs (:func:`~aumann.studies.charts.legend_place`; matplotlib's "best" searched every place on every
    point of a long series, sat on the curves when none was free, and could move between hosts)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn: list[Line] = []  # what the legend must not cover
    points: list[Point] = []
    try:
        runs = len(result.records)
        for r, (rec, arr) in enumerate(zip(result.records, result.arrays)):
            f = np.asarray(arr["f_values"], dtype=float)
            line = ax.plot(f, lw=1.2, alpha=0.8, label="C² surrogate" if r == 0 else None)[0]
            drawn.append(Line("C² surrogate", np.arange(len(f)), f, legend=r == 0))
            if r == 0:
                f0 = np.asarray(arr["f_original_values"], dtype=float)
                ax.plot(f0, ls="--", lw=1, color=line.get_color(), label="original")
                drawn.append(Line("original", np.arange(len(f0)), f0))
            ax.plot([rec["t_star"]], [rec["f_t_star"]], "o", color=line.get_color())
            points.append(Point(float(rec["t_star"]), float(rec["f_t_star"]), t_star_label(r, runs)))
        T = len(result.arrays[0]["f_values"])
        half = math.ceil(T / 2)
        ax.axvline(half, color="grey", lw=0.8, ls="-.", label="⌈T/2⌉")  # not dotted: t*'s line is
        ys = np.concatenate([np.asarray(s.y, dtype=float) for s in drawn])
        ys = ys[np.isfinite(ys)]
        if ys.size:  # the dotted line runs the plot's height: through every corner box it reaches
            drawn.append(Line("⌈T/2⌉", [half, half], [float(ys.min()), float(ys.max())]))
        mpl_point_labels(ax, points)
        ax.set(xlabel="step t", ylabel="f(z_t)")
        ax.set_title(f"{result.scenario}: macro indicator, t* marked (● per run)", pad=POINT_LABEL_TITLE_PAD)
        _whole_numbers(ax)
        mpl_pad(ax)
        mpl_legend(ax, legend_place(drawn, points), fontsize=8)
        fig.tight_layout()
        return _save(fig, RunDir(out).figure(MACRO_CURVE))
    finally:
        plt.close(fig)


@plain_text_figures
def heatmap_figure(result: StudyResult, out: Path) -> Path:
    """``attribution_heatmap.png``: agent × step φ of run 0, the 20 agents with the largest signed Φ_i (top first:
    the agents of the report's who-table)."""
    plt = pyplot()
    phi = np.asarray(result.arrays[0]["phi_all"])  # (T, N)
    top = largest_first(phi.sum(axis=0), min(20, phi.shape[1]))  # the who-table's agents
    fig, ax = plt.subplots(figsize=(8, 5))
    try:
        lim = float(np.abs(phi[:, top]).max()) or 1.0
        im = ax.imshow(phi[:, top].T, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        alive = _alive(result, phi.shape)
        if alive is not None and not alive[:, top].all():  # not alive: hatched grey, not the white of φ = 0
            hatch_not_alive(ax, ~alive[:, top].T)
        ax.axvline(result.records[0]["t_star"], color="k", lw=1)
        ids = _agent_ids(result, phi.shape[1])
        ax.set(xlabel="step t", ylabel="agent (by Φ_i, top first)", yticks=range(len(top)),
               yticklabels=[short_label(ids[i]) for i in top],
               title=f"{result.scenario}: Aumann–Shapley φ (run 0; line = t*)")
        ax.tick_params(axis="y", labelsize=6)
        _whole_numbers(ax)
        bar = fig.colorbar(im, ax=ax)
        # the one mathtext string of the figures (a constant, never a name or an id): plain text drew "φ_{i,t}" with
        # its braces
        bar.set_label(COLORBAR_LABEL, parse_math=True)
        fig.tight_layout()
        return _save(fig, RunDir(out).figure(HEATMAP))
    finally:
        plt.close(fig)


@plain_text_figures
def deletion_curves_figure(result: StudyResult, out: Path) -> Path:
    """``deletion_curves.png``: mean normalised drop vs k per method, re-simulation and masking oracles."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    drawn: list[Line] = []  # the curves of both panels (one y axis): where their legends go
    try:
        for ax, key, what in ((axes[0], "curve", "re-simulation"), (axes[1], "curve_masking", "masking")):
            means = {}
            for name in methods_of(result):
                arrs = [a[f"{key}_{name}"] for a in result.arrays if f"{key}_{name}" in a]
                if not arrs:
                    continue
                # runs with births and deaths have different K_del (their players differ): the mean over the runs
                # that reach each k
                kmax = max(len(a) for a in arrs)
                curves = np.full((len(arrs), kmax), np.nan)
                for r, a in enumerate(arrs):
                    curves[r, :len(a)] = a
                means[name] = 100 * np.nanmean(curves, axis=0)
            one_k = bool(means) and max(len(m) for m in means.values()) == 1
            for i, (name, mean) in enumerate(means.items()):
                if one_k:  # one point each: side by side at k = 1, each its own marker (on one spot they hid)
                    ax.plot([1 + dodge(i, len(means))], mean, ls="none", marker=MARKERS[i % len(MARKERS)], ms=7,
                            label=name)
                else:
                    ax.plot(np.arange(1, len(mean) + 1), mean, marker=".", label=name)
                    drawn.append(Line(name, list(range(1, len(mean) + 1)), mean))
            if one_k:  # each point named under it: no legend over the points
                ax.set_xticks([1 + dodge(i, len(means)) for i in range(len(means))],
                              [short_label(n) for n in means], rotation=30, ha="right", rotation_mode="anchor",
                              fontsize=7)
                ax.set_xlim(0.6, 1.4)
                ax.set(xlabel="method (k = 1 agent deleted at t*)", title=f"{what} oracle\n{ONE_K_NOTE}")
            else:
                ax.set(xlabel="k (agents deleted at t*)", title=f"{what} oracle")
                _whole_numbers(ax)
        _legends(axes, drawn)
        axes[0].set_ylabel("drop (f − f_k)/f  [%]")
        fig.suptitle(f"{result.scenario}: deletion curves (mean over runs; agents ranked by signed φ)")
        fig.tight_layout()
        return _save(fig, RunDir(out).figure(DELETION_CURVES))
    finally:
        plt.close(fig)


def _legends(axes: Any, drawn: list[Line]) -> None:
    """The deletion panels' legends, by the page's rule (:func:`~aumann.studies.charts.legend_place`, judged on the
    curves of both panels, which share one y axis): the same free corner in each panel, or one legend beside the
    right panel (matplotlib's "best" put one over the curves when no place was free)."""
    where = legend_place(drawn)
    if where == "outside":
        entries = {}
        for ax in axes:
            handles, labels = ax.get_legend_handles_labels()
            entries.update({lab: h for h, lab in zip(handles, labels) if lab not in entries})
        mpl_legend(axes[-1], where, fontsize=7, handles=list(entries.values()), labels=list(entries))
        return
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            mpl_legend(ax, where, fontsize=7)


#: the markers of a deletion plot of one point per method (K_del = 1), one per method in turn: told apart without colour
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
#: what a deletion plot of one point per method says it shows
ONE_K_NOTE = "K_del = 1: one point per method (k = 1), set side by side"


def dodge(i: int, n: int, width: float = 0.5) -> float:
    """The horizontal offset of the ``i``-th of ``n`` points set side by side around one x (within ``± width / 2``).

    >>> [round(dodge(i, 3), 3) for i in range(3)], dodge(0, 1)
    ([-0.25, 0.0, 0.25], 0.0)
    """
    return 0.0 if n <= 1 else width * (i / (n - 1) - 0.5)


#: the run directory's PNG figures, in the order they are drawn
FIGURES: tuple[tuple[str, Callable[[StudyResult, Path], Path]], ...] = (
    (MACRO_CURVE, macro_curve_figure), (HEATMAP, heatmap_figure), (DELETION_CURVES, deletion_curves_figure))


def write_plots(result: StudyResult, out: Path, *, parts: Any = None) -> list[Path]:
    """macro_curve.png, attribution_heatmap.png, deletion_curves.png (matplotlib Agg, imported lazily).

    With ``parts`` (:class:`aumann.studies.report.ReportParts`) each figure is one optional part of the report
    stage (a failure is recorded there and the next figure is drawn); without, the first failure raises."""
    paths = []
    for name, draw in FIGURES:
        remove_stale(RunDir(out).figure(name), within=out)  # a figure that fails leaves no earlier run's in its place
        path = draw(result, out) if parts is None else parts.attempt(f"figure {name}", lambda d=draw: d(result, out))
        if path is not None:
            paths.append(path)
    return paths


def _alive(result: StudyResult, shape: tuple[int, int]) -> np.ndarray | None:
    """Run 0's alive mask (T, N) (from its panel, or its saved panel file on resume); ``None``: every agent alive,
    or no panel to say (a damaged file: the figure is drawn without the mask)."""
    panel = result.panels[0] if result.panels else None
    if panel is not None:
        return None if panel.alive is None else np.asarray(panel.alive, dtype=bool)
    path = RunDir(result.out_dir).panel(0) if result.out_dir is not None else None
    if path is None or not path.is_file():
        return None
    try:
        alive = read_npz(path, error=StudyError, what="panel file", within=result.out_dir, keys=("alive",))[0].get(
            "alive")
    except (StudyError, OSError):
        return None
    return alive if alive is not None and alive.dtype == np.bool_ and alive.shape == tuple(shape) else None


def _agent_ids(result: StudyResult, n: int) -> list[Any]:
    """Run 0's agent ids (from its panel, or its saved attribution on resume); positions as a last resort."""
    panel = result.panels[0] if result.panels else None
    if panel is not None:
        return [i.item() if hasattr(i, "item") else i for i in panel.agent_ids]
    path = RunDir(result.out_dir).attribution(0, "aumann_shapley") if result.out_dir is not None else None
    if path is not None and path.is_file():
        try:
            ids = read_npz(path, error=StudyError, what="attribution file", within=result.out_dir)[0].get("agent_ids")
        except (StudyError, OSError):  # damaged, or a link leading out: fall back to positions
            ids = None  # a damaged file: fall back to positions (the heatmap labels only)
        if ids is not None and len(ids) == n:
            return [i.item() for i in ids]
    return list(range(n))


__all__ = ["FIGURES", "deletion_curves_figure", "heatmap_figure", "macro_curve_figure", "write_plots"]
