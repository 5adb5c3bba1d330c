"""Where the page's interactive charts put their axes, legends and labels: ranges that fit the data (no phantom
step), legends and the ``t*`` label off the data."""

from __future__ import annotations

import numpy as np
import pytest

from aumann.studies import charts
from aumann.studies.charts import Charts, Line, Point, empty_corner

needs_bokeh = pytest.mark.skipif(not charts.bokeh_available(), reason="bokeh is not installed")


@pytest.fixture
def drawn(monkeypatch):
    """The Bokeh figures a :class:`Charts` embeds, as models."""
    models: list = []

    def embed(self, p):
        models.append(p)
        return "<div></div>"

    monkeypatch.setattr(Charts, "_embed", embed)
    return models


@needs_bokeh
def test_a_bar_chart_of_steps_0_to_15_has_no_step_16_on_its_axis(drawn):
    """The Φ_t bars of a 16-step run (steps 0 … 15) sat on an axis that ran to 16, a step the run does not have."""
    x = list(range(16))
    Charts(interactive=True).lines("Φ_t", [], xlabel="step t", ylabel="Φ_t", bars=(x, np.linspace(1, 0.2, 16), "Φ_t"),
                                   points=[Point(15, 0.2, "t*")])
    (p,) = drawn
    lo, hi = p.x_range.start, p.x_range.end
    assert lo is not None and hi is not None, type(p.x_range).__name__  # a range of its own, not Bokeh's padding
    assert -1 < lo <= -0.4 and 15.4 <= hi < 16, (lo, hi)  # each bar whole (0.8 wide), and no 16


def test_a_static_bar_chart_of_steps_0_to_15_has_no_step_16_on_its_axis(monkeypatch):
    """The static renderer (matplotlib) padded the same bars to a tick at 16."""
    seen = {}

    def png(fig):
        fig.canvas.draw()
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        seen.update(lim=(lo, hi), ticks=[t for t in ax.get_xticks() if lo <= t <= hi])
        return b""

    monkeypatch.setattr(charts, "_png", png)
    Charts(interactive=False).lines("Φ_t", [], xlabel="step t", ylabel="Φ_t",
                                    bars=(list(range(16)), np.linspace(1, 0.2, 16), "Φ_t"),
                                    points=[Point(15, 0.2, "t*")])
    lo, hi = seen["lim"]
    assert -1 < lo <= -0.4 and 15.4 <= hi < 16, seen
    assert max(seen["ticks"]) <= 15 and min(seen["ticks"]) >= 0, seen


def _legend_box(p):
    return p.legend[0].location, list(p.right).count(p.legend[0])


@needs_bokeh
def test_a_falling_two_step_line_keeps_its_legend_off_the_line(drawn):
    """At T = 2 the macro curve falls from top left to bottom right, and its legend sat at top left, over it."""
    series = [Line("run 0", [0, 1], [1.17, 0.70]), Line("run 0, original indicator", [0, 1], [1.14, 0.66], dash=True)]
    Charts(interactive=True).lines("f", series, xlabel="step t", ylabel="f", points=[Point(1, 0.70, "t*")],
                                   integer_x=True)
    (p,) = drawn
    location, outside = _legend_box(p)
    assert not outside and location in ("top_right", "bottom_left"), location


@needs_bokeh
def test_a_legend_goes_beside_a_plot_whose_every_corner_holds_data(drawn):
    zig = Line("a", [0, 1, 2, 3, 4], [0, 1, 0, 1, 0])
    zag = Line("b", [0, 1, 2, 3, 4], [1, 0, 1, 0, 1])
    Charts(interactive=True).lines("f", [zig, zag], xlabel="x", ylabel="y")
    (p,) = drawn
    assert _legend_box(p)[1] == 1  # beside the plot, not over a corner's data


def test_empty_corner_follows_the_segments_between_points():
    """A line from (0, 0) to (1, 1) passes through the bottom left and top right corners; the other two are free."""
    rising = [Line("up", [0, 1], [0, 1])]
    assert empty_corner(rising) == "top_left"
    assert empty_corner([Line("down", [0, 1], [1, 0])]) == "top_right"
    # bars cover 0 … their top: a tall first bar fills the top left corner
    assert empty_corner([], bars=([0, 1, 2, 3], [1.0, 0.2, 0.2, 0.2], "b")) == "top_right"


