"""Fuzz the trace readers (aumann attribute --trace): OpenTelemetry JSONL span files with mutated, deep, huge-number
or garbage lines, and a Concordia log with mutated bytes — a typed TraceError family error or a panel."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from aumann.data.traces.read import read_trace
from aumann.errors import IngestError
from tests.fuzz.harness import fuzz_target, scratch_dir, typed_or_result

DATA = Path(__file__).resolve().parent.parent / "data" / "traces"
SPANS = DATA / "agentsociety2_run" / "trace"
FIRST = sorted(SPANS.glob("*.jsonl"))[0].name
LINES = (SPANS / FIRST).read_bytes().splitlines()

values = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8),
                   st.just([]), st.just({}), st.just("[" * 70))


def _edit(i: int, key: str, value: object) -> bytes:
    obj = json.loads(LINES[i % len(LINES)])
    target = obj
    parts = key.split(".")
    for p in parts[:-1]:
        target = target.setdefault(p, {}) if isinstance(target.get(p), dict) or p not in target else {}
    if isinstance(target, dict):
        target[parts[-1]] = value
    try:
        return json.dumps(obj).encode()
    except ValueError:
        return json.dumps(obj, allow_nan=True).encode()


line = st.one_of(
    st.builds(_edit, st.integers(0, 10**6), st.sampled_from(["name", "trace_id", "span_id", "parent_span_id",
                                                              "start_time_unix_nano", "end_time_unix_nano",
                                                              "resource.agent.id", "attributes", "status", "kind",
                                                              "attributes.agent.tick"]), values),
    st.builds(lambda n: b"[" * n + b"]" * n, st.integers(60, 20000)),
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"{}", b"null", b'{"start_time_unix_nano": 1e400}', b"\xef\xbb\xbf{}"]),
)


@fuzz_target(examples=15, seconds=120, extra=st.lists(line, min_size=1, max_size=8),
             at=st.integers(0, 10**6), skip=st.booleans())
def test_fuzz_otel_span_files(extra, at, skip):
    with scratch_dir() as d:
        folder = Path(d) / "trace"
        shutil.copytree(SPANS, folder)
        lines = list(LINES)
        pos = at % (len(lines) + 1)
        lines[pos:pos] = extra
        (folder / FIRST).write_bytes(b"\n".join(lines) + b"\n")
        got, err = typed_or_result(read_trace, folder, on_bad="skip" if skip else None)
        assert err is None or isinstance(err, IngestError)
        if got is not None:
            p = got.panel
            live = p.values if p.alive is None else p.values[p.alive]
            assert np.isfinite(live).all()


@fuzz_target(examples=10, seconds=120, edits=st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 255),
                                                                  st.sampled_from(["flip", "truncate", "insert"])),
                                                        min_size=1, max_size=3))
def test_fuzz_concordia_logs(edits):
    raw = bytearray((DATA / "concordia_log.json").read_bytes())
    for pos, val, kind in edits:
        if not raw:
            break
        i = pos % len(raw)
        if kind == "flip":
            raw[i] ^= val or 1
        elif kind == "truncate":
            del raw[i:]
        else:
            raw[i:i] = bytes([val])
    with scratch_dir() as d:
        path = Path(d) / "log.json"
        path.write_bytes(bytes(raw))
        _, err = typed_or_result(read_trace, path, format="concordia")
        assert err is None or isinstance(err, IngestError)
