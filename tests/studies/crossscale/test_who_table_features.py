"""The Bluesky who-table names the panel's features as what they are: its columns read "a at t*", "b at t*" and
"c at t*" (the panel's feature names), which meant nothing to a reader."""

from __future__ import annotations

import numpy as np

from aumann.data.bluesky.counts import RawCounts
from aumann.data.bluesky.synth import SynthConfig, generate
from aumann.studies.charts import Charts
from aumann.studies.crossscale.page import crossscale_document
from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale
from aumann.studies.page import Details, Table


def _tables(blocks):
    for b in blocks:
        if isinstance(b, Details):
            yield from _tables(b.blocks)
        elif isinstance(b, list):
            yield from _tables(b)
        elif isinstance(b, Table):
            yield b


def test_the_who_table_names_followers_posts_and_replies_at_t_star(tmp_path):
    counts = generate(SynthConfig(users=2000, seed=1))
    counts.save(tmp_path / "c")
    topic = counts.topics[0]
    cfg = CrossScaleConfig(sizes=[100, "full"], seeds=[0], topics=[topic], protocols=["RAND"])
    run_crossscale(tmp_path / "c", tmp_path / "o", cfg, log=lambda *_: None)
    doc = crossscale_document(tmp_path / "o", {}, Charts(interactive=False))
    (table,) = [t for s in doc.sections for t in _tables(s.blocks) if t.id == f"who-{topic}"]
    names = ["log(1 + followers) at t*", "log(1 + topic posts) at t*", "log(1 + replies received) at t*"]
    assert table.columns[-3:] == names
    assert not [c for c in table.columns if c in ("a at t*", "b at t*", "c at t*")]
    # the columns hold what they say: log(1 + followers) of each user, from the counts themselves
    raw = RawCounts.load(tmp_path / "c")
    followers = raw.followers()
    col = table.columns.index(names[0])
    users = [int(r[1].sort if hasattr(r[1], "sort") else r[1]) for r in table.rows]
    assert users
    assert np.allclose([r[col] for r in table.rows], np.log1p(followers[users]))