def test_empty_corner_sees_a_long_segment_that_cuts_a_corner_between_its_ends():
    """A segment from (0.01, 0.54) to (0.44, 0.99) (the frame fixed by points at (0, 0) and (1, 1)) cuts the inner
    corner of the top left corner's box, both its ends outside the box; 33 points sampled along it fell either side
    of the cut, and the corner counted as free. Points at (0, 0) and (1, 1) fill the bottom left and top right
    corners: the bottom right is the free one."""
    line = Line("seg", [0.01, 0.44], [0.54, 0.99])
    assert empty_corner([line, Line("p", [0], [0]), Line("q", [1], [1])]) == "bottom_right"


def _dense_empty_corner(series, bars=None, *, rows=1, chars=10, samples=4001):
    """empty_corner's rule checked on ``samples`` points along every segment (a reference for the exact test)."""
    xs, ys = [], []
    for s in series:
        x, y = np.asarray(s.x, dtype=float), np.asarray(s.y, dtype=float)
        u = np.linspace(0.0, 1.0, samples)[:, None]
        xs.append((x[:-1] + u * np.diff(x)).ravel() if len(x) > 1 else x)
        ys.append((y[:-1] + u * np.diff(y)).ravel() if len(y) > 1 else y)
    x, y = np.concatenate(xs), np.concatenate(ys)
    ux = (x - x.min() + 0.05 * np.ptp(x)) / (1.1 * np.ptp(x))
    uy = (y - y.min() + 0.06 * np.ptp(y)) / (1.12 * np.ptp(y))
    w, h = min(1.0, (40 + 5.5 * chars) / 300) + 0.03, min(1.0, (20 * rows + 12) / 220) + 0.03
    for corner in ("top_left", "top_right", "bottom_left", "bottom_right"):
        inx = ux <= w if corner.endswith("left") else ux >= 1 - w
        iny = uy >= 1 - h if corner.startswith("top") else uy <= h
        if not (inx & iny).any():
            return corner
    return None


def test_empty_corner_agrees_with_densely_sampled_segments():
    """The exact segment test and 4,001 points sampled along each segment find the same corner on 300 random charts
    of two to five short random walks."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        T = int(rng.integers(2, 9))
        series = [Line(f"s{i}", list(range(T)), np.cumsum(rng.normal(size=T))) for i in range(int(rng.integers(2, 6)))]
        assert empty_corner(series) == _dense_empty_corner(series), [list(s.y) for s in series]


@needs_bokeh
def test_the_heatmap_t_star_label_sits_above_the_cells(drawn):
    """The ``t*`` label of an interactive heatmap sat inside the plot, on the bottom cell, its white box over the
    cell's colour; it is now the one tick of an axis above the plot."""
    from bokeh.models import Label

    Charts(interactive=True).heatmap("h", np.arange(12.0).reshape(3, 4), ["a", "b", "c"], ["0", "1", "2", "3"],
                                     xlabel="step", ylabel="agent", value_label="φ", vline=(3, "t*"))
    (p,) = drawn
    assert not [r for r in p.center if isinstance(r, Label)]  # nothing drawn over the cells but the line
    above = [a for a in p.above if getattr(a, "major_label_overrides", None)]
    assert len(above) == 1 and above[0].major_label_overrides == {3: "t*"} and list(above[0].ticker.ticks) == [3]
    assert list(p.below[0].ticker.ticks) == [0, 1, 2, 3]  # the step axis keeps its own ticks


@needs_bokeh
def test_the_heatmap_t_star_label_sits_next_to_the_cells_under_the_not_alive_legend(drawn):
    """With the "not alive" legend also above the plot, the t* tick came above the legend, a row away from the line
    it names; it is next to the cells."""
    dead = np.zeros((3, 4), dtype=bool)
    dead[1, :2] = True
    Charts(interactive=True).heatmap("h", np.arange(12.0).reshape(3, 4), ["a", "b", "c"], ["0", "1", "2", "3"],
                                     xlabel="step", ylabel="agent", value_label="φ", vline=(3, "t*"), not_alive=dead)
    (p,) = drawn
    assert len(p.above) == 2 and getattr(p.above[0], "major_label_overrides", None) == {3: "t*"}, p.above


