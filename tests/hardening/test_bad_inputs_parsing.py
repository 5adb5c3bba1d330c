"""Class 1 of issue 22, unbounded parsing: every reader of outside JSON/TOML goes through the bounded reader,
and an ``.npz`` is checked from its zip directory and ``.npy`` headers before anything is decompressed."""

from __future__ import annotations

import resource
import zipfile

import numpy as np
import pytest

from aumann import io, npz
from aumann.attribution import Attribution
from aumann.errors import AttributionFileError, PanelError
from aumann.panel import Panel
from tests.hardening import npzcraft as C


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_deflated_zeros_whose_shapes_disagree_are_damaged_before_decompression(tmp_path):
    # 0.5 MiB on disk, 560 MB of zeros once read: refused from the headers alone
    p = C.zeros_member(tmp_path / "zeros.npz", (1000, 10000, 7), {
        "agent_ids": C.npy(np.arange(3)), "steps": C.npy(np.arange(1000)), C.META: C.meta_bytes(C.panel_meta(7))})
    assert p.stat().st_size < 2**20
    before = _rss_mib()
    with pytest.raises(PanelError, match="damaged: agent_ids has shape"):
        Panel.load(p)
    assert _rss_mib() - before < 100


def test_a_header_promising_10e6_by_10e6_by_10_is_a_damaged_file_not_a_memory_error(tmp_path):
    p = C.archive(tmp_path / "huge.npz", {"values": C.header((10**6, 10**6, 10)) + bytes(800),
                                          "agent_ids": C.npy(np.arange(3)), "steps": C.npy(np.arange(3))})
    with pytest.raises(PanelError, match=r"damaged.*promises shape \(1000000, 1000000, 10\)"):
        Panel.load(p)


def test_a_zip_entry_claiming_more_than_deflate_can_expand_is_damaged(tmp_path):
    p = C.lying_sizes(tmp_path / "bomb.npz", file_size=2**31)
    with pytest.raises(PanelError, match="more than deflate can"):
        Panel.load(p)


def test_a_stored_member_whose_sizes_disagree_is_damaged(tmp_path):
    p = C.archive(tmp_path / "s.npz", {"values": C.npy(np.zeros((2, 2, 1)))}, method=zipfile.ZIP_STORED)
    raw = bytearray(p.read_bytes())
    cd = raw.rfind(b"PK\x01\x02")
    raw[cd + 24] ^= 0x10  # the central directory's uncompressed size
    p.write_bytes(bytes(raw))
    with pytest.raises(PanelError, match="damaged"):
        Panel.load(p)


def test_a_truncated_member_body_is_damaged(tmp_path):
    p = C.archive(tmp_path / "t.npz", {"values": C.header((4, 4, 4)) + bytes(16)})
    with pytest.raises(PanelError, match="damaged"):
        Panel.load(p)


def test_too_many_members_is_damaged(tmp_path, monkeypatch):
    monkeypatch.setattr(npz, "MAX_MEMBERS", 5)
    p = C.archive(tmp_path / "many.npz", {f"group::g{i}": C.npy(np.arange(2)) for i in range(6)})
    with pytest.raises(PanelError, match="members"):
        Panel.load(p)


def test_a_member_that_is_not_npy_is_damaged(tmp_path):
    p = tmp_path / "x.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("values.npy", C.npy(np.zeros((1, 1, 1))))
        z.writestr("payload.sh", b"rm -rf /")
    with pytest.raises(PanelError, match=r"not an \.npy array"):
        Panel.load(p)


def test_an_object_dtype_header_is_refused_as_pickled_before_reading(tmp_path):
    p = C.archive(tmp_path / "o.npz", {"values": C.header((2,), "|O") + bytes(16)})
    with pytest.raises(PanelError, match="pickled"):
        Panel.load(p)


def test_a_structured_dtype_is_not_a_plain_array(tmp_path):
    arr = np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")])
    p = C.archive(tmp_path / "st.npz", {"values": C.npy(arr)})
    with pytest.raises(PanelError, match="not a plain array"):
        Panel.load(p)


