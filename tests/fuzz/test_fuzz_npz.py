"""Fuzz the .npz readers (Panel.load, Attribution.load, io.read_npz): mutated valid files, crafted archives whose
headers and zip entries lie, and random bytes."""

from __future__ import annotations

import io as _io
import zipfile
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from aumann import io
from aumann.attribution import Attribution
from aumann.errors import PanelError
from aumann.panel import Panel
from tests.fuzz.harness import fuzz_target, scratch_dir, typed_or_result
from tests.hardening import npzcraft as C


def _valid_panel_bytes() -> bytes:
    p = Panel(np.random.default_rng(0).random((3, 4, 2)), agent_ids=["a", "b", "c", "d"], alive=[[1, 1, 1, 0]] * 3,
              groups={"g": ["x", "y", "x", "y"]}, context={"c": np.arange(3.0), "w": np.ones((3, 2))},
              meta={"k": [1, 2]})
    buf = _io.BytesIO()
    with scratch_dir() as d:
        path = p.save(Path(d) / "p.npz")
        buf.write(path.read_bytes())
    return buf.getvalue()


def _valid_attribution_bytes() -> bytes:
    from aumann.attribution import attribute, indicators

    p = Panel(np.random.default_rng(1).random((2, 5, 2)))
    res = attribute(indicators.get("lin"), p)
    with scratch_dir() as d:
        return res.save(Path(d) / "a.npz").read_bytes()


PANEL = _valid_panel_bytes()
ATTRIBUTION = _valid_attribution_bytes()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("zero"), st.integers(0, 10**6), st.integers(1, 64)),
)


def _mutate(data: bytes, muts: list[tuple[str, int, int]]) -> bytes:
    b = bytearray(data)
    for kind, pos, arg in muts:
        if not b:
            break
        i = pos % len(b)
        if kind == "flip":
            b[i] ^= arg
        elif kind == "truncate":
            del b[i:]
        elif kind == "insert":
            b[i:i] = bytes([arg])
        else:
            b[i:i + arg] = bytes(min(arg, len(b) - i))
    return bytes(b)


def _check_panel(p: Panel) -> None:
    T, N, D = p.shape
    assert len(p.features) == D and p.agent_ids.shape == (N,) and p.steps.shape == (T,)
    live = p.values if p.alive is None else p.values[p.alive]
    assert np.isfinite(live).all()


@fuzz_target(muts=st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_panel_load_of_mutated_files(muts):
    with scratch_dir() as d:
        path = Path(d) / "p.npz"
        path.write_bytes(_mutate(PANEL, muts))
        panel, err = typed_or_result(Panel.load, path)
        assert err is None or isinstance(err, PanelError)
        if panel is not None:
            _check_panel(panel)


@fuzz_target(muts=st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_attribution_load_of_mutated_files(muts):
    with scratch_dir() as d:
        path = Path(d) / "a.npz"
        path.write_bytes(_mutate(ATTRIBUTION, muts))
        res, _ = typed_or_result(Attribution.load, path)
        if res is not None:
            assert res.phi.shape == (res.T, res.N) and np.isfinite(res.phi).all()


dims = st.integers(0, 6) | st.sampled_from([10**6, 2**31, 2**40, 2**62])
shape = st.lists(dims, min_size=0, max_size=4).map(tuple)
descr = st.sampled_from(["<f8", "<f4", "<i8", "|b1", "<U3", "|O", "<c16", "<M8[ns]", "|V8", "<f2", ">f8", "|S2"])


@fuzz_target(members=st.dictionaries(st.sampled_from(["values", "agent_ids", "steps", "alive", "group::g",
                                                      "context::c", "__meta__", "phi"]),
                                     st.tuples(shape, descr, st.integers(0, 512)), min_size=1, max_size=6),
             meta=st.one_of(st.none(), st.just(C.panel_meta(2)), st.just([1]), st.just("[" * 300)))
def test_fuzz_crafted_archives_whose_headers_lie(members, meta):
    with scratch_dir() as d:
        path = Path(d) / "c.npz"
        body = {k: C.header(s, t) + bytes(n) for k, (s, t, n) in members.items()}
        if meta is not None:
            body["__meta__"] = C.npy(np.frombuffer(str(meta).encode() if isinstance(meta, str) else
                                                   __import__("json").dumps(meta).encode(), dtype=np.uint8))
        C.archive(path, body)
        panel, _ = typed_or_result(Panel.load, path)
        if panel is not None:
            _check_panel(panel)
        typed_or_result(Attribution.load, path)
        typed_or_result(io.read_npz, path, error=PanelError)


@fuzz_target(data=st.binary(max_size=2048), prefix=st.sampled_from([b"", b"PK\x03\x04", b"\x93NUMPY", b"PK"]))
def test_fuzz_random_bytes_are_never_a_traceback(data, prefix):
    with scratch_dir() as d:
        path = Path(d) / "r.npz"
        path.write_bytes(prefix + data)
        typed_or_result(Panel.load, path)
        typed_or_result(io.read_npz, path, error=PanelError)


@fuzz_target(file_size=st.integers(0, 2**32 - 2), method=st.sampled_from([zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED]))
def test_fuzz_zip_entries_that_claim_any_size(file_size, method):
    with scratch_dir() as d:
        path = C.lying_sizes(Path(d) / "b.npz", file_size=file_size)
        typed_or_result(Panel.load, path)