#: a macro curve whose target step is the last (run 0) and one whose curve falls after it (run 1)
_MACRO = [Line("run 0", list(range(16)), np.linspace(10, 40, 16)),
          Line("run 1", list(range(16)), [*np.linspace(12, 32, 14), 31.5, 32.0])]
_T_STARS = [Point(15, 40.0, "t*"), Point(13, 32.0, "t*", "#555555")]


@needs_bokeh
def test_the_t_star_labels_of_an_interactive_line_chart_sit_above_the_plot(drawn):
    """On a phone the ``t*`` label of a target step at the last step, drawn beside its point inside the plot, was cut
    off at the plot's right edge, and another run's label sat on that run's curve; each is now a tick of an axis above
    the plot, over the point's dotted line (as on the heatmap), where it covers no data."""
    from bokeh.models import Label

    Charts(interactive=True).lines("f", _MACRO, xlabel="step t", ylabel="f", points=_T_STARS, integer_x=True)
    (p,) = drawn
    assert not [r for r in p.center if isinstance(r, Label)]  # nothing written over the data
    (mark,) = [a for a in p.above if getattr(a, "major_label_overrides", None)]
    assert list(mark.ticker.ticks) == [13, 15] and mark.major_label_overrides == {13: "t*", 15: "t*"}
    assert type(p.below[0].ticker).__name__ == "SingleIntervalTicker"  # the step axis keeps its own ticks


def test_the_t_star_labels_of_a_static_line_chart_sit_above_the_plot_inside_the_figure(monkeypatch):
    """The static renderer wrote ``t*`` beside its point: at the top of the plot it ran over the frame, and next to
    run 1's point over run 1's falling curve. Above the plot it covers no data and stays inside the figure."""
    boxes: dict = {}

    def png(fig):
        fig.tight_layout()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        boxes["fig"] = fig.bbox
        boxes["axes"] = fig.axes[0].get_window_extent(renderer)
        boxes["labels"] = [(t.get_text(), t.get_window_extent(renderer)) for t in fig.axes[0].texts]
        return b""

    monkeypatch.setattr(charts, "_png", png)
    Charts(interactive=False).lines("f", _MACRO, xlabel="step t", ylabel="f", points=_T_STARS, integer_x=True)
    assert [text for text, _ in boxes["labels"]] == ["t*", "t*"]
    fig, axes = boxes["fig"], boxes["axes"]
    for _, label in boxes["labels"]:
        assert label.y0 >= axes.y1 - 0.5, (label, axes)  # above the plot's frame: on no line
        assert fig.x0 <= label.x0 and label.x1 <= fig.x1 and label.y1 <= fig.y1, (label, fig)  # not cut off


#: (series, where both renderers put the legend): a line crossing from bottom left to top right leaves top left free;
#: a zigzag reaches every corner; six methods are too many to sit inside
_LEGEND_CASES = {
    "rising": ([Line("run 0", [0, 1], [0.0, 1.0]), Line("run 1", [0, 1], [0.05, 1.05])], "top_left"),
    "zigzag": ([Line("a", [0, 1, 2, 3, 4], [0, 1, 0, 1, 0]), Line("b", [0, 1, 2, 3, 4], [1, 0, 1, 0, 1])], "outside"),
    "six methods": ([Line(m, [1, 2, 3], [i, i + 0.1, i + 0.2]) for i, m in enumerate(
        ["aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out", "llm_judge", "random"])],
        "outside"),
}


def _static_legend(monkeypatch, series, **kw) -> tuple[str, bool]:
    """(matplotlib's loc, whether the legend box lies beside the plot's frame) of the static chart of ``series``."""
    seen = {}

    def png(fig):
        fig.tight_layout()
        fig.canvas.draw()
        ax = fig.axes[0]
        legend = ax.get_legend()
        box = legend.get_window_extent(fig.canvas.get_renderer())
        frame = ax.get_window_extent(fig.canvas.get_renderer())
        seen["where"] = (legend._loc, box.x0 >= frame.x1)
        return b""

    monkeypatch.setattr(charts, "_png", png)
    Charts(interactive=False).lines("f", series, xlabel="x", ylabel="y", **kw)
    return seen["where"]