def test_an_unparsable_npy_header_is_damaged(tmp_path):
    p = C.archive(tmp_path / "h.npz", {"values": b"\x93NUMPY\x01\x00\x10\x00{'descr': <<<<    \n"})
    with pytest.raises(PanelError, match=r"no readable \.npy header"):
        Panel.load(p)


def test_a_huge_npy_header_length_is_refused(tmp_path):
    p = C.archive(tmp_path / "h.npz", {"values": b"\x93NUMPY\x02\x00" + (2**31).to_bytes(4, "little") + b"{"})
    with pytest.raises(PanelError, match=r"no readable \.npy header"):
        Panel.load(p)


def test_metadata_nested_5000_deep_is_a_typed_error_not_a_recursion_error(tmp_path):
    deep = "[" * 5000 + "]" * 5000
    p = C.archive(tmp_path / "deep.npz", {"values": C.npy(np.zeros((1, 1, 1))),
                                          C.META: C.npy(np.frombuffer(deep.encode(), dtype=np.uint8))})
    with pytest.raises(PanelError, match="nests 5,000 levels"):
        Panel.load(p)


def test_metadata_larger_than_its_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAX_META_BYTES", 100)
    p = C.archive(tmp_path / "m.npz", {"values": C.npy(np.zeros((1, 1, 1))),
                                       C.META: C.meta_bytes({"x": "y" * 200})})
    with pytest.raises(PanelError, match="metadata record"):
        Panel.load(p)


@pytest.mark.parametrize("meta", [[1, 2], "text", 3, None], ids=repr)
def test_metadata_that_is_not_an_object_is_refused(tmp_path, meta):
    p = C.archive(tmp_path / "m.npz", {"values": C.npy(np.zeros((1, 1, 1))), C.META: C.meta_bytes(meta)})
    with pytest.raises(PanelError, match="metadata of type"):
        Panel.load(p)


def test_metadata_stored_as_floats_is_refused(tmp_path):
    p = C.archive(tmp_path / "m.npz", {"values": C.npy(np.zeros((1, 1, 1))), C.META: C.npy(np.zeros(3))})
    with pytest.raises(PanelError, match="unreadable metadata"):
        Panel.load(p)


def test_feature_names_that_disagree_with_d_are_damaged(tmp_path):
    p = C.archive(tmp_path / "f.npz", {"values": C.npy(np.zeros((2, 3, 4))), "agent_ids": C.npy(np.arange(3)),
                                       "steps": C.npy(np.arange(2)), C.META: C.meta_bytes(C.panel_meta(2))})
    with pytest.raises(PanelError, match="2 feature names for D = 4"):
        Panel.load(p)


@pytest.mark.parametrize("member,shape", [("alive", (3, 2)), ("context::price", (5,)), ("group::tier", (4,)),
                                          ("steps", (3,))])
def test_panel_arrays_that_do_not_fit_values_are_damaged(tmp_path, member, shape):
    good = {"values": C.npy(np.zeros((2, 3, 1))), "agent_ids": C.npy(np.arange(3)), "steps": C.npy(np.arange(2)),
            C.META: C.meta_bytes(C.panel_meta(1))}
    good[member] = C.npy(np.zeros(shape, dtype=bool if member == "alive" else float))
    p = C.archive(tmp_path / "p.npz", good)
    with pytest.raises(PanelError, match=f"damaged: {member}"):
        Panel.load(p)


def test_values_that_are_not_three_dimensional_numbers_are_damaged(tmp_path):
    p = C.archive(tmp_path / "p.npz", {"values": C.npy(np.array(["a", "b"]))})
    with pytest.raises(PanelError, match="not \\(T, N, D\\) numbers"):
        Panel.load(p)


@pytest.mark.parametrize("member,shape", [("delta_v", (5,)), ("agent_ids", (2,)), ("stderr", (3, 3)),
                                          ("phi_features", (3, 4)), ("group::tier", (9,))])
