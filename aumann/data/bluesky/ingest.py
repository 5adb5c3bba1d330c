"""Jetstream v1 capture files → :class:`RawCounts` (raw per-user per-day counts per topic).

Pipeline (streaming, memory-bounded: DuckDB scans each file once with an explicit column spec and
spills to ``temp_dir`` beyond ``memory_limit``; no day is ever loaded into Python objects):

1. Each file's container is detected (:mod:`.jetstream`): JSONL, zstd-compressed JSONL, or
   per-message zstd frames (decoded first, with ``zstd_dictionary`` when the frames need one).
2. Every non-blank line becomes one row; a line is a valid event iff ``did`` is a JSON string,
   ``time_us`` a positive JSON integer (before year 10000), ``kind`` a JSON string and, for ``kind = "commit"``,
   ``commit.collection``, ``commit.operation`` and ``commit.rkey`` are present. All other lines
   (truncated JSON, binary garbage, invalid UTF-8, wrong types, non-objects) are
   ``malformed_lines``, counted exactly, never fatal. Lines holding only whitespace are
   ``blank_lines``; per file and in total, ``lines_read = valid + malformed + blank``. A UTF-8
   byte-order mark at the start of a file is removed (the first line counts like any other). A line
   that repeats a key (``"time_us"`` twice) is read with the **first** occurrence of the key, as
   DuckDB's JSON reader (yyjson) does: Jetstream never writes repeated keys, and the line is valid or
   malformed by what its first occurrence holds (``json.loads`` would keep the last; we do not).
3. Valid events are counted by ``kind`` and by ``collection × operation`` (unknown kinds and
   non-Bluesky collections included) after removing duplicates on
   ``(did, kind, collection, rkey, operation, rev, seq)`` (a 64-bit hash; ``seq`` tells identity /
   account events apart). Duplicates are counted within each file (capture files are bucketed by
   ``time_us``, so reconnect replays land in the same file); the stored rows behind the panel are
   deduplicated across all files.
4. Days are UTC days of ``time_us`` (never ``createdAt``): the contiguous range from the first to
   the last day seen, or ``days=(first, last)`` (events outside are counted, not used). Either
   window is capped at ``max_days`` (400; ``--max-days``), so a typo cannot ask for years of data.
5. Per user u, day t, topic k (:mod:`.topics`): ``posts`` = u's topic-k post creates + u's repost
   creates whose subject is a topic-k post seen anywhere in the input (reposts inherit the subject
   post's topic); ``replies_received`` = reply creates by other accounts (filtered ones included)
   whose ``reply.parent`` URI is a topic-k post of u seen in the input (author = 3rd ``/``-part of
   the AT-URI; self-replies, i.e. thread continuations, are not "received"); per user and day,
   ``follows_received`` = follow creates with ``subject = u`` (self-follows excluded). An engagement's target
   (like / repost subject author, reply parent author, follow subject) must be a DID by the rule of an
   event's ``did``; one that is not is no engagement and is counted in ``malformed_engagements``.
6. Users = DIDs with ≥ 1 ``app.bsky.*`` commit in the window, then the filters
   (:mod:`.filters`). Followers come from the profile snapshot CSV (``did, followers_count[,
   created_at, handle]``; ``followers_source = "snapshot"``) or else are the distinct followers
   whose follow was created in the window and not deleted in it (``"window_follows"``): a
   **lower bound** on the true follower count, since follows made before the window are unseen.

Privacy: all count tables are keyed by opaque indices 0..U-1 (users sorted by DID); DIDs and
handles live only in the users table, and :func:`write_build_outputs` blanks them there unless
``export_identifiers`` is set (then they also go to ``identifiers.parquet``).
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from aumann.checks import as_bool, as_int, as_memory_size
from aumann.data.bluesky import ingest_sql as sql
from aumann.data.bluesky.counts import RawCounts
from aumann.data.bluesky.duplicates import duplicates_by_group
from aumann.data.bluesky.filters import FilterConfig, apply_filters
from aumann.data.bluesky.ingest_report import FOLLOWERS_NOTE, IngestReport
from aumann.data.bluesky.jetstream import (
    BlankLines,
    copy_without_bom,
    count_lines,
    decode_frames_to_jsonl,
    decode_records_to_jsonl,
    decode_zstd_stream_to_jsonl,
    detect_container,
    starts_with_bom,
    zstd_stream_problem,
)
from aumann.data.bluesky.profiles import load_profiles
from aumann.data.bluesky.topics import Topic, keyword_regex, load_topics
from aumann.errors import ConfigError, IngestError, ZstdDictionaryError
from aumann.io import duckdb_file_name, ensure_output_dir
from aumann.progress import progress_bar

logger = logging.getLogger(__name__)

#: the widest window ingested unless ``IngestOptions.max_days`` (``--max-days``) says otherwise: a typo in
#: ``--days`` (2206 for 2026) must not ask for years of captures
MAX_DAYS = 400


@dataclass(frozen=True)
class IngestOptions:
    """How to run the ingester (none of these change the counts, except ``days``).

    Attributes:
        days: optional inclusive window ``("YYYY-MM-DD", "YYYY-MM-DD")``; default: first to last
            day seen.
        zstd_dictionary: dictionary file (or bytes) for per-message zstd frames.
        threads: DuckDB threads (default: DuckDB's choice).
        memory_limit: DuckDB memory limit, e.g. ``"4GB"``; beyond it DuckDB spills to disk (the JSON
            reader alone needs ~32 MB per thread; 150 MB ingests the 300 MB benchmark file).
        temp_dir: where to spill and to decode framed files (default: a fresh temporary folder).
        progress: show a Rich progress bar over files.
        max_days: the widest window, explicit (``days``) or automatic, that is ingested (default 400);
            a wider one is an :class:`IngestError` that says how to raise the cap.
    """

    days: tuple[str, str] | None = None
    zstd_dictionary: str | os.PathLike[str] | bytes | None = None
    threads: int | None = None
    memory_limit: str | None = None
    temp_dir: str | os.PathLike[str] | None = None
    progress: bool = False
    max_days: int = MAX_DAYS

    def __post_init__(self) -> None:
        if self.days is not None:
            if not isinstance(self.days, list | tuple) or len(self.days) != 2 or not all(
                    isinstance(d, str) for d in self.days):
                raise IngestError(f"days must be a pair of ISO dates ('YYYY-MM-DD', 'YYYY-MM-DD'); got {self.days!r}")
        if self.threads is not None:
            as_int(self.threads, "threads (DuckDB threads)", minimum=1, maximum=1024, error=IngestError)
        if self.memory_limit is not None:
            as_memory_size(self.memory_limit, "memory_limit (DuckDB memory limit)", error=IngestError)
        as_int(self.max_days, "max_days", minimum=1, error=IngestError)
        as_bool(self.progress, "progress", error=IngestError)


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


#: RE2's ``\s`` (what a space inside a keyword matches) and U+0001, which stands for every other non-word character in
#: the text the keyword rules read (see :func:`_topics_expr`): with ``^`` / ``$``, the word boundaries of that text
_MARKED_BOUNDARY = r"[\t\n\f\r \x01]"


def _topics_expr(topics: Sequence[Topic]) -> tuple[str, str]:
    """``(words, names)``: the text the keyword rules read, and the list expression of the topics a post matches.

    Each topic's rule is :func:`keyword_regex`: its keywords between two ``[^\\pL\\pN_]``-or-edge boundaries, with
    Unicode's letters and digits, which RE2 compiles in ~1 ms per class, several times per statement. When every
    keyword is made of ASCII letters, digits, ``_`` and spaces (the default topics), ``words`` instead replaces, once,
    every character that is neither a word character nor RE2 whitespace by U+0001 (one Unicode class, compiled once),
    and the rules find the same keywords between ASCII boundaries in it. Exact: the replacement keeps every word
    character and whitespace (all a keyword can match: under ``(?i)`` an ASCII letter also matches 'ſ' and the Kelvin
    sign, both letters) and maps every other character, and only those, to U+0001 (itself such a character), so a
    character is a boundary in the text iff it is one in the marked text. Other keywords keep the rule as it is."""
    marked = all(re.fullmatch(r"[a-z0-9_ ]+", k) for t in topics for k in t.keywords)
    parts = []
    for t in topics:
        conds = []
        rx = keyword_regex(t, whole_words=not marked)
        if rx is not None:
            if marked:  # rx is "(?i)(?:alternatives)"
                rx = f"(?i)(?:^|{_MARKED_BOUNDARY}){rx[len('(?i)'):]}(?:{_MARKED_BOUNDARY}|$)"
            conds.append(f"coalesce(regexp_matches(words, {_lit(rx)}), false)")
        if t.hashtags:
            conds.append(f"list_has_any(ntags, [{', '.join(_lit(h) for h in t.hashtags)}])")
        parts.append(f"CASE WHEN {' OR '.join(conds)} THEN {_lit(t.name)} END")
    words = r"regexp_replace(text, '(?i)[^\pL\pN_\t\n\f\r ]', chr(1), 'g')" if marked else "text"
    return words, "[" + ", ".join(parts) + "]::VARCHAR[]"


def _prefilter(topics: Sequence[Topic]) -> str:
    """A cheap test that a post can match any topic: one regex over all keywords, without the word boundaries
    (a necessary condition of each topic's keyword rule, :func:`keyword_regex`), or one of the hashtags."""
    words = [k for t in topics for k in t.keywords]
    tags = sorted({h for t in topics for h in t.hashtags})
    conds = []
    if words:
        rx = keyword_regex(Topic(name="any", keywords=words), whole_words=False)
        conds.append(f"coalesce(regexp_matches(text, {_lit(rx)}), false)")
    if tags:
        conds.append(f"list_has_any(list_transform(coalesce(tags, []), lambda t: lower(ltrim(t, '#'))), "
                     f"[{', '.join(_lit(h) for h in tags)}])")
    return " OR ".join(conds) or "false"


def _epoch_day(iso: str) -> int:
    try:
        return (_dt.date.fromisoformat(iso) - _dt.date(1970, 1, 1)).days
    except (ValueError, TypeError) as exc:
        raise IngestError(f"day {iso!r} is not an ISO date YYYY-MM-DD") from exc


def _iso(day: int) -> str:
    return (_dt.date(1970, 1, 1) + _dt.timedelta(days=int(day))).isoformat()


class _Stages:
    """Wall and CPU seconds (the whole process: DuckDB's threads included) per ingest stage, summed
    over files; logged at DEBUG when an ingest ends (``benchmarks/bench_ingest.py`` prints them)."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}

    @staticmethod
    def mark() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    def lap(self, name: str, since: tuple[float, float]) -> tuple[float, float]:
        """Add the time since ``since`` to stage ``name``; return a new mark."""
        now = self.mark()
        acc = self.seconds.setdefault(name, [0.0, 0.0])
        acc[0] += now[0] - since[0]
        acc[1] += now[1] - since[1]
        return now


class _PendingCount:
    """The line count of a plain JSONL file (what tells its blank lines from the rows DuckDB read), running on a
    thread of its own while the ingest goes on: the last file's count runs while the statements after the last scan
    (users, filters, topic rules, daily counts: mostly one core's work) leave the other core idle, 0.04-0.05 s of the
    300 MB benchmark's ingest. :meth:`settle` waits for it and fills in the numbers it decides."""

    def __init__(self, path: Path, entry: dict[str, Any], rows: int, frames_bad: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.entry, self.rows, self.frames_bad = entry, rows, frames_bad
        pool = ThreadPoolExecutor(1, thread_name_prefix="aumann-count-lines")
        self.future = pool.submit(count_lines, path, threads=1)  # one thread: the other core runs the statements
        pool.shutdown(wait=False)

    def settle(self, report: IngestReport, stages: _Stages) -> None:
        t = stages.mark()
        lines = self.future.result()
        if lines < self.rows:  # never expected; keep the identity lines_read = valid + malformed + blank honest
            self.entry["line_count_note"] = f"the reader returned {self.rows} rows for {lines} lines"
            lines = self.rows
        _settle_lines(self.entry, report, lines, self.rows, self.frames_bad)
        stages.lap("count lines (blank lines)", t)

    def wait(self) -> None:
        """Wait for the count without using it (the ingest failed): no thread outlives :func:`ingest`."""
        from concurrent.futures import wait

        wait([self.future])


def _settle_lines(entry: dict[str, Any], report: IngestReport, lines: int, rows: int, frames_bad: int) -> None:
    """What the file's line count decides: its lines read and blank lines, in its entry and the report's totals."""
    entry["lines_read"] = int(lines) + frames_bad
    entry["blank_lines"] = int(lines - rows)
    report.lines_read += entry["lines_read"]
    report.blank_lines += entry["blank_lines"]


def _scan_file(con, path: Path, options: IngestOptions, tmp: Path, win: str, prefilter: str,
               report: IngestReport, day_counts: dict[int, int], stages: _Stages,
               defer_count: bool = False) -> _PendingCount | None:
    """Scan one file and store what the panel needs from it; returns its line count still running (a
    :class:`_PendingCount`, settled by the caller) when ``defer_count`` and the file is plain JSONL with valid
    events, else None (the count is done)."""
    t = stages.mark()
    container = detect_container(path, options.zstd_dictionary)
    size = path.stat().st_size
    entry: dict[str, Any] = {"path": str(path), "container": container, "bytes": size}
    src, compression, frames_bad = path, "none", 0
    lines = None  # counted before DuckDB reads a zstd stream, so a newline bomb is refused before it costs a scan
    if container == "zstd":
        compression = "zstd"
        problem = zstd_stream_problem(path)
        if problem is not None:
            entry["damaged_stream"] = problem
            report.damaged_files += 1
        if starts_with_bom(path, compressed=True):  # decode once, without the BOM (else it costs the first event);
            src = tmp / f"bom-{len(report.files)}.jsonl.zst"  # zstd again: the decoded text filled the temp folder
            st = copy_without_bom(path, src, compressed=True, recompress=True, blanks=BlankLines(path))
            entry.update(bom=True, decoded_bytes=st.bytes_out)
        t = stages.lap("open / decode", t)
        lines = count_lines(src, compressed=True, blanks=BlankLines(path))
        t = stages.lap("count lines (blank lines)", t)
    elif container == "jsonl":
        if starts_with_bom(path):
            src = tmp / f"bom-{len(report.files)}.jsonl"
            copy_without_bom(path, src)
            entry["bom"] = True
    else:  # zstd-frames, length-prefixed: decoded into JSONL first
        src = tmp / f"frames-{len(report.files)}.jsonl"
        decode = decode_frames_to_jsonl if container == "zstd-frames" else decode_records_to_jsonl
        st = decode(path, src, options.zstd_dictionary, blanks=BlankLines(path))
        frames_bad = st.malformed_frames
        entry.update(frames=st.frames, malformed_frames=st.malformed_frames, decoded_bytes=st.bytes_out)
    import duckdb

    t = stages.lap("open / decode", t)
    try:
        con.execute(sql.SCAN, [duckdb_file_name(src), compression])
    except duckdb.Error as exc:
        if compression != "zstd":
            raise IngestError(f"DuckDB could not read {str(path)!r} ({container}): {exc}") from exc
        # A damaged or truncated zstd stream (e.g. a capture killed mid-write): keep what decodes (zstd again).
        src = tmp / f"zstd-{len(report.files)}.jsonl.zst"
        st = decode_zstd_stream_to_jsonl(path, src, recompress=True, blanks=BlankLines(path))
        lines = None  # what decoded frame by frame, counted again below
        if "damaged_stream" not in entry:
            report.damaged_files += 1
        entry.update(decoded_bytes=st.bytes_out, damaged_stream=st.error or entry.get("damaged_stream"))
        container = "zstd-damaged"
        try:
            con.execute(sql.SCAN, [duckdb_file_name(src), "zstd"])
        except duckdb.Error as exc2:
            raise IngestError(f"DuckDB could not read the decoded part of {str(path)!r}: {exc2}") from exc2
    t = stages.lap("scan: read_json -> per-line table", t)
    con.execute(sql.DIDS.format(win=win))
    not_dids = con.execute(sql.NOT_DIDS).fetchone()[0]
    if not_dids:
        con.execute(sql.NOT_DID_TABLE, [not_dids])
        con.execute(sql.APPLY_NOT_DIDS)
    t = stages.lap("distinct DIDs: DID rule, users' flags", t)
    rows, valid, bad_targets = con.execute(sql.FILE_STATS).fetchone()
    t = stages.lap("file counts: kinds, duplicates, days", t)
    # lines as the reader splits them ("\n"); the reader skips whitespace-only lines, so those are the blank ones
    deferred = defer_count and lines is None and compression == "none" and src == path and valid > 0
    if lines is None and not deferred:
        lines = count_lines(src, compressed=compression == "zstd")
    if lines is not None and lines < rows:  # never expected; keep the identity lines_read = valid + malformed + blank
        entry["line_count_note"] = f"the reader returned {rows} rows for {lines} lines"
        lines = int(rows)
    t = stages.lap("count lines (blank lines)", t)
    groups: dict[tuple[str, str | None, str | None], int] = {}  # valid lines per (kind, collection, operation)
    for kind, coll, op, d, n in con.execute(sql.BY_KIND_DAY).fetchall():
        day_counts[int(d)] = day_counts.get(int(d), 0) + int(n)
        groups[kind, coll, op] = groups.get((kind, coll, op), 0) + int(n)
    extra = duplicates_by_group(con, int(valid))
    dups = 0
    for (kind, coll, op), n in groups.items():
        uniq = n - extra.get((kind, coll, op), 0)
        dups += n - uniq
        report.by_kind[kind] = report.by_kind.get(kind, 0) + uniq
        if kind == "commit":
            ops = report.by_collection_operation.setdefault(coll, {})
            ops[op] = ops.get(op, 0) + uniq
    t = stages.lap("file counts: kinds, duplicates, days", t)
    con.execute((sql.STORE_UD if not_dids else sql.STORE_UD_FROM_DIDS).format(win=win))
    con.execute(sql.TOPIC_CANDIDATES.format(win=win, prefilter=prefilter))
    con.execute(sql.STORE.format(win=win))
    t = stages.lap("store: users, topic candidates, links", t)
    if src != path:
        src.unlink(missing_ok=True)
    malformed = int(rows - valid) + frames_bad
    # lines_read and blank_lines keep their place in the entry (and in ingest_report.json) when the count settles later
    entry.update(lines_read=0, rows=int(rows), valid=int(valid), malformed=malformed, blank_lines=0, duplicates=dups,
                 malformed_engagements=int(bad_targets))
    entry["container"] = container
    pending = None
    if deferred:
        pending = _PendingCount(path, entry, int(rows), frames_bad)  # valid > 0: no warning below depends on it
    else:
        _settle_lines(entry, report, int(lines), int(rows), frames_bad)
    if valid == 0 and entry["lines_read"] > 0:
        entry["warning"] = ("no valid Jetstream event in this file" + (" (damaged)" if "damaged_stream" in entry
                                                                       else ""))
    report.files.append(entry)
    report.rows_read += int(rows)
    report.valid_events += int(valid)
    report.malformed_lines += malformed
    report.malformed_frames += frames_bad
    report.malformed_engagements += int(bad_targets)
    report.duplicates += dups
    report.bytes += int(entry.get("decoded_bytes", size)) if "decoded_bytes" in entry else size
    return pending


def ingest(
    files: Sequence[str | os.PathLike[str]],
    *,
    profiles: str | os.PathLike[str] | None = None,
    topics: Sequence[Topic] | str | os.PathLike[str] | None = None,
    filters: FilterConfig | None = None,
    options: IngestOptions | None = None,
) -> tuple[RawCounts, IngestReport]:
    """Ingest Jetstream v1 files into raw counts (see the module docstring for every rule).

    Args:
        files: JSONL / ``.jsonl.zst`` / zstd-frame files, typically one per UTC day.
        profiles: optional profile snapshot CSV (``did, followers_count[, created_at, handle]``).
        topics: topics, or a directory of topic TOML files (default: the packaged ``aumann/configs/topics``).
        filters: user filters (default :class:`FilterConfig`: 7 days, default bot patterns,
            non-self engagement required).
        options: :class:`IngestOptions`.

    Returns:
        ``(counts, report)``.

    Raises:
        IngestError: no files, a missing file, no valid events, or no user left after filtering.
    """
    import duckdb

    options = options or IngestOptions()
    filters = filters or FilterConfig()
    topic_list = list(topics) if isinstance(topics, list | tuple) else load_topics(topics)
    if not topic_list or not all(isinstance(t, Topic) for t in topic_list):
        raise ConfigError(f"topics must be a non-empty list of Topic objects or a directory of topic TOML files; "
                          f"got {topics!r:.120}")
    if filters is not None and not isinstance(filters, FilterConfig):
        raise ConfigError(f"filters must be a FilterConfig (see load_filters); got {type(filters).__name__}")
    if not isinstance(options, IngestOptions):
        raise ConfigError(f"options must be an IngestOptions; got {type(options).__name__}")
    paths = [Path(f) for f in files]
    if not paths:
        raise IngestError("no input files given; pass Jetstream JSONL / .jsonl.zst / zstd-frame files")
    seen: dict[Any, Path] = {}
    for p in paths:
        if not p.is_file():
            raise IngestError(f"input file {str(p)!r} does not exist or is not a file")
        st = p.stat()
        first = seen.setdefault((st.st_dev, st.st_ino), p)
        if first is not p:  # its events would be counted twice in the report (the panel deduplicates them)
            raise IngestError(f"input file {str(p)!r} is given twice" + ("" if str(first) == str(p) else
                                                                          f" (also as {str(first)!r})"))
    # read and recorded in one order whatever the command line's: counts.json's meta.source and ingest_report.json's
    # files (and the study's fingerprint of counts.json) were in the order given, so `a b` and `b a` differed
    paths.sort(key=str)
    if isinstance(options.zstd_dictionary, str | os.PathLike) and not Path(options.zstd_dictionary).is_file():
        raise ZstdDictionaryError(f"zstd dictionary {str(options.zstd_dictionary)!r} does not exist or is not a file")
    window = None
    if options.days is not None:
        window = (_epoch_day(options.days[0]), _epoch_day(options.days[1]))
        if window[1] < window[0]:
            raise IngestError(f"days {options.days} end before they start")
        if window[1] - window[0] + 1 > options.max_days:
            raise IngestError(f"--days {options.days[0]}:{options.days[1]} spans {window[1] - window[0] + 1} days, "
                              f"more than the cap of {options.max_days} (a typo in a year?); pass --max-days "
                              f"{window[1] - window[0] + 1} if you mean it")
    win = "true" if window is None else f"day BETWEEN {window[0]} AND {window[1]}"
    report = IngestReport()
    t0 = time.perf_counter()
    if options.temp_dir is not None:
        ensure_output_dir(options.temp_dir, "--temp-dir")
    try:
        counts = _run(paths, options, report, window, win, topic_list, filters, profiles)
    except duckdb.Error as exc:  # e.g. out of memory under a tiny memory_limit, a full temp disk
        raise IngestError(f"DuckDB failed while ingesting ({type(exc).__name__}): {str(exc)[:300]}") from exc
    report.seconds = time.perf_counter() - t0
    return counts, report


def _run(paths: list[Path], options: IngestOptions, report: IngestReport, window: tuple[int, int] | None, win: str,
         topic_list: list[Topic], filters: FilterConfig, profiles: str | os.PathLike[str] | None) -> RawCounts:
    import duckdb

    try:
        tmp_ctx = tempfile.TemporaryDirectory(dir=options.temp_dir, prefix="aumann-ingest-")
    except OSError as exc:
        raise IngestError(f"cannot create a temporary folder in {str(options.temp_dir)!r}: {exc.strerror or exc}") \
            from exc
    stages = _Stages()
    t = stages.mark()
    with tmp_ctx as tmpname:
        tmp = Path(tmpname)
        # The per-file and stored tables are TEMP tables: beyond ``memory_limit`` DuckDB evicts them
        # to ``temp_directory`` (a day of the real stream is tens of GB of JSON).
        con = duckdb.connect()  # in memory: its TEMP tables spill to temp_directory beyond memory_limit
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET enable_progress_bar = false")
        con.execute(f"SET temp_directory = {_lit(str(tmp / 'spill'))}")
        if options.threads:
            con.execute(f"SET threads = {int(options.threads)}")
        if options.memory_limit:
            con.execute(f"SET memory_limit = {_lit(options.memory_limit)}")
        con.execute(sql.CREATE_STORE)
        if profiles is not None:
            load_profiles(con, profiles, report)
        prefilter = _prefilter(topic_list)
        day_counts: dict[int, int] = {}
        stages.lap("set-up: database, profiles", t)
        bar = progress_bar(options.progress, len(paths), "ingest files", transient=False, minimum=1)
        pending = None
        try:
            for i, p in enumerate(paths):  # the last file's line count runs while the panel's tables are read
                pending = _scan_file(con, p, options, tmp, win, prefilter, report, day_counts, stages,
                                     defer_count=i == len(paths) - 1)
                if bar is not None:
                    bar.advance()
        finally:
            if bar is not None:
                bar.stop()
        try:
            counts = _finish(con, report, day_counts, window, topic_list, filters, profiles is not None, paths,
                             options.max_days, stages)
        except BaseException:
            if pending is not None:
                pending.wait()
            raise
        t = stages.mark()
        con.close()  # freeing the tables while the count may still run
    stages.lap("set-up: database, profiles", t)
    if pending is not None:
        pending.settle(report, stages)
    logger.debug("ingest stages (wall s, CPU s): %s", stages.seconds, extra={"stages": stages.seconds})
    return counts


def _finish(con, report: IngestReport, day_counts: dict[int, int], window: tuple[int, int] | None,
            topics: Sequence[Topic], filters: FilterConfig, have_profiles: bool,
            paths: Sequence[Path], max_days: int = MAX_DAYS, stages: _Stages | None = None) -> RawCounts:
    stages = stages or _Stages()
    t = stages.mark()
    report.events_per_day = {_iso(d): n for d, n in sorted(day_counts.items())}
    if report.valid_events == 0:
        damaged = [f for f in report.files if "damaged_stream" in f]
        detail = "; ".join(
            f"{f['path']!r} ({f['container']}): " + (f"damaged — {f['damaged_stream']}; " if "damaged_stream" in f
                                                     else "")
            + f"{f['lines_read']} line(s) read, {f['malformed']} malformed, {f['blank_lines']} blank"
            for f in report.files[:5])
        hint = (" — a zstd file that does not decode may hold dictionary-compressed frames without a dictionary "
                "ID: pass --zstd-dictionary" if any(f["container"] == "zstd-damaged" for f in damaged) else "")
        what = f"{len(damaged)} damaged, " if damaged else ""
        raise IngestError(f"no valid Jetstream events in {len(paths)} file(s) ({what}{report.malformed_lines} "
                          f"malformed lines): {detail}{hint}")
    if window is None:
        lo, hi = min(day_counts), max(day_counts)
        if hi - lo + 1 > max_days:
            raise IngestError(f"events span {hi - lo + 1} days ({_iso(lo)} .. {_iso(hi)}), more than the cap of "
                              f"{max_days}; pass --days FIRST:LAST to choose the window (or --max-days N)")
    else:
        lo, hi = window
        report.out_of_window_events = sum(n for d, n in day_counts.items() if d < lo or d > hi)
        if report.out_of_window_events == report.valid_events:
            raise IngestError(f"no valid event falls in the window {_iso(lo)} .. {_iso(hi)} (--days): all "
                              f"{report.valid_events} lie on {_iso(min(day_counts))} .. {_iso(max(day_counts))}")
    report.days = [_iso(d) for d in range(lo, hi + 1)]
    users = con.execute(sql.USERS).df()
    report.users_seen = len(users)
    if have_profiles:
        with warnings.catch_warnings():  # duckdb's TIMESTAMPTZ → pandas conversion uses a deprecated pandas call
            warnings.filterwarnings("ignore", message="The inplace keyword")
            prof = con.execute("SELECT did, followers_count, created_at, handle AS snap_handle FROM prof").df()
        users = users.merge(prof, on="did", how="left")
    else:
        users["followers_count"] = pd.NA
        users["created_at"] = pd.NaT
        users["snap_handle"] = None
    snap = users["followers_count"].notna()
    users["handle"] = users["snap_handle"].where(users["snap_handle"].notna(), users["event_handle"])
    users["handle"] = users["handle"].astype(object).where(users["handle"].notna(), None)
    users["followers"] = users["followers_count"].where(snap, users["window_followers"]).astype("int64")
    users["followers_source"] = snap.map({True: "snapshot", False: "window_follows"}).astype("str")
    users["created_at"] = pd.to_datetime(users["created_at"], utc=True).astype("datetime64[ns, UTC]")
    window_start = pd.Timestamp(report.days[0], tz="UTC")
    t = stages.lap("users: accounts, handles, followers", t)
    keep, dropped, notes = apply_filters(users, window_start, filters)
    report.dropped_users = dropped
    report.filter_notes = notes
    kept = users.loc[keep, ["did", "followers", "followers_source", "created_at", "handle"]].reset_index(drop=True)
    report.users_kept = len(kept)
    report.followers_source = {k: int(v) for k, v in kept["followers_source"].value_counts().items()}
    if kept.empty:
        raise IngestError(f"no user passes the filters ({report.users_seen} seen; dropped {dropped})")
    kept.insert(0, "user", pd.RangeIndex(len(kept)).to_numpy().astype("int64"))
    t = stages.lap("filters (pandas)", t)
    words, names = _topics_expr(topics)
    con.execute(sql.TOPIC_POSTS.format(words=words, topics=names))
    t = stages.lap("topic posts: rules over the candidates", t)
    con.register("kept", kept[["user", "did"]])
    daily = con.execute(sql.DAILY, [lo]).df()
    follows = con.execute(sql.FOLLOWS, [lo]).df()
    con.unregister("kept")
    in_days = (daily["day"] >= 0) & (daily["day"] <= hi - lo)
    daily = daily.loc[in_days].reset_index(drop=True)
    follows = follows.loc[(follows["day"] >= 0) & (follows["day"] <= hi - lo)].reset_index(drop=True)
    for df, cols in ((daily, ("user", "day", "posts", "replies_received")), (follows, ("user", "day",
                                                                                         "follows_received"))):
        for c in cols:
            df[c] = df[c].astype("int64")
    daily["topic"] = daily["topic"].astype(str)
    meta = {"synthetic": False, "source": [str(p) for p in paths], "followers_note": FOLLOWERS_NOTE,
            "topics": {t.name: {"keywords": t.keywords, "hashtags": t.hashtags} for t in topics},
            "filters": filters.model_dump(), "identifiers": "present"}
    stages.lap("daily counts and follows", t)
    return RawCounts(users=kept, daily=daily, follows=follows, days=report.days,
                     topics=[t.name for t in topics], meta=meta)


__all__ = ["FOLLOWERS_NOTE", "MAX_DAYS", "IngestOptions", "IngestReport", "ingest"]
