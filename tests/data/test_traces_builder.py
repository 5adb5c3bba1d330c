"""The panel builder against a direct count, whatever the order of events and the batch boundaries (steps
arriving out of order make its arrays grow at the front; new agents at the side)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aumann.data.traces.builder import PanelBuilder
from aumann.data.traces.events import EventBatch
from aumann.data.traces.spec import load_spec

SPEC = load_spec({"agent": {"field": "a"}, "step": {"field": "s"}, "action": {"field": "x"},
                  "features": [{"kind": "count_each"}, {"kind": "sum", "name": "v", "field": "v"},
                               {"kind": "last", "name": "last_v", "field": "v", "fill": "zero"}]})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(-5, 30), st.sampled_from(["p", "q", "r"]),
                          st.integers(-3, 9)), min_size=1, max_size=200),
       st.lists(st.integers(1, 50), min_size=1, max_size=8))
def test_builder_matches_direct_count(events, cuts):
    b = PanelBuilder(SPEC)
    i = 0
    k = 0
    while i < len(events):
        chunk = events[i: i + cuts[k % len(cuts)]]
        i += len(chunk)
        k += 1
        b.add(EventBatch(np.array([e[0] for e in chunk], dtype=object), np.array([e[1] for e in chunk]),
                         np.array([e[2] for e in chunk], dtype=object),
                         {"v": np.array([float(e[3]) for e in chunk])}))
    p = b.finish()
    agents = sorted({e[0] for e in events})
    steps = list(range(min(e[1] for e in events), max(e[1] for e in events) + 1))
    assert p.agent_ids.tolist() == agents and p.steps.tolist() == steps
    want = np.zeros((len(steps), len(agents), len(p.features)))
    last = {}
    for a, s, x, v in events:
        t, j = s - steps[0], agents.index(a)
        want[t, j, p.features.index(x)] += 1
        want[t, j, p.features.index("v")] += v
        last[(t, j)] = v
    for (t, j), v in last.items():
        want[t, j, p.features.index("last_v")] = v
    np.testing.assert_array_equal(p.values, want)
    first = {a: min(s for b_, s, _, _ in events if b_ == a) for a in agents}
    alive = np.array([[s >= first[a] for a in agents] for s in steps])
    np.testing.assert_array_equal(p.alive if p.alive is not None else np.ones_like(alive), alive)