def test_attribution_arrays_that_do_not_fit_phi_are_damaged(tmp_path, member, shape):
    members = {"phi": C.npy(np.zeros((3, 4)))}
    members[member] = C.npy(np.zeros(shape))
    p = C.archive(tmp_path / "a.npz", members)
    with pytest.raises(AttributionFileError, match=f"damaged: {member}"):
        Attribution.load(p)


def test_attribution_phi_that_is_not_two_dimensional_is_damaged(tmp_path):
    p = C.archive(tmp_path / "a.npz", {"phi": C.npy(np.zeros(3))})
    with pytest.raises(AttributionFileError, match="not \\(T, N\\)"):
        Attribution.load(p)


def test_the_byte_budget_names_the_size(tmp_path):
    p = tmp_path / "ok.npz"
    io.write_npz(p, {"x": np.zeros(1000)})
    with pytest.raises(PanelError, match="GiB of arrays"):
        io.read_npz(p, error=PanelError, max_bytes=100)


def test_an_honest_large_ratio_archive_within_budget_is_accepted(tmp_path):
    # an honest panel of zeros compresses ~1000 : 1 and is read back exactly
    p = tmp_path / "zeros.npz"
    Panel(np.zeros((50, 400, 5)), alive=np.ones((50, 400), dtype=bool)).save(p)
    back = Panel.load(p)
    assert back.shape == (50, 400, 5) and not back.values.any() and back.alive.all()


def test_a_saved_panel_with_every_part_round_trips_through_the_checked_reader(tmp_path):
    steps = np.array(["2026-01-01", "2026-01-02"], dtype="datetime64[D]")
    p = Panel(np.arange(12.0).reshape(2, 3, 2), agent_ids=["a", "b", "c"], steps=steps,
              groups={"tier": ["x", "y", "x"]}, alive=[[1, 1, 0], [1, 1, 1]], context={"price": [1.0, 2.0]},
              meta={"k": [1, {"z": 2}]})
    back = Panel.load(p.save(tmp_path / "p.npz"))
    assert back.equals(p)


@pytest.mark.parametrize("depth", [65, 5000, 100_000])
def test_a_deeply_nested_trace_line_is_a_typed_bad_line_not_a_recursion_error(tmp_path, depth):
    from pathlib import Path

    from aumann.data.traces.read import read_trace
    from aumann.errors import TraceFormatError

    src = Path(__file__).resolve().parent.parent / "data" / "traces" / "otlp_spans.jsonl"
    lines = src.read_bytes().splitlines()
    deep = b'{"name":"x","traceId":"a","spanId":"b","attributes":' + b"[" * depth + b"]" * depth + b"}"
    (tmp_path / "spans.jsonl").write_bytes(b"\n".join([*lines[:3], deep, *lines[3:]]) + b"\n")
    with pytest.raises(TraceFormatError, match=r"line 4: not a JSON object.*nests"):
        read_trace(tmp_path / "spans.jsonl", format="otel")