@pytest.mark.parametrize("case", list(_LEGEND_CASES))
def test_static_and_interactive_line_charts_put_the_legend_in_one_place(drawn, monkeypatch, case):
    """The static renderer asked matplotlib for its "best" place, which sat on the curves when no place was free (a
    zigzag, or the deletion curves of six methods); the interactive one took a corner no data reaches, else beside
    the plot. Both follow the one rule now (:func:`charts.legend_place`)."""
    series, expected = _LEGEND_CASES[case]
    loc, beside = _static_legend(monkeypatch, series)
    codes = {"top_left": 2, "top_right": 1, "bottom_left": 3, "bottom_right": 4}  # matplotlib's loc codes
    assert beside if expected == "outside" else (not beside and loc == codes[expected]), (loc, beside)
    assert charts.legend_place(series) == expected
    if charts.bokeh_available():
        Charts(interactive=True).lines("f", series, xlabel="x", ylabel="y")
        location, outside = _legend_box(drawn[-1])
        assert outside == 1 if expected == "outside" else (not outside and location == expected), (location, outside)


def test_the_run_directory_deletion_curves_keep_their_legend_off_the_curves(tmp_path, monkeypatch):
    """deletion_curves.png (K_del > 1) took matplotlib's "best" in each panel, which put six methods' legend over
    the curves; by the page's rule six entries go beside the plots: once, right of the masking panel."""
    from types import SimpleNamespace

    from aumann.studies import figures

    methods = ["aumann_shapley", "sampled_shapley", "sampled_shapley_cv", "leave_one_out", "llm_judge", "random"]
    arrays = {f"{key}_{m}": np.linspace(0.01 * i, 0.05 * (i - 2), 9) for i, m in enumerate(methods)
              for key in ("curve", "curve_masking")}
    result = SimpleNamespace(scenario="s", records=[{"methods": {m: {} for m in methods}}], arrays=[arrays])
    seen = {}

    def save(fig, path):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        seen["frames"] = [ax.get_window_extent(renderer) for ax in fig.axes]
        seen["legends"] = [(i, ax.get_legend().get_window_extent(renderer), len(ax.get_legend().get_texts()))
                           for i, ax in enumerate(fig.axes) if ax.get_legend() is not None]
        seen["width"] = fig.bbox.x1
        return path

    monkeypatch.setattr(figures, "_save", save)
    figures.deletion_curves_figure(result, tmp_path)
    assert len(seen["legends"]) == 1, seen["legends"]
    panel, box, entries = seen["legends"][0]
    assert panel == 1 and entries == len(methods)
    assert not any(box.overlaps(frame) for frame in seen["frames"]) and box.x1 <= seen["width"], (box, seen)


def _macro_result(curves, t_stars):
    """A study result of one macro curve per run (``f_values``; the original indicator just below it)."""
    from types import SimpleNamespace

    arrays = [{"f_values": np.asarray(f, dtype=float), "f_original_values": np.asarray(f, dtype=float) - 0.05}
              for f in curves]
    records = [{"t_star": t, "f_t_star": float(f[t])} for f, t in zip(curves, t_stars)]
    return SimpleNamespace(scenario="s", records=records, arrays=arrays)


