"""`aumann bluesky build-panel` end to end, privacy of its outputs, and the capture file logic."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from aumann.attribution import Panel
from aumann.cli import bluesky as cli
from aumann.data.bluesky.capture import (
    CaptureDependencyError,
    DailyWriter,
    capture,
    record,
    resilient_stream,
)
from aumann.data.bluesky.counts import RawCounts
from tests.data.bluesky.jetstream_builder import DAY0_US, PROFILES_CSV, build


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aumann")
    cli.register(p.add_subparsers(dest="command"))
    return p


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    finally:  # as aumann.cli.main does: the output folder the command locked is free again when it returns
        from aumann.io import release_output_locks

        release_output_locks()


@pytest.fixture
def capture_dir(tmp_path: Path):
    cap, expected = build()
    files = cap.write(tmp_path / "capture")
    prof = tmp_path / "profiles.csv"
    prof.write_text(PROFILES_CSV)
    return cap, expected, files, prof


def test_build_panel_writes_report_panels_and_manifest(capture_dir, tmp_path):
    cap, expected, files, prof = capture_dir
    out = tmp_path / "out"
    assert _run(["bluesky", "build-panel", *map(str, files), "--profiles", str(prof), "--out", str(out),
                 "--threads", "1", "--quiet"]) == 0
    rep = json.loads((out / "ingest_report.json").read_text())
    assert {"events", "malformed_lines", "dropped_users", "days"} <= set(rep)
    assert set(rep["events"]) == {"by_kind", "by_collection_operation"}
    assert rep["events"]["by_kind"] == dict(cap.kinds)
    assert rep["malformed_lines"] == cap.malformed
    assert rep["dropped_users"] == expected["dropped"]
    assert rep["days"] == ["2026-04-10", "2026-04-11"]
    counts = RawCounts.load(out)
    assert counts.n_users == 5 and counts.meta["identifiers"] == "redacted"
    for topic in counts.topics:
        w = Panel.load(out / "panels" / "window" / f"{topic}.npz")
        d = Panel.load(out / "panels" / "daily" / f"{topic}.npz")
        assert w.shape == (1, 5, 3) and d.shape == (2, 5, 3)
        assert w.equals(counts.window_panel(topic))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"] == "aumann bluesky build-panel" and manifest["identifiers"] == "redacted"
    # privacy by default: no DID or handle in any output file
    for f in out.rglob("*"):
        if f.is_file() and f.name != "manifest.json":
            data = f.read_bytes()
            assert b"did:plc:" not in data and b"alice.bsky" not in data, f
    assert not (out / "identifiers.parquet").exists()


def test_the_same_build_twice_writes_the_same_bytes_but_the_manifest(capture_dir, tmp_path):
    """ingest_report.json held the read's wall-clock seconds and MB/s: two builds of the same captures differed."""
    _, _, files, prof = capture_dir
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert _run(["bluesky", "build-panel", *map(str, files), "--profiles", str(prof), "--out", str(out),
                     "--threads", "1", "--quiet"]) == 0
    names = sorted(p.relative_to(outs[0]).as_posix() for p in outs[0].rglob("*") if p.is_file())
    assert "ingest_report.json" in names and any(n.startswith("panels/") for n in names)
    assert names == sorted(p.relative_to(outs[1]).as_posix() for p in outs[1].rglob("*") if p.is_file())
    differ = [n for n in names if (outs[0] / n).read_bytes() != (outs[1] / n).read_bytes()]
    assert differ in ([], ["manifest.json"])
    assert "seconds" not in json.loads((outs[0] / "ingest_report.json").read_text())
    assert json.loads((outs[0] / "manifest.json").read_text())["ingest"]["seconds"] >= 0