def test_a_deeply_nested_trace_line_is_skipped_and_counted_with_skip_bad(tmp_path):
    import json
    import shutil
    from pathlib import Path

    from aumann.cli import main

    d = tmp_path / "trace"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "traces" / "agentsociety2_run" / "trace", d)
    f = sorted(d.glob("*.jsonl"))[0]
    f.write_bytes(f.read_bytes() + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert main(["attribute", "--trace", str(d), "--skip-bad", "--indicator", "lin", "--out", str(tmp_path / "y"),
                 "--no-report"]) == 0
    rep = json.loads((tmp_path / "y" / "trace_report.json").read_text())
    assert rep["skipped"]["line is not a JSON object"] == 1


@pytest.mark.parametrize("tid", [[], {}, [1, 2]], ids=repr)
def test_a_span_whose_trace_id_is_not_an_id_is_a_typed_bad_span(tmp_path, tid):
    # found by tests/fuzz/test_fuzz_traces.py: an unhashable trace_id was a TypeError traceback
    import json
    import shutil
    from pathlib import Path

    from aumann.data.traces.read import read_trace
    from aumann.errors import TraceFormatError

    d = tmp_path / "trace"
    shutil.copytree(Path(__file__).resolve().parent.parent / "data" / "traces" / "agentsociety2_run" / "trace", d)
    f = sorted(d.glob("*.jsonl"))[0]
    first = json.loads(f.read_text().splitlines()[0])
    first["trace_id"] = tid
    f.write_text(json.dumps(first) + "\n" + f.read_text())
    with pytest.raises(TraceFormatError, match="trace_id is a JSON"):
        read_trace(d)
    got = read_trace(d, on_bad="skip")
    assert got.report.to_dict()["skipped"]["trace_id is not an id"] == 1


def test_detecting_the_format_of_a_one_line_file_reads_no_more_than_a_line_may_hold(tmp_path, monkeypatch):
    # the span sniffer iterated the file line by line for its first line: a JSON lines file of one 300 MB line held
    # 600 MB of text (one 3 GB line: 6 GB) to be detected as a table; now at most MAX_LINE characters are read
    import tracemalloc

    from aumann.data.traces import otel
    from aumann.data.traces.formats import detect_format

    monkeypatch.setattr(otel, "MAX_LINE", 2**20)
    f = tmp_path / "one.jsonl"
    with open(f, "wb") as fh:
        fh.write(b'{"agent": "a", "tick": 0, "x": "' + b"a" * (32 * 2**20) + b'"}\n')
    tracemalloc.start()
    try:
        assert detect_format(f) == "table"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak


@pytest.mark.parametrize("text,first", [
    ("agent,tick,action\r\na,0,x\r\nb,1,x\nc,1,x\r\n", "\\r\\n (first ending line 1) and \\n (first ending line 3)"),
    ("agent,tick,action\na,0,x\nb,1,x\rc,1,x\n", "\\n (first ending line 1) and a bare \\r (first ending line 3)"),
    ("agent,tick,action\n" + "".join(f"a{i},{i},x\n" for i in range(30_000)) + "z,1,x\r\nz,2,x\r\n",
     "\\n (first ending line 1) and \\r\\n (first ending line 30002)")], ids=["crlf-lf", "lf-cr", "late-crlf"])
@pytest.mark.parametrize("on_bad", ["error", "skip"])
def test_a_csv_that_mixes_line_endings_is_refused_naming_them(tmp_path, text, first, on_bad):
    # DuckDB takes one line ending per CSV file: a file joined from a Windows and a Unix one was refused with "It was
    # not possible to automatically detect the CSV parsing dialect" or "The CSV Parser state machine reached an invalid
    # state", naming no cause; the error now says which line endings the file mixes, and where each is first
    from aumann.data.traces import read_trace
    from aumann.errors import TraceFormatError

    p = tmp_path / "t.csv"
    p.write_bytes(text.encode())
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count_each"}]}
    with pytest.raises(TraceFormatError) as err:
        read_trace(p, spec, on_bad=on_bad)
    assert f"'{p}' mixes line endings, {first}: a CSV file must end every line alike" in str(err.value)


def test_the_line_ending_count_agrees_with_a_whole_file_split_at_every_block_size(tmp_path):
    import re

    from aumann.data.traces.duck import _first_lines, _line_end_kinds

    data = b"a\r\nb\nc\rd\r\r\ne\n\rf\r"
    names = {b"\r\n": "\\r\\n", b"\n": "\\n", b"\r": "a bare \\r"}
    ends = [names[m.group(0)] for m in re.finditer(rb"\r\n|\r|\n", data)]
    want = {k: ends.count(k) for k in set(ends)}
    firsts = {k: ends.index(k) + 1 for k in set(ends)}
    p = tmp_path / "x.csv"
    p.write_bytes(data)
    for chunk in range(1, len(data) + 2):
        assert _line_end_kinds(p, chunk) == want, chunk
        assert _first_lines(p, set(want), chunk) == firsts, chunk


def test_one_overlong_agent_id_among_many_agents_is_a_trace_error_not_gigabytes(tmp_path):
    # numpy stores text ids at the width of the longest: one id of 50,000 characters among 20,000 agents (a 300 kB
    # CSV) asked for 3.7 GiB, twice over (np.unique's copy), and ended in numpy's MemoryError or the OOM killer;
    # here 3,000 agents and 30,000 characters would be 360 MB
    from aumann.data.traces import read_trace
    from aumann.errors import TraceError

    p = tmp_path / "t.csv"
    p.write_text("agent,tick,action\n" + "".join(f"a{i},0,x\n" for i in range(3_000)) + "L" * 30_000 + ",1,x\n")
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count_each"}]}
    with pytest.raises(TraceError, match=r"the 3,001 agent ids would take 0\.3 GiB in the panel, which stores each "
                                         r"at the width of the longest \(30,000 characters"):
        read_trace(p, spec, on_bad="skip")
    # ids of every length up to 10,000 characters among few agents are read as ever
    p.write_text("agent,tick,action\n" + "".join(f"a{i},0,x\n" for i in range(50)) + "L" * 10_000 + ",1,x\n")
    assert len(read_trace(p, spec).panel.agent_ids) == 51


def test_many_distinct_actions_build_their_features_in_linear_time(tmp_path):
    # the builder's check for two features of one name called names.count once per feature: a trace of D distinct
    # actions (count_each: D features) cost O(D^2), 50,000 actions (a 600 kB CSV) 26 s, 10^6 hours
    import time

    from aumann.data.traces import read_trace

    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count_each"}]}
    n = 40_000
    many, few = tmp_path / "many.csv", tmp_path / "few.csv"
    many.write_text("agent,tick,action\n" + "".join(f"a,0,act{i}\n" for i in range(n)))
    few.write_text("agent,tick,action\n" + "".join(f"a,0,act{i % 40}\n" for i in range(n)))
    t0 = time.perf_counter()
    assert read_trace(few, spec).panel.values.shape == (1, 1, 40)
    t1 = time.perf_counter()
    assert read_trace(many, spec).panel.values.shape == (1, 1, n)
    t2 = time.perf_counter()
    assert t2 - t1 < 10 * (t1 - t0) + 2, (t2 - t1, t1 - t0)


def test_one_overlong_feature_name_among_many_is_checked_without_a_fixed_width_copy():
    # the panel checked its feature names for lone surrogates as one numpy text array, each name at the width of the
    # longest: a trace of 20,000 distinct actions and one of 50,000 characters (count_each: 20,001 features) asked
    # for 4 GiB and ended in numpy's MemoryError; here 3,000 names and one of 30,000 characters would be 360 MB
    import tracemalloc

    from aumann.errors import PanelError

    names = [f"f{i}" for i in range(3_000)] + ["L" * 30_000]
    tracemalloc.start()
    try:
        p = Panel(np.zeros((1, 1, len(names))), features=names)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert p.features[-1] == names[-1] and peak < 32 * 2**20, peak
    with pytest.raises(PanelError, match=r"feature names must be text UTF-8 can hold; 1 label\(s\) contain a lone "
                                         r"surrogate \(U\+DC80.*at position 3"):
        Panel(np.zeros((1, 1, 4)), features=["a", "b", "c", "x\udc80"])


def test_a_wide_frame_becomes_a_panel_in_linear_time():
    # Panel.from_dataframe's repeated-column check called cols.count once per column: O(D^2), a frame of 20,000
    # feature columns 5 s, 40,000 about 20 s, before anything else was done
    import time

    import pandas as pd

    def seconds(d: int) -> float:
        df = pd.DataFrame(np.ones((2, d)), columns=[f"c{i}" for i in range(d)])
        df["step"], df["agent"] = [0, 0], ["a", "b"]
        t0 = time.perf_counter()
        assert Panel.from_dataframe(df).values.shape == (1, 2, d)
        return time.perf_counter() - t0

    small, wide = seconds(4_000), seconds(40_000)
    assert wide < 25 * small + 1, (wide, small)
