"""An interactive figure gives the same bytes for the same data: Bokeh names its document and root element with
``uuid4`` ids, so two runs with the same config and seed wrote two different report.html pages."""

from __future__ import annotations

import re

import pytest

from aumann.studies import charts
from aumann.studies.charts import Charts, Line, Point

pytestmark = pytest.mark.skipif(not charts.bokeh_available(), reason="bokeh is not installed")

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _page(agent: str) -> list[str]:
    c = Charts(interactive=True)
    figs = [c.lines("f", [Line(agent, [0, 1, 2], [0.5, 1.5, 1.0])], xlabel="t", ylabel="f",
                    points=[Point(1, 1.5, "t*")]) for _ in range(2)]  # the same figure twice on one page
    # Bokeh's model ids (p1006, ...) count the models this process made: the same in every fresh process
    return [re.sub(r'"p\d+"', '"p"', f.html) for f in figs]


def test_the_same_figures_get_the_same_ids_and_two_figures_of_a_page_distinct_ones():
    a, b = _page("agent 1"), _page("agent 1")
    assert a == b  # the same bytes: no random id left
    ids = [set(UUID.findall(h)) for h in a]
    assert all(len(i) == 2 for i in ids) and not ids[0] & ids[1]  # docid and root element, distinct per figure
    assert all(i.startswith(tuple("abcdef")) for s in ids for i in s)  # usable as a CSS id


def test_a_uuid_in_the_figures_data_is_left_as_it_is():
    agent = "0b1c2d3e-0000-4000-8000-000000000001"  # an agent id that looks like a Bokeh id
    (html, _) = _page(agent)
    assert agent in html