def test_a_rebuild_leaves_no_panel_of_an_earlier_build(capture_dir, tmp_path):
    """Rebuilding into the same --out with other topics left the earlier topics' panels/window/*.npz and
    panels/daily/*.npz beside the new ones, indistinguishable from them but built from other counts."""
    _, _, files, _ = capture_dir
    out, topics = tmp_path / "out", tmp_path / "topics"
    topics.mkdir()
    (topics / "only.toml").write_text('keywords = ["tariff"]\n')
    base = ["bluesky", "build-panel", *map(str, files), "--out", str(out), "--threads", "1", "--quiet"]
    assert _run(base) == 0 and len(list((out / "panels" / "window").glob("*.npz"))) == 5
    (out / "panels" / "daily" / "notes.txt").write_text("mine")
    assert _run([*base, "--topics", str(topics)]) == 0
    for scale in ("window", "daily"):
        assert sorted(p.name for p in (out / "panels" / scale).glob("*.npz")) == ["only.npz"]
    assert (out / "panels" / "daily" / "notes.txt").read_text() == "mine"  # only panels are removed


def test_export_identifiers_flag(capture_dir, tmp_path):
    _, _, files, prof = capture_dir
    out = tmp_path / "out"
    _run(["bluesky", "build-panel", *map(str, files), "--profiles", str(prof), "--out", str(out), "--quiet",
          "--export-identifiers", "--days", "2026-04-10:2026-04-11"])
    ids = pd.read_parquet(out / "identifiers.parquet")
    assert ids["did"].tolist() == sorted(ids["did"]) and ids["did"].str.startswith("did:plc:").all()
    assert RawCounts.load(out).users["did"].tolist() == ids["did"].tolist()


def test_bad_days_option_is_a_config_error(capture_dir, tmp_path):
    from aumann.errors import ConfigError

    _, _, files, _ = capture_dir
    with pytest.raises(ConfigError, match="FIRST:LAST"):
        _run(["bluesky", "build-panel", str(files[0]), "--out", str(tmp_path / "o"), "--days", "2026-04-10"])


def test_group_has_every_bluesky_subcommand():
    from aumann.cli import build_parser

    group = next(a for a in build_parser()._subparsers._group_actions[0].choices["bluesky"]._actions
                 if isinstance(a, argparse._SubParsersAction))
    assert set(group.choices) == {"build-panel", "capture", "synth", "study"}


# ----------------------------------------------------------------------------------------- capture
def _msg(t_us: int, i: int) -> str:
    return json.dumps({"did": "did:plc:x", "time_us": t_us, "kind": "commit",
                       "commit": {"rev": f"r{i}", "operation": "create", "collection": "app.bsky.feed.like",
                                  "rkey": f"k{i}", "record": {"subject": {"uri": "at://did:plc:y/a/b", "cid": "c"}}}})


def test_daily_files_rotate_by_time_us_not_arrival(tmp_path: Path):
    late = DAY0_US + 86_400_000_000 - 1  # 23:59:59.999999 on day 0
    msgs = [_msg(DAY0_US + 10, 0), _msg(DAY0_US + 86_400_000_000 + 5, 1), _msg(late, 2),  # out of order
            "not json at all", _msg(DAY0_US + 2 * 86_400_000_000, 3).encode()]
    stats = record(msgs, tmp_path)
    assert stats.messages == 5 and stats.unparsed == 1
    assert stats.files == {"2026-04-10.jsonl": 2, "2026-04-11.jsonl": 1, "unparsed.jsonl": 1, "2026-04-12.jsonl": 1}
    day0 = (tmp_path / "2026-04-10.jsonl").read_text().splitlines()
    assert [json.loads(x)["time_us"] for x in day0] == [DAY0_US + 10, late]
    # appending: a restarted capture continues the same files
    record([_msg(DAY0_US + 20, 4)], tmp_path)
    assert len((tmp_path / "2026-04-10.jsonl").read_text().splitlines()) == 3


