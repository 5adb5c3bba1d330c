"""A replay that diverges on a bytes attribute says so in a bounded, readable line.

A model like mesa-replay's ``CacheableModel`` (mesa-examples' caching_and_replay) holds pickled state as ``bytes``.
When its replay diverged, :class:`ReplayDivergedError` printed the digest entries as Python reprs:
``('model', 'cache', b'\\x80\\x04\\x95\\x00\\x00\\x01...`` cut at 160 characters, escape sequences the reader cannot
use and, for two pickles, usually the same 160 characters on both sides (the bytes differ further in). The diff now
names the attribute and gives each value's length, a short hex prefix and the first byte where they differ.
"""

from __future__ import annotations

import itertools
import pickle
import re

import mesa
import pytest

from aumann.errors import ReplayDivergedError
from aumann.simulators import FeatureRecorder, fork, simulate

_BUILDS = itertools.count()


class Cell(mesa.Agent):
    def __init__(self, model: mesa.Model) -> None:
        super().__init__(model)
        self.x = 1.0
        self.blob = b""

    def step(self) -> None:
        self.x += self.random.random()


class Cached(mesa.Model):
    """Holds a pickle that differs between builds (a build counter inside it), 1.6 MB of it; ``where`` says
    whether the model or its first agent holds it."""

    def __init__(self, where: str = "model", seed: int = 3) -> None:
        super().__init__(rng=seed)
        Cell.create_agents(self, 3)
        blob = pickle.dumps({"grid": list(range(200_000)), "build": next(_BUILDS)})
        self.cache = blob if where == "model" else b""
        if where == "agent":
            next(iter(sorted(self.agents, key=lambda a: a.unique_id))).blob = blob

    def step(self) -> None:
        self.agents.shuffle_do("step")


REC = FeatureRecorder({"x": "x"})


@pytest.mark.parametrize("where", ["model", "agent"])
def test_a_bytes_attribute_that_differs_is_summarised_not_printed(where: str) -> None:
    model = Cached(where)
    simulate(model, steps=1, recorder=REC)
    with pytest.raises(ReplayDivergedError) as info:
        fork(model, steps=1, recorder=REC, strategy="replay", factory=lambda: Cached(where))
    msg = str(info.value)
    size = len(model.cache or next(iter(sorted(model.agents, key=lambda a: a.unique_id))).blob)
    name = "model attribute 'cache'" if where == "model" else "agent 1 attribute 'blob'"
    assert f"{name}: <{size:,} bytes: 80 04 95" in msg  # was: ('model', 'cache', b'\x80\x04\x95\x00...
    assert f"> vs <{size:,} bytes: 80 04 95" in msg
    assert re.search(r"\(first differing at byte [0-9,]+\)", msg)
    assert "\\x" not in msg and "b'\\" not in msg
    assert len(msg) < 1_000


def test_a_list_of_bytes_is_summarised_element_by_element() -> None:
    from aumann.simulators.branching import digest_difference

    a = [("type", "M"), ("model", "states", (b"\x00" * 5_000, b"\x01\x02"))]
    b = [("type", "M"), ("model", "states", (b"\x00" * 5_000, b"\x01\x03"))]
    said = digest_difference(a, b)
    assert said == ("model attribute 'states': (<5,000 bytes: 00 00 00 00 00 00 00 00 …>, <2 bytes: 01 02>) vs "
                    "(<5,000 bytes: 00 00 00 00 00 00 00 00 …>, <2 bytes: 01 03>)")


def test_two_bytes_values_say_where_they_first_differ() -> None:
    from aumann.simulators.branching import digest_difference

    def at(a: bytes, b: bytes) -> str | None:
        return digest_difference([("model", "blob", a)], [("model", "blob", b)])

    zeros = b"\x00" * 70_000  # past the first 64 KiB block the comparison takes at once
    assert at(zeros + b"\x01", zeros + b"\x02") == ("model attribute 'blob': <70,001 bytes: 00 00 00 00 00 00 00 00 "
                                                   "…> vs <70,001 bytes: 00 00 00 00 00 00 00 00 …> (first differing "
                                                   "at byte 70,000)")
    assert at(b"ab", b"abc").endswith("<2 bytes: 61 62> vs <3 bytes: 61 62 63> (first differing at byte 2)")
    assert at(b"", b"\x07").endswith("<0 bytes> vs <1 byte: 07> (first differing at byte 0)")
