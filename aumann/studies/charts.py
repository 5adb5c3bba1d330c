"""Report figures: interactive (Bokeh, the optional ``aumann[report]`` extra) or static PNG (matplotlib).

:class:`Charts` draws line charts, grouped bars and heatmaps as :class:`~aumann.studies.page.Figure`
blocks. With Bokeh installed (``pip install "aumann[report]"``) and ``interactive`` not ``False``, a
figure is an interactive plot — pan, box zoom, wheel zoom, reset and hover read-outs (agent ids on
the heatmap) — whose data is embedded in the page, and :meth:`Charts.head` returns BokehJS inline
(about 1 MB, once per page, so the page still opens from disk with no network). Without Bokeh a
figure is a matplotlib PNG embedded as a ``data:`` URI. Either way the page stays self-contained.
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aumann.studies.page import Figure, visible_text
from aumann.studies.plotting import plain_text_figures, pyplot

#: a qualitative palette (Tableau 10) shared by both renderers, so static and interactive pages look alike
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


#: the longest axis label drawn in full; a longer one (an agent id of 10,000 characters) is drawn shortened
#: (:func:`short_label`): matplotlib lays out every character of a tick label, so one such id cost seconds a figure
#: and a 100,000-character id minutes; the full id stays in the tables and the hover text
LABEL_CHARS = 40
#: the most x-axis labels an interactive heatmap draws (every step is still in its hover text)
HEATMAP_X_TICKS = 8
#: the width an interactive bar chart keeps per bar, so that its category labels ("BIAS_v") do not run together
BAR_LABEL_PX = 60


def label_text(label: Any) -> str:
    """``label`` as one line of text, as :func:`short_label` shows it (escapes, never shortened)."""
    return visible_text(label).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def short_label(label: Any, limit: int = LABEL_CHARS) -> str:
    """``label`` as text, its middle cut to "…" when it is longer than ``limit`` characters (the start and the end
    stay: ids often differ in their last characters). Control characters and bidirectional overrides are shown as
    their escapes (:func:`~aumann.studies.page.visible_text`), as on the page: an id ``x\\u202egnp.exe`` is never
    drawn as ``xexe.png``; so are line breaks and tabs (``new\\nline``: drawn on two lines, such a label ran into its
    neighbours on an axis, and a table showed it as the different id ``new line``)."""
    text = label_text(label)
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[-(limit - 1 - head):]


def bokeh_available() -> bool:
    """Whether the optional interactive renderer (Bokeh) can be imported."""
    import importlib

    try:
        for name in ("bokeh.embed", "bokeh.plotting", "bokeh.resources"):
            importlib.import_module(name)
    except Exception:  # any import failure means: draw PNGs
        return False
    return True


#: URLs inside BokehJS that only MathJax text and Google-Maps plots would load; neither is used here, and
#: the embedded copy points them at nothing, so the page cannot reach the network even by accident
_INERT = ("https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-svg.js", "https://maps.googleapis.com/maps/api/js")


def bokeh_inline_js() -> str:
    """BokehJS's core bundle (about 1.3 MB) as inline ``<script>`` elements.

    Only ``bokeh.min.js`` is embedded: the plots here need neither the widgets, tables, WebGL nor
    MathJax bundles (``INLINE.render_js()`` would add 2.6 MB of them).
    """
    from bokeh.resources import INLINE

    raws = list(INLINE.js_raw)
    core = next((r for r in raws if "bokeh.min.js" in r[:200]), raws[0])
    for url in _INERT:
        core = core.replace(url, "data:,")
    tail = [r for r in raws if len(r) < 2000 and "Bokeh." in r]
    safe = [r.replace("</script", "<\\/script") for r in (core, *tail)]
    return "".join(f"<script>{r}</script>\n" for r in safe)


@dataclass
class Line:
    """One series of a line chart."""

    name: str
    x: Sequence[float]
    y: Sequence[float]
    dash: bool = False
    color: str | None = None
    width: float = 1.6
    markers: bool = False
    alpha: float = 1.0
    legend: bool = True


@dataclass
class Point:
    """A labelled marker (e.g. ``t*``)."""

    x: float
    y: float
    label: str = ""
    color: str = "#111111"


@dataclass
class Charts:
    """Figure factory for one page. ``interactive``: ``None`` = Bokeh when installed, else PNG."""

    interactive: bool | None = None
    used_bokeh: bool = field(default=False, init=False)
    _embedded: int = field(default=0, init=False, repr=False)  # figures embedded so far (salt of their ids)

    def __post_init__(self) -> None:
        if self.interactive is None:
            self.interactive = bokeh_available()
        elif self.interactive and not bokeh_available():
            self.interactive = False

    # ------------------------------------------------------------------ page head
    def head(self) -> str:
        """The inline BokehJS for a page that holds interactive figures ('' otherwise)."""
        if not self.used_bokeh:
            return ""
        return bokeh_inline_js()

    @property
    def mode(self) -> str:
        return "interactive (Bokeh)" if self.interactive else "static PNG (install aumann[report] for interactive)"

    # ------------------------------------------------------------------ lines
    def lines(self, title: str, series: Sequence[Line], *, xlabel: str, ylabel: str, points: Sequence[Point] = (),
              bars: tuple[Sequence[float], Sequence[float], str] | None = None, caption: str = "",
              md_ref: str | None = None, synthetic: bool = False, height: int = 300,
              xlabels: Sequence[str] | None = None, logy: bool = False, integer_x: bool = False,
              legend_at: str = "auto") -> Figure:
        """A line chart (optionally over bars), with labelled points (e.g. ``t*``).

        ``legend_at``: ``"auto"`` (the plot's corner that no line, bar or point reaches, else beside the plot:
        :func:`empty_corner`), ``"top_left"``, ``"bottom_right"`` (inside the plot) or ``"outside"`` (beside it).
        """
        if self.interactive:
            html = self._bokeh_lines(series, xlabel, ylabel, points, bars, height, xlabels, logy, integer_x,
                                     legend_at)
            return Figure(title, html=html, caption=caption, md_ref=md_ref, synthetic=synthetic)
        png = self._mpl_lines(series, xlabel, ylabel, points, bars, height, xlabels, logy, integer_x, legend_at)
        return Figure(title, png=png, caption=caption, md_ref=md_ref, synthetic=synthetic)

    @plain_text_figures
    def _mpl_lines(self, series, xlabel, ylabel, points, bars, height, xlabels, logy, integer_x, legend_at) -> bytes:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6.4, height / 88))
        if bars is not None:
            bx, by, bname = bars
            by = np.asarray(by, dtype=float)
            ax.bar(bx, by, color=np.where(by >= 0, "#e8a598", "#9cb9e8"), width=0.8, label=bname, zorder=1)
            ax.axhline(0, color="#888888", lw=0.6)
        for i, s in enumerate(series):
            ax.plot(s.x, s.y, ls="--" if s.dash else "-", lw=s.width, color=s.color or PALETTE[i % len(PALETTE)],
                    marker="." if s.markers else None, alpha=s.alpha, label=s.name if s.legend else None, zorder=2)
        for p in points:
            ax.plot([p.x], [p.y], "o", color=p.color, ms=6, zorder=3)
        mpl_point_labels(ax, points)
        if logy:
            ax.set_yscale("symlog", linthresh=1e-6)
        ax.set(xlabel=xlabel, ylabel=ylabel)
        if integer_x or bars is not None:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        span = _bar_span(series, points, bars)
        if span is not None:  # the bars' own span: no phantom step past the last (a tick at 16 for steps 0 … 15)
            ax.set_xlim(*span)
        if xlabels is not None:
            ticks = list(range(0, len(xlabels), max(1, len(xlabels) // 10)))
            ax.set_xticks(ticks, [short_label(xlabels[i]) for i in ticks], rotation=30, fontsize=8)
        ax.grid(alpha=0.25)
        mpl_pad(ax, x=span is None)
        mpl_legend(ax, legend_place(series, points, bars, legend_at=legend_at), fontsize=8)
        return _png(fig)

    def _bokeh_lines(self, series, xlabel, ylabel, points, bars, height, xlabels, logy, integer_x,
                     legend_at) -> str:
        from bokeh.models import ColumnDataSource, HoverTool, Span
        from bokeh.plotting import figure

        kw_range: dict[str, Any] = {}
        span = _bar_span(series, points, bars)
        if span is not None:  # the bars' own span: no phantom step past the last (0 … 16 for 0 … 15)
            kw_range["x_range"] = span
        p = figure(height=height, sizing_mode="stretch_width", tools="pan,box_zoom,wheel_zoom,reset,save",
                   x_axis_label=xlabel, y_axis_label=ylabel, toolbar_location="above",
                   y_axis_type="log" if logy else "linear", **kw_range)
        renderers = []
        if bars is not None:
            bx, by, bname = bars
            by = np.asarray(by, dtype=float)
            src = ColumnDataSource({"x": np.asarray(bx, dtype=float), "top": by,
                                    "color": np.where(by >= 0, "#e8a598", "#9cb9e8"),
                                    "label": [xlabels[int(i)] if xlabels is not None else str(i) for i in bx],
                                    "series": [bname] * len(by)})
            renderers.append(p.vbar(x="x", top="top", width=0.8, color="color", source=src, legend_label=bname))
        for i, s in enumerate(series):
            x = np.asarray(s.x, dtype=float)
            src = ColumnDataSource({"x": x, "y": np.asarray(s.y, dtype=float), "series": [s.name] * len(x),
                                    "label": [xlabels[int(v)] if xlabels is not None and float(v).is_integer()
                                              and 0 <= v < len(xlabels) else _num(v) for v in x]})
            kw: dict[str, Any] = {"line_width": s.width, "color": s.color or PALETTE[i % len(PALETTE)],
                                  "alpha": s.alpha, "source": src}
            if s.legend:
                kw["legend_label"] = s.name
            r = p.line("x", "y", line_dash="dashed" if s.dash else "solid", **kw)
            renderers.append(r)
            if s.markers:
                renderers.append(p.scatter("x", "y", size=5, **kw))
        for pt in points:
            p.scatter([pt.x], [pt.y], size=POINT_PX, color=pt.color)
            if pt.label:
                p.add_layout(Span(location=pt.x, dimension="height", line_color="#888888", line_dash="dotted",
                                  line_width=1))
        p.add_tools(HoverTool(renderers=renderers, tooltips=[("", "@series"), ("x", "@label"), ("value", "@y{0.0000g}")
                                                            if not bars else ("value", "$y{0.0000g}")]))
        p.y_range.range_padding = _PAD[1]
        if p.legend:
            p.legend.label_text_font_size = "9px"
            p.legend.click_policy = "hide"
            where = legend_place(series, points, bars, legend_at=legend_at)
            p.legend.location = where if where not in (None, "outside") else "top_left"
            p.legend.background_fill_alpha = 0.7
            if where is None:  # one series: the title says what it is
                p.legend.visible = False
            elif where == "outside":  # beside the plot
                p.add_layout(p.legend[0], "right")
                p.legend.spacing = 0
                p.legend.padding = 4
        if integer_x or bars is not None:
            from bokeh.models import SingleIntervalTicker

            xs = [float(np.max(s.x)) for s in series if len(s.x)]
            if bars is not None and len(bars[0]):
                xs.append(float(np.max(bars[0])))
            span = max(xs, default=10.0)
            p.xaxis.ticker = SingleIntervalTicker(interval=max(1, math.ceil(float(span) / 12)))
        if xlabels is not None:
            step = max(1, len(xlabels) // 10)
            p.xaxis.ticker = list(range(0, len(xlabels), step))
            p.xaxis.major_label_overrides = {i: xlabels[i] for i in range(0, len(xlabels), step)}
            p.xaxis.major_label_orientation = 0.5
        labels = point_labels(points)
        if labels:  # after the step axis's ticks are set (p.xaxis sets every x axis): see _point_axis
            p.add_layout(_point_axis(labels), "above")
            p.min_border_right = max(p.min_border_right or 0, 12)  # room for half a label at the last step
        _style(p)
        return self._embed(p)

    # ------------------------------------------------------------------ grouped bars
    @plain_text_figures
    def grouped_bars(self, title: str, categories: Sequence[str], groups: dict[str, Sequence[float]], *, ylabel: str,
                     errors: dict[str, Sequence[float]] | None = None, caption: str = "", md_ref: str | None = None,
                     synthetic: bool = False, height: int = 280) -> Figure:
        """Bars of several groups (e.g. BIAS_v vs FULL) per category (e.g. tier)."""
        if self.interactive:
            from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Whisker
            from bokeh.plotting import figure
            from bokeh.transform import factor_cmap

            names = list(groups)
            x = [(c, g) for c in categories for g in names]
            vals = [float(groups[g][i]) for i, _ in enumerate(categories) for g in names]
            err = [float((errors or {}).get(g, [0.0] * len(categories))[i]) for i, _ in enumerate(categories)
                   for g in names]
            src = ColumnDataSource({"x": x, "v": vals, "lo": [v - e for v, e in zip(vals, err)],
                                    "hi": [v + e for v, e in zip(vals, err)], "err": err})
            # each bar keeps room for its label: below that width (a phone) the figure scrolls sideways in its
            # own box instead of drawing the labels over each other
            p = figure(x_range=FactorRange(*x), height=height, sizing_mode="stretch_width", y_axis_label=ylabel,
                       tools="pan,box_zoom,reset,save", toolbar_location="above", min_width=BAR_LABEL_PX * len(x))
            r = p.vbar(x="x", top="v", width=0.85, source=src, line_color="white",
                       fill_color=factor_cmap("x", palette=list(PALETTE[: max(len(names), 3)]), factors=names,
                                              start=1, end=2))
            if errors:
                p.add_layout(Whisker(source=src, base="x", upper="hi", lower="lo"))
            p.add_tools(HoverTool(renderers=[r], tooltips=[("", "@x"), ("value", "@v{0.00}"), ("± std", "@err{0.00}")]))
            finite_hi = [h for h in src.data["hi"] if math.isfinite(h)]
            p.y_range.start = 0
            if finite_hi:
                p.y_range.end = 1.08 * max(finite_hi)
            p.xaxis.group_text_font_size = "12px"
            p.xaxis.major_label_text_font_size = "10px"
            p.x_range.range_padding = 0.08
            p.xaxis.major_label_orientation = 0.0
            _style(p)
            return Figure(title, html=f'<div class="hscroll">{self._embed(p)}</div>', caption=caption, md_ref=md_ref,
                          synthetic=synthetic)
        plt = _plt()
        fig, ax = plt.subplots(figsize=(6.4, height / 88))
        n = len(groups)
        xs = np.arange(len(categories))
        w = 0.8 / max(n, 1)
        for i, (g, vals) in enumerate(groups.items()):
            ax.bar(xs + (i - (n - 1) / 2) * w, vals, w, label=g, color=PALETTE[i % len(PALETTE)],
                   yerr=(errors or {}).get(g))
        ax.set_xticks(xs, [short_label(c) for c in categories])
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.25, axis="y")
        ax.legend(fontsize=8)
        fig.canvas.draw()  # where the labels land; those that would run into each other are slanted instead
        ticks = ax.get_xticklabels()
        boxes = [t.get_window_extent() for t in ticks]
        if any(a.x1 > b.x0 for a, b in itertools.pairwise(boxes)):
            for t in ticks:
                t.set(rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
        return Figure(title, png=_png(fig), caption=caption, md_ref=md_ref, synthetic=synthetic)

    # ------------------------------------------------------------------ heatmap
    @plain_text_figures
    def heatmap(self, title: str, values: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], *,
                xlabel: str, ylabel: str, value_label: str, diverging: bool = True, log: bool = False,
                vline: tuple[int, str] | None = None, hlines: Sequence[float] = (), caption: str = "",
                md_ref: str | None = None, synthetic: bool = False, row_title: str = "agent",
                extra: dict[str, np.ndarray] | None = None, not_alive: np.ndarray | None = None) -> Figure:
        """``values`` (rows × columns), e.g. agents × steps. Diverging (centred at 0) or sequential (log10).

        ``not_alive`` (bool, rows × columns): the cells whose agent is not alive at that step (the panel's alive
        mask) are drawn hatched light grey, with a legend entry "not alive" and the hover text "not alive at step
        t", never in the colour of a living agent's φ = 0. The values themselves are not changed."""
        v = np.asarray(values, dtype=float)
        dead = None if not_alive is None else np.asarray(not_alive, dtype=bool)
        if dead is not None and (dead.shape != v.shape or not dead.any()):
            dead = None
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                shown = np.where(np.abs(v) > 0, np.log10(np.abs(v)), np.nan)
        else:
            shown = v
        finite = shown[np.isfinite(shown) & (True if dead is None else ~dead)]
        if diverging:
            lim = float(np.abs(finite).max()) if finite.size else 1.0
            lo, hi = -(lim or 1.0), (lim or 1.0)
        else:
            lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            if hi <= lo:
                hi = lo + 1.0
        height = int(min(620, max(240, 40 + 15 * len(row_labels))))
        if self.interactive:
            html = self._bokeh_heatmap(v, shown, row_labels, col_labels, xlabel, ylabel, value_label, diverging, lo,
                                       hi, vline, hlines, height, row_title, extra or {}, dead)
            return Figure(title, html=html, caption=caption, md_ref=md_ref, synthetic=synthetic)
        plt = _plt()
        fig, ax = plt.subplots(figsize=(7.2, height / 80))
        cmap = "RdBu_r" if diverging else "magma"
        im = ax.imshow(shown, aspect="auto", cmap=cmap, vmin=lo, vmax=hi, interpolation="nearest")
        if dead is not None:
            hatch_not_alive(ax, dead)
        if vline is not None:
            ax.axvline(vline[0], color="k", lw=1.1)
            ax.annotate(vline[1], (vline[0], -0.5), xytext=(3, 2), textcoords="offset points", fontsize=9,
                        fontweight="bold", annotation_clip=False)
        for h in hlines:
            ax.axhline(h, color="cyan", lw=0.8, ls="--")
        ax.set(xlabel=xlabel, ylabel=ylabel)
        nr = len(row_labels)
        rstep = max(1, nr // 40)
        ax.set_yticks(range(0, nr, rstep), [short_label(row_labels[i]) for i in range(0, nr, rstep)], fontsize=7)
        nc = len(col_labels)
        cstep = max(1, nc // 15)
        ax.set_xticks(range(0, nc, cstep), [short_label(col_labels[i]) for i in range(0, nc, cstep)], fontsize=7,
                      rotation=30 if max((len(str(c)) for c in col_labels), default=0) > 3 else 0)
        fig.colorbar(im, ax=ax, label=("log10 |" + value_label + "|") if log else value_label, fraction=0.04,
                     pad=0.02)
        return Figure(title, png=_png(fig), caption=caption, md_ref=md_ref, synthetic=synthetic)

    def _bokeh_heatmap(self, v, shown, row_labels, col_labels, xlabel, ylabel, value_label, diverging, lo, hi, vline,
                       hlines, height, row_title, extra, dead=None) -> str:
        from bokeh.models import ColorBar, ColumnDataSource, FixedTicker, HoverTool, LinearAxis, LinearColorMapper, Span
        from bokeh.palettes import RdBu11, magma
        from bokeh.plotting import figure

        nr, nc = v.shape
        rows = [str(r) for r in row_labels]
        ii, jj = np.meshgrid(np.arange(nr), np.arange(nc), indexing="ij")
        ii, jj = ii.ravel(), jj.ravel()
        # many rows, or labels too long to draw: a numeric axis with labelled ticks instead of one category per row
        # (and labels drawn with escapes: "a\u202e" shown as "a\\u202e" could repeat another row's factor)
        seen, cols = [label_text(r) for r in rows], [label_text(c) for c in col_labels]
        many = nr > 40 or any(len(r) > LABEL_CHARS or s != r for r, s in zip(rows, seen, strict=True))
        data: dict[str, Any] = {"x": jj.astype(float), "y": ii.astype(float) if many else [rows[i] for i in ii],
                                "row": [seen[i] for i in ii], "col": [cols[j] for j in jj],
                                "value": v.ravel(), "shown": shown.ravel()}
        tips = [(row_title, "@row"), (xlabel, "@col"), (value_label, "@value{0.0000g}")]
        for name, arr in extra.items():
            data[name] = np.asarray(arr).ravel()
            tips.append((name, f"@{{{name}}}{{0.0000g}}"))
        gone: dict[str, Any] | None = None
        if dead is not None:  # the cells of agents not alive: their own hatched renderer, hover and legend entry
            off = dead.ravel()
            gone = {"x": data["x"][off], "y": [y for y, o in zip(data["y"], off) if o] if not many else data["y"][off],
                    "row": [r for r, o in zip(data["row"], off) if o],
                    "status": [f"not alive at {NOT_ALIVE_AT} {cols[j]}" for j in jj[off]]}
            data = {k: ([x for x, o in zip(col, off) if not o] if isinstance(col, list) else np.asarray(col)[~off])
                    for k, col in data.items()}
        src = ColumnDataSource(data)
        palette = list(RdBu11) if diverging else list(magma(256))  # Bokeh's RdBu11 runs blue → red
        mapper = LinearColorMapper(palette=palette, low=lo, high=hi, nan_color="#eeeeee")
        y_range: Any = (nr - 0.5, -0.5) if many else list(reversed(rows))
        p = figure(height=height, sizing_mode="stretch_width", y_range=y_range,
                   x_range=(-0.5, nc - 0.5), tools="pan,box_zoom,wheel_zoom,reset,save", toolbar_location="above",
                   x_axis_label=xlabel, y_axis_label=ylabel)
        r = p.rect(x="x", y="y", width=1, height=1, source=src, line_color=None,
                   fill_color={"field": "shown", "transform": mapper})
        p.add_tools(HoverTool(renderers=[r], tooltips=tips))
        if gone is not None:
            g = p.rect(x="x", y="y", width=1, height=1, source=ColumnDataSource(gone), line_color=None,
                       fill_color=NOT_ALIVE_FILL, hatch_pattern="/", hatch_color=NOT_ALIVE_HATCH, hatch_scale=8,
                       hatch_weight=1, legend_label=NOT_ALIVE_LABEL)
            p.add_tools(HoverTool(renderers=[g], tooltips=[(row_title, "@row"), ("", "@status")]))
            p.legend.location = "top_left"
            p.legend.orientation = "horizontal"
            p.legend.label_text_font_size = "10px"
            p.legend.padding = 2
            p.legend.margin = 0
            p.legend.glyph_height = p.legend.glyph_width = 14
            p.add_layout(p.legend[0], "above")
        bar = ColorBar(color_mapper=mapper, width=10, title=value_label if diverging else f"log10 |{value_label}|",
                       title_text_font_size="9px", major_label_text_font_size="9px")
        p.add_layout(bar, "right")
        for h in hlines:
            k = math.ceil(h)
            if 0 < k < nr:
                p.add_layout(Span(location=(k - 0.5) if many else nr - k, dimension="width", line_color="cyan",
                                  line_dash="dashed", line_width=1))
        # at most HEATMAP_X_TICKS labels, upright when longer than 3 characters: the plot is ~160 px wide on a phone
        # (beside its colour bar), where 14 days "04-07" … "04-20" at a slant, or 16 steps "0" … "15", ran together
        step = max(1, math.ceil(nc / HEATMAP_X_TICKS))
        p.xaxis.ticker = list(range(0, nc, step))
        p.xaxis.major_label_overrides = {j: short_label(col_labels[j]) for j in range(0, nc, step)}
        if max((len(str(c)) for c in col_labels), default=0) > 3:
            p.xaxis.major_label_orientation = math.pi / 2
        p.yaxis.major_label_text_font_size = "8px" if nr > 25 else "10px"
        if many:
            ticks = list(range(nr)) if nr <= 40 else \
                sorted({0, *[int(h) - 1 for h in hlines if 0 < h <= nr], (nr - 1) // 2, nr - 1})
            p.yaxis.ticker = ticks
            p.yaxis.major_label_overrides = {t: short_label(rows[t]) for t in ticks}
            p.yaxis.major_label_text_font_size = "10px"
        if vline is not None:  # the line over the cells; its label above the plot, on an axis of its own tick (added
            # after the step axis's ticks are set: p.xaxis sets every x axis)
            # (a label inside the plot, with its white box, hid the colour of the cell it sat on)
            p.add_layout(Span(location=vline[0], dimension="height", line_color="black", line_width=1.5))
            mark = LinearAxis(ticker=FixedTicker(ticks=[vline[0]]), major_label_overrides={vline[0]: vline[1]},
                              axis_line_color=None, major_tick_line_color="black", major_tick_in=0, major_tick_out=4,
                              minor_tick_line_color=None, major_label_text_font_size="12px",
                              major_label_text_font_style="bold", major_label_standoff=2)
            p.above = [mark, *p.above]  # next to the cells, the "not alive" legend (if any) above it
        _style(p, grid=False)
        return self._embed(p)

    def _embed(self, p: Any) -> str:
        from bokeh.embed import components

        script, div = components(p)
        self.used_bokeh = True
        self._embedded += 1
        return stable_bokeh_ids(div + script, salt=str(self._embedded))


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_BOKEH_IDS = re.compile(rf'<div id="({_UUID})"|"docid":"({_UUID})"')


def stable_bokeh_ids(html: str, *, salt: str = "") -> str:
    """An embedded Bokeh figure (its ``components``' div and script) with the random ids Bokeh gives its
    document and root element (``uuid4``) replaced by ids derived from the figure itself and ``salt`` (its place
    on the page): the same figure gives the same bytes, so two runs with the same config and seed write the
    same page; two figures of one page keep distinct ids (their salts differ).

    Only the ids Bokeh generated are replaced (the root ``<div id=...>`` and the ``docid``), never text of the
    figure's data that happens to look like a UUID (an agent id, say).

    >>> u = "0b1c2d3e-0000-4000-8000-00000000000"
    >>> a = f'<div id="{u}1" data-root-id="p1"></div>{{"docid":"{u}2"}}'
    >>> b = f'<div id="{u}7" data-root-id="p1"></div>{{"docid":"{u}8"}}'
    >>> stable_bokeh_ids(a, salt="1") == stable_bokeh_ids(b, salt="1") != stable_bokeh_ids(a, salt="2")
    True
    """
    import hashlib

    ids = list(dict.fromkeys(i for pair in _BOKEH_IDS.findall(html) for i in pair if i))
    if not ids:
        return html
    body = re.sub(r'"p\d+"', '"p"', html)  # Bokeh's model ids count the models this process made before
    for i in ids:
        body = body.replace(i, "")
    base = hashlib.sha256(f"{salt}\0{body}".encode()).hexdigest()
    for k, old in enumerate(ids):
        h = hashlib.sha256(f"{base}:{k}".encode()).hexdigest()
        html = html.replace(old, f"a{h[1:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")  # css-safe: a letter first
    return html


#: how the cells of an agent that is not alive at a step are drawn (both renderers): hatched light grey, never a
#: colour of the φ scale (a living agent's φ = 0 is white on the diverging scale)
NOT_ALIVE_FILL, NOT_ALIVE_HATCH, NOT_ALIVE_LABEL, NOT_ALIVE_AT = "#d4d4d4", "#7f7f7f", "not alive", "step"


def hatch_not_alive(ax: Any, dead: np.ndarray) -> None:
    """Draw the cells ``dead`` (rows × columns, True: the row's agent is not alive at that column's step) of a
    matplotlib heatmap (``imshow``, one unit per cell) hatched light grey over the colours, with a legend entry
    "not alive" in the figure's bottom left corner (above the plot it ran into the title, or into the ``t*`` label
    of a target step in the first column). One rectangle per run of dead cells in a row (an agent dies once, or is
    born late), so a long run stays a few patches."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Patch, Rectangle

    rects = []
    for r, row in enumerate(np.asarray(dead, dtype=bool)):
        edges = np.flatnonzero(np.diff(np.concatenate(([0], row.astype(np.int8), [0]))))
        rects += [Rectangle((a - 0.5, r - 0.5), b - a, 1) for a, b in zip(edges[::2], edges[1::2])]
    ax.add_collection(PatchCollection(rects, facecolor=NOT_ALIVE_FILL, edgecolor=NOT_ALIVE_HATCH, hatch="///",
                                      linewidth=0, zorder=2))
    handle = Patch(facecolor=NOT_ALIVE_FILL, edgecolor=NOT_ALIVE_HATCH, hatch="///", label=NOT_ALIVE_LABEL)
    ax.figure.legend(handles=[handle], loc="lower left", bbox_to_anchor=(0.005, 0.005), fontsize=8, frameon=False,
                     handlelength=1.6)


def point_labels(points: Sequence[Point]) -> dict[float, tuple[str, str]]:
    """The labels of the labelled ``points`` of a line chart by x, as both renderers draw them: above the plot, each
    centred over its point's dotted vertical line (``{x: (text, colour)}``; points sharing an x share one label, their
    texts joined by " / " when they differ; the colour of the first).

    Inside the plot, beside its point, a label was cut off at a phone's right edge when t* was the last step, and
    sat on a line (another run's curve, or its own falling after t*); above the plot it covers no data, and centred
    on a step it needs only half its width of room past that step.

    >>> point_labels([Point(15, 0.4, "t*"), Point(13, 0.3, "t*", "#555555"), Point(13, 0.2, ""), Point(15, 0.1, "t*")])
    {13: ('t*', '#555555'), 15: ('t*', '#111111')}
    """
    found: dict[float, tuple[list[str], str]] = {}
    for pt in points:
        if pt.label:
            texts = found.setdefault(pt.x, ([], pt.color))[0]
            if pt.label not in texts:
                texts.append(pt.label)
    return {x: (" / ".join(texts), color) for x, (texts, color) in sorted(found.items())}


#: the pad (points) a matplotlib axes title needs above the plot to clear the labels :func:`mpl_point_labels` writes
#: there (2 pt off the frame, 9 pt bold text)
POINT_LABEL_TITLE_PAD = 16.0


def mpl_point_labels(ax: Any, points: Sequence[Point], *, fontsize: float = 9) -> None:
    """Draw the labels of the labelled ``points`` (:func:`point_labels`) on a matplotlib axes as the page's charts
    do: each above the plot, centred over a dotted vertical line through its point; never on the data, never past
    the figure's edge (beside the point a label covered a line, or ran off a phone's plot). An axes title goes
    :data:`POINT_LABEL_TITLE_PAD` above the plot to clear them."""
    for p in points:
        if p.label:
            ax.axvline(p.x, color="#888888", ls=":", lw=1, zorder=0)
    for x, (label, color) in point_labels(points).items():
        ax.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=fontsize, fontweight="bold", color=color,
                    annotation_clip=False)


#: the most runs whose every ``t*`` a macro curve labels; with more, run 0's alone (ten labels above one plot ran
#: into each other)
T_STAR_LABELLED_RUNS = 3


def t_star_label(run: int, runs: int) -> str:
    """The label of run ``run``'s ``t*`` point (of ``runs`` runs) on a macro curve: ``"t*"`` for run 0, and for every
    run when there are at most :data:`T_STAR_LABELLED_RUNS`; ``""`` (a dot without a label) otherwise.

    >>> [t_star_label(r, 3) for r in range(3)], [t_star_label(r, 4) for r in range(2)]
    (['t*', 't*', 't*'], ['t*', ''])
    """
    return "t*" if run == 0 or runs <= T_STAR_LABELLED_RUNS else ""


def _point_axis(labels: dict[float, tuple[str, str]]) -> Any:
    """A Bokeh axis above the plot whose only ticks are the labelled points' x, labelled (:func:`point_labels`): as
    the heatmap's ``t*`` (one colour: the first point's)."""
    from bokeh.models import FixedTicker, LinearAxis

    first = next(iter(labels.values()))[1]
    return LinearAxis(ticker=FixedTicker(ticks=list(labels)),
                      major_label_overrides={x: text for x, (text, _) in labels.items()}, axis_line_color=None,
                      major_tick_line_color="#888888", major_tick_in=0, major_tick_out=4, minor_tick_line_color=None,
                      major_label_text_font_size="12px", major_label_text_font_style="bold",
                      major_label_text_color=first, major_label_standoff=2)


def _bar_span(series: Sequence[Line], points: Sequence[Point],
              bars: tuple[Sequence[float], Sequence[float], str] | None) -> tuple[float, float] | None:
    """The x range of a chart with bars: half a step beyond the first and the last bar (0.9 on the right where a
    labelled point such as ``t*`` sits at the last x, so its label, centred above it, is not cut off), and where a
    point sits at the first or the last x, room for its dot (:func:`_dot_room`); ``None`` without bars.
    Padding by a share of the span, as both renderers did, ran the axis of steps 0 … 15 to a tick at 16."""
    if bars is None or not len(bars[0]):
        return None
    xs = np.concatenate([np.asarray(bars[0], dtype=float), *[np.asarray(s.x, dtype=float) for s in series],
                         np.asarray([pt.x for pt in points], dtype=float)])
    xs = xs[np.isfinite(xs)]
    if not xs.size:
        return None
    lo, hi = float(xs.min()), float(xs.max())
    dot = _dot_room(hi - lo)
    left = max(0.5, dot) if any(pt.x <= lo for pt in points) else 0.5
    right = 0.9 if any(pt.label and pt.x >= hi for pt in points) else 0.5
    if any(pt.x >= hi for pt in points):
        right = max(right, dot)
    return lo - left, hi + right


#: the diameter (px) of a line chart's point (the ``t*`` dot) in the interactive renderer
POINT_PX = 9


def _dot_room(span: float) -> float:
    """The data units beyond the plot's first or last x that hold half a point's dot (:data:`POINT_PX`) and a pixel,
    on a frame as narrow as a phone's (:data:`_FRAME_PX`; a wider frame has more room). Half a step (0.9 with a
    label) held it up to a few dozen steps; at 200 steps a phone's plot has 1.5 px a step, and the ``t*`` dot of
    the last step was cut in half at the plot's edge (Bokeh clips glyphs to the frame).

    >>> round(_dot_room(15), 2), round(_dot_room(199), 2)
    (0.3, 3.81)
    """
    r = POINT_PX / 2 + 1
    return r * (span + 1) / (_FRAME_PX[0] - 2 * r)


#: what a Bokeh legend inside a line chart takes, for :func:`empty_corner`: the plot's frame as narrow as on a phone
#: (about 300 × 220 px), a legend row about 20 px high, a character of its 9 px labels about 5.5 px wide beside a
#: 40 px glyph and padding
_FRAME_PX, _ROW_PX, _CHAR_PX, _GLYPH_PX = (300.0, 220.0), 20.0, 5.5, 40.0
#: the share of each axis Bokeh pads around the data (its DataRange1d's ``range_padding`` 0.1 on x; the line chart
#: sets 0.12 on y)
_PAD = (0.1, 0.12)


def empty_corner(series: Sequence[Line], points: Sequence[Point] = (),
                 bars: tuple[Sequence[float], Sequence[float], str] | None = None, *, rows: int = 1,
                 chars: int = 10) -> str | None:
    """The corner of a line chart (``"top_left"``, ``"top_right"``, ``"bottom_left"``, ``"bottom_right"``, in that
    order of preference) where a legend of ``rows`` entries of up to ``chars`` characters covers no line, bar or
    point, or ``None`` when every corner holds data (the legend then goes beside the plot).

    Lines are followed between their points (a line from top left to bottom right crosses no corner box of the
    other two corners, but its segments pass through the boxes its end points lie in); a bar covers the span from
    0 to its top.

    >>> falling = Line("f", [0, 1], [1.2, 0.7])
    >>> empty_corner([falling, Line("g", [0, 1], [1.1, 0.6])], rows=2, chars=24)
    'top_right'
    >>> empty_corner([Line("flat", [0, 1, 2], [1, 1, 1]), Line("low", [0, 1, 2], [0, 0, 0])]) is None
    True
    """
    segs: list[np.ndarray] = []  # rows (x0, y0, x1, y1): a line's segments, its points, points, bars
    for s in series:
        x, y = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
        n = min(len(x), len(y))
        x, y = x[:n], y[:n]
        if n > 1:
            segs.append(np.stack([x[:-1], y[:-1], x[1:], y[1:]], axis=1))
        segs.append(np.stack([x, y, x, y], axis=1))  # a point between two gaps (NaN) has no segment
    if points:
        px, py = np.array([pt.x for pt in points], dtype=float), np.array([pt.y for pt in points], dtype=float)
        segs.append(np.stack([px, py, px, py], axis=1))
    if bars is not None and len(bars[0]):
        bx, by = np.asarray(bars[0], dtype=float), np.asarray(bars[1], dtype=float)
        for off in (-0.4, 0.0, 0.4):  # a bar 0.8 wide, from 0 to its top
            segs.append(np.stack([bx + off, np.zeros_like(by), bx + off, by], axis=1))
    seg = np.concatenate(segs) if segs else np.empty((0, 4))
    seg = seg[np.isfinite(seg).all(axis=1)]
    if not len(seg):
        return "top_left"
    if bars is not None:  # the bars' axis starts at the bars' own span, and at 0 on y
        seg = np.concatenate([seg, [[seg[0, 0], 0.0, seg[0, 0], 0.0]]])

    def unit(v: np.ndarray, pad: float) -> np.ndarray:  # data → share of the frame, Bokeh's padding included
        lo, hi = float(v.min()), float(v.max())
        span = hi - lo or 1.0
        return (v - lo + pad / 2 * span) / (span * (1 + pad))

    ux, uy = unit(seg[:, [0, 2]], _PAD[0]), unit(seg[:, [1, 3]], _PAD[1])
    w = min(1.0, (_GLYPH_PX + _CHAR_PX * chars) / _FRAME_PX[0]) + 0.03  # the legend box, with a little margin
    h = min(1.0, (_ROW_PX * rows + 12) / _FRAME_PX[1]) + 0.03
    for corner in ("top_left", "top_right", "bottom_left", "bottom_right"):
        xbox = (-np.inf, w) if corner.endswith("left") else (1 - w, np.inf)
        ybox = (1 - h, np.inf) if corner.startswith("top") else (-np.inf, h)
        if not _segments_meet(ux, uy, xbox, ybox):
            return corner
    return None


def _segments_meet(ux: np.ndarray, uy: np.ndarray, xbox: tuple[float, float], ybox: tuple[float, float]) -> bool:
    """Whether any segment (rows of ``ux``, ``uy``: start and end) meets the closed box ``xbox`` × ``ybox``: the
    part of each segment inside the box (Liang–Barsky clipping), exactly and in one pass over the segments. Points
    sampled along each segment (33 a segment) cost 0.5 s a chart of ten 20,000-step runs, and missed a long segment
    that cut a box's inner corner between two samples.

    >>> seg = np.array([[0.0, 1.0]]), np.array([[0.5, 1.0]])  # (0, 0.5) → (1, 1): both ends outside the boxes
    >>> _segments_meet(*seg, (0.0, 0.3), (0.6, 1.0)), _segments_meet(*seg, (0.0, 0.1), (0.6, 1.0))
    (True, False)
    """
    (xlo, xhi), (ylo, yhi) = xbox, ybox
    ends_in = (ux >= xlo) & (ux <= xhi) & (uy >= ylo) & (uy <= yhi)
    if ends_in.any():  # a point, or a segment's end, in the box (a corner full of data: no clipping needed)
        return True
    near = ((ux.min(axis=1) <= xhi) & (ux.max(axis=1) >= xlo) & (uy.min(axis=1) <= yhi)
            & (uy.max(axis=1) >= ylo))  # the segments whose bounding box meets the box: the only ones to clip
    ux, uy = ux[near], uy[near]
    enter, leave = np.zeros(len(ux)), np.ones(len(ux))  # the share of each segment inside both slabs
    for u, (lo, hi) in ((ux, xbox), (uy, ybox)):
        start, d = u[:, 0], u[:, 1] - u[:, 0]
        inside = (start >= lo) & (start <= hi)  # where the segment does not move along this axis
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = (lo - start) / d, (hi - start) / d
        moves = d != 0
        enter = np.maximum(enter, np.where(moves, np.minimum(a, b), np.where(inside, -np.inf, np.inf)))
        leave = np.minimum(leave, np.where(moves, np.maximum(a, b), np.where(inside, np.inf, -np.inf)))
    return bool((enter <= leave).any())


#: most entries a legend inside a line chart holds; more go beside the plot (a box of them hid a corner's worth of data)
LEGEND_INSIDE_MAX = 4


def legend_place(series: Sequence[Line], points: Sequence[Point] = (),
                 bars: tuple[Sequence[float], Sequence[float], str] | None = None, *,
                 legend_at: str = "auto") -> str | None:
    """Where a line chart's legend goes: the one rule of both renderers (the page's interactive and static charts,
    and the run directory's ``deletion_curves.png``).

    ``None``: no legend (at most one entry: the title says what it is); ``"outside"``: beside the plot (asked for,
    more than :data:`LEGEND_INSIDE_MAX` entries, or ``"auto"`` with data in every corner); else a corner inside the
    plot: ``legend_at`` as given, or for ``"auto"`` the first corner no line, bar or point reaches
    (:func:`empty_corner`). The static renderer took matplotlib's ``"best"``, which sat on the curves when every
    place held some.

    >>> zig, zag = Line("a", [0, 1, 2], [0, 1, 0]), Line("b", [0, 1, 2], [1, 0, 1])
    >>> legend_place([zig]), legend_place([zig, zag]), legend_place([Line("up", [0, 1], [0, 1]), Line("c", [0], [0])])
    (None, 'outside', 'top_left')
    """
    names = list(dict.fromkeys(s.name for s in series if s.legend))
    entries = len(names) + (bars is not None)
    if entries <= 1:
        return None
    if len(names) > LEGEND_INSIDE_MAX or legend_at == "outside":
        return "outside"
    if legend_at == "auto":  # a corner no data reaches (a legend at top left covered a falling line)
        return empty_corner(series, points, bars, rows=entries, chars=max(map(len, names), default=0)) or "outside"
    return legend_at


def mpl_pad(ax: Any, *, x: bool = True) -> None:
    """Pad a matplotlib axes around its data as Bokeh pads a line chart (:data:`_PAD`; ``x=False``: the y axis only,
    for an x range set by hand), so that the corner :func:`legend_place` judges free is as free in a PNG as on the
    page."""
    if x:
        ax.margins(x=_PAD[0] / 2)
    ax.margins(y=_PAD[1] / 2)


#: :func:`legend_place`'s corners as matplotlib's ``loc``
_MPL_LOC = {"top_left": "upper left", "top_right": "upper right", "bottom_left": "lower left",
            "bottom_right": "lower right"}


def mpl_legend(ax: Any, where: str | None, *, fontsize: float, handles: Sequence[Any] | None = None,
               labels: Sequence[str] | None = None) -> Any:
    """Draw ``ax``'s legend at ``where`` (:func:`legend_place`): in that corner, or beside the plot at its top right
    (``"outside"``); nothing for ``None``. ``handles``/``labels``: the entries, if not ``ax``'s own."""
    if where is None:
        return None
    entries = () if handles is None else (handles, labels)
    if where == "outside":
        return ax.legend(*entries, fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return ax.legend(*entries, fontsize=fontsize, loc=_MPL_LOC.get(where, "upper left"))


def _style(p: Any, grid: bool = True) -> None:
    p.toolbar.logo = None
    p.outline_line_color = "#dddddd"
    p.axis.axis_label_text_font_style = "normal"
    p.axis.axis_label_text_font_size = "12px"
    p.background_fill_color = "#ffffff"
    if grid:
        p.grid.grid_line_alpha = 0.35
    else:
        p.grid.grid_line_color = None


def _num(v: Any) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() else f"{f:.4g}"


def _plt():
    return pyplot()


def _png(fig: Any) -> bytes:
    plt = _plt()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


__all__ = ["LABEL_CHARS", "LEGEND_INSIDE_MAX", "NOT_ALIVE_LABEL", "PALETTE", "POINT_LABEL_TITLE_PAD",
           "T_STAR_LABELLED_RUNS", "Charts", "Line", "Point", "bokeh_available", "empty_corner", "hatch_not_alive",
           "label_text", "legend_place", "mpl_legend", "mpl_pad", "mpl_point_labels", "point_labels", "short_label",
           "stable_bokeh_ids", "t_star_label"]