def test_the_day_file_is_the_ingesters_day_up_to_the_last_valid_time(tmp_path: Path):
    """day_of used float seconds: the largest time_us the writer accepts (9999-12-31T23:59:59.999999) rounded up
    to year 10000 and the capture died in a ValueError traceback; a far-future time 1 µs before midnight went to
    the next day's file, which the ingester does not read as its day."""
    from aumann.data.bluesky.capture import MAX_TIME_US

    assert DailyWriter.day_of(MAX_TIME_US) == "9999-12-31"
    assert DailyWriter.day_of(95_617_584_000_000_000 - 1) == "4999-12-31"  # 5000-01-01T00:00Z minus 1 µs
    assert DailyWriter.day_of(1) == "1970-01-01" and DailyWriter.day_of(DAY0_US - 1) == "2026-04-09"
    stats = record([_msg(MAX_TIME_US, 0)], tmp_path)
    assert stats.files == {"9999-12-31.jsonl": 1} and stats.unparsed == 0


def test_daily_writer_keeps_few_files_open(tmp_path: Path):
    with DailyWriter(tmp_path, max_open=1) as w:
        for i in range(6):
            w.write(_msg(DAY0_US + (i % 2) * 86_400_000_000 + i, i))
        assert len(w._open) == 1
    assert len((tmp_path / "2026-04-10.jsonl").read_text().splitlines()) == 3


def test_reconnect_rewinds_the_cursor(tmp_path: Path):
    urls: list[str] = []
    batches = [[_msg(DAY0_US + 1_000_000, 0), _msg(DAY0_US + 9_000_000, 1)], [_msg(DAY0_US + 6_000_000, 2)]]

    def connect(url):
        urls.append(url)
        yield from batches[len(urls) - 1] if len(urls) <= len(batches) else []
        raise ConnectionError("dropped")

    sleeps: list[float] = []
    stream = resilient_stream(connect, endpoint="wss://example.test/subscribe", collections=["app.bsky.feed.post"],
                              rewind_s=5.0, sleep=sleeps.append)
    got = [next(stream) for _ in range(3)]
    assert len(got) == 3
    assert urls[0] == "wss://example.test/subscribe?wantedCollections=app.bsky.feed.post"
    assert urls[1].endswith(f"cursor={DAY0_US + 9_000_000 - 5_000_000}")
    assert sleeps == [1.0]


def test_capture_without_websockets_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "websockets", None)
    with pytest.raises(CaptureDependencyError, match=r"aumann\[capture\]"):
        capture(tmp_path, duration_s=0.1)


def test_capture_with_fake_connection_writes_daily_files(tmp_path):
    def connect(url):
        for i in range(10):
            yield _msg(DAY0_US + i * 6 * 3_600_000_000, i)  # every 6 h: 2.25 days
        raise ConnectionError("bye")

    stats = capture(tmp_path, connect=connect, max_messages=10)
    assert stats.messages == 10 and stats.reconnects == 0
    names = sorted(p.name for p in tmp_path.glob("*.jsonl"))
    assert names == ["2026-04-10.jsonl", "2026-04-11.jsonl", "2026-04-12.jsonl"]
    assert [len((tmp_path / n).read_text().splitlines()) for n in names] == [4, 4, 2]


def test_capture_ends_at_its_duration_while_the_endpoint_is_down(tmp_path):
    """The duration was checked only when a message arrived: with the endpoint refusing connections,
    ``--duration 0.3`` reconnected with back-off (up to 60 s, 1000 times: hours) instead of ending."""
    import time

    def connect(url):
        if not url.endswith("cursor=" + str(DAY0_US + 1 - 5_000_000)):  # the first connection: two messages
            yield _msg(DAY0_US, 0)
            yield _msg(DAY0_US + 1, 1)
        raise ConnectionRefusedError("down")

    t0 = time.monotonic()
    stats = capture(tmp_path, connect=connect, duration_s=0.3)
    assert time.monotonic() - t0 < 5
    assert stats.messages == 2 and stats.reconnects >= 1
    assert len((tmp_path / "2026-04-10.jsonl").read_text().splitlines()) == 2


def test_capture_command_without_websockets_fails_clearly(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "websockets", None)
    with pytest.raises(CaptureDependencyError, match="pip install"):
        _run(["bluesky", "capture", "--out", str(tmp_path / "cap"), "--duration", "1"])