def _macro_curve_drawn(result, tmp_path, monkeypatch) -> dict:
    """macro_curve.png as it would be written: its legend's loc and box, the plot's frame, title and texts."""
    from aumann.studies import figures

    seen: dict = {}

    def save(fig, path):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        ax = fig.axes[0]
        legend = ax.get_legend()
        seen.update(fig=fig.bbox, frame=ax.get_window_extent(renderer), title=ax.title.get_window_extent(renderer),
                    loc=legend._loc, legend=legend.get_window_extent(renderer),
                    labels=[(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts])
        return path

    monkeypatch.setattr(figures, "_save", save)
    figures.macro_curve_figure(result, tmp_path)
    return seen


def test_the_run_directory_macro_curve_puts_its_legend_where_the_page_does(tmp_path, monkeypatch):
    """macro_curve.png asked matplotlib for its "best" place (a search over every point of every curve, and a place
    that could differ from the page's); a rising curve leaves the top left corner free, and the legend goes there."""
    rising = np.linspace(0.0, 1.0, 16)
    seen = _macro_curve_drawn(_macro_result([rising], [15]), tmp_path, monkeypatch)
    assert seen["loc"] == 2, seen["loc"]  # matplotlib's "upper left"; 0 is "best"


def test_the_run_directory_macro_curve_legend_goes_beside_a_plot_whose_every_corner_holds_data(tmp_path, monkeypatch):
    zigzag = np.tile([0.0, 1.0], 8)
    seen = _macro_curve_drawn(_macro_result([zigzag], [13]), tmp_path, monkeypatch)
    box, frame = seen["legend"], seen["frame"]
    assert box.x0 >= frame.x1 and box.x1 <= seen["fig"].x1, (box, frame)  # beside the curves, inside the figure


def test_the_run_directory_macro_curve_labels_t_star_above_the_plot(tmp_path, monkeypatch):
    """macro_curve.png marked each run's t* with a dot and no text; it is labelled as on the page: "t*" above the
    plot over the step (each run's, up to three runs), clear of the title and inside the figure."""
    curves = [np.linspace(0.0, 1.0, 16), [*np.linspace(0.1, 0.8, 14), 0.75, 0.7]]
    seen = _macro_curve_drawn(_macro_result(curves, [15, 13]), tmp_path, monkeypatch)
    labels = [(text, box) for text, box in seen["labels"] if text == "t*"]
    assert len(labels) == 2, seen["labels"]
    for _, box in labels:
        assert box.y0 >= seen["frame"].y1 - 0.5, (box, seen["frame"])  # above the plot: on no curve
        assert not box.overlaps(seen["title"]), (box, seen["title"])
        assert seen["fig"].x0 <= box.x0 and box.x1 <= seen["fig"].x1 and box.y1 <= seen["fig"].y1, box


#: a phone's plot frame is about 300 px wide (charts._FRAME_PX); the t* dot 9 px across (charts.POINT_PX)
_PHONE_FRAME_PX, _DOT_PX = 300.0, 9.0


@needs_bokeh
@pytest.mark.parametrize("t_star", [0, 199])
def test_the_t_star_dot_of_a_200_step_bar_chart_fits_a_phone_frame(drawn, t_star):
    """The Φ_t bars of a 200-step run ended 0.9 step past the last bar: on a phone (1.5 px a step) the t* dot of
    the last step was cut in half at the plot's right edge (Bokeh clips glyphs to the frame); the same at step 0
    on the left, 0.5 step."""
    T = 200
    Charts(interactive=True).lines("Φ_t", [], xlabel="step", ylabel="Φ_t",
                                   bars=(list(range(T)), np.linspace(0.2, 1.0, T), "Φ_t"),
                                   points=[Point(t_star, 1.0, "t*")])
    (p,) = drawn
    lo, hi = p.x_range.start, p.x_range.end
    px = _PHONE_FRAME_PX / (hi - lo)  # px a step
    room = (hi - t_star if t_star else t_star - lo) * px
    assert room >= _DOT_PX / 2, (lo, hi, room)


def test_the_t_star_dot_of_a_static_200_step_bar_chart_is_inside_its_plot(monkeypatch):
    """The static renderer's dot (6 pt across, 2.8 px a step) stuck out of its plot the same way."""
    seen = {}

    def png(fig):
        fig.canvas.draw()
        ax = fig.axes[0]
        frame = ax.get_window_extent(fig.canvas.get_renderer())
        dot = next(line for line in ax.get_lines() if line.get_marker() == "o")
        x, _ = ax.transData.transform((dot.get_xdata()[0], dot.get_ydata()[0]))
        seen.update(right=frame.x1 - x, radius=dot.get_markersize() / 2 * fig.dpi / 72)
        return b""

    monkeypatch.setattr(charts, "_png", png)
    T = 200
    Charts(interactive=False).lines("Φ_t", [], xlabel="step", ylabel="Φ_t",
                                    bars=(list(range(T)), np.linspace(0.2, 1.0, T), "Φ_t"),
                                    points=[Point(T - 1, 1.0, "t*")])
    assert seen["right"] >= seen["radius"], seen
