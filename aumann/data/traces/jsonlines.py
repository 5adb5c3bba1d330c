"""Byte scans of JSON lines tables, in numpy blocks, for what DuckDB's reader does not tell: the rows where an
object gives a key the spec reads twice, and the lines longer than DuckDB's ``maximum_object_size``
(:func:`_repeated_keys`), which :func:`without_long_lines` blanks out before DuckDB reads the files. Rows are
counted as DuckDB counts them: lines holding more than whitespace (and each over-long line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aumann import io as aio
from aumann.data.traces import duck
from aumann.data.traces.duck import _opens
from aumann.data.traces.events import repeated_key, repeated_key_reason

_BLANK = re.compile(rb"^[ \t\r\f\v]*\n", re.MULTILINE)


def _nonblank(chunk: bytes, a: int, b: int) -> int:
    """Lines of ``chunk[a:b]`` (both at line starts) that hold more than whitespace: DuckDB's rows."""
    return chunk.count(b"\n", a, b) - len(_BLANK.findall(chunk, a, b))


def _key_lines(arr: np.ndarray, nl: np.ndarray, key: bytes, freq: np.ndarray) -> np.ndarray:
    """Indices (into the lines that ``nl``, the positions of the newlines, end) of the lines of ``arr`` where
    ``key`` occurs more than once (vectorised: the positions of the key's byte that is rarest in ``arr``, whose
    byte counts ``freq`` are, narrowed byte by byte)."""
    n = arr.shape[0] - len(key) + 1
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    a = min(range(len(key)), key=lambda j: freq[key[j]])
    pos = np.flatnonzero(arr[a:a + n] == key[a])
    for j, byte in enumerate(key):
        if j != a:
            pos = pos[arr[pos + j] == byte]
    line = np.searchsorted(nl, pos)
    return np.unique(line[1:][line[1:] == line[:-1]])


_HEX = np.full(256, -1, dtype=np.int64)
_HEX[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


def _escape_lines(arr: np.ndarray, nl: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """Indices of the lines of ``arr`` holding a ``\\uXXXX`` escape of one of the characters ``chars`` (code points)
    of the keys the spec reads: ``"\\u0061gent"`` is the key ``"agent"``, which the key's text does not find
    (vectorised: one pass for the backslashes, which are few)."""
    bs = np.flatnonzero(arr[:-5] == 92)  # a backslash with room for u and four hex digits after it
    bs = bs[arr[bs + 1] == 117]  # \u
    if bs.size == 0:
        return np.empty(0, dtype=np.int64)
    digits = _HEX[arr[bs[:, None] + np.arange(2, 6)]]
    cp = digits @ np.array([4096, 256, 16, 1])
    hit = bs[(digits >= 0).all(axis=1) & np.isin(cp, chars)]
    return np.unique(np.searchsorted(nl, hit))


def long_line_reason(limit: int) -> str:
    """The skip reason of a JSON lines row longer than ``limit`` bytes (the span reader's words for its lines)."""
    return f"line longer than {limit >> 20} MiB" if limit % 2**20 == 0 else f"line longer than {limit:,} bytes"


@dataclass
class LongLine:
    """A line of a JSON lines file longer than :data:`~aumann.data.traces.duck.MAX_OBJECT` bytes: the file as DuckDB
    reads it, the line's row (DuckDB's count) and line in it, and the byte offsets of its text (its ``\\n`` not
    included) in the file's (decompressed) bytes."""

    file: Path
    row: int
    line: int
    start: int
    end: int


def _repeated_keys(files: list[Path], names: dict[str, str], paths: list[tuple[str, ...]],
                   long: list[LongLine] | None = None) -> dict[str, dict[int, str]]:
    """{file: {row: skip reason}} of the JSON lines where an object on a path the spec reads gives its key twice
    (:func:`~aumann.data.traces.events.repeated_key`): DuckDB reads the first value of such a key, Python's json
    (the span reader) the last, so the line is refused (or skipped and counted) by its row in both readers. The
    lines where a key's text occurs twice are found in blocks (numpy), and json looks at those few. Rows are counted
    as DuckDB counts them: lines holding more than whitespace.

    A line longer than :data:`~aumann.data.traces.duck.MAX_OBJECT` bytes (DuckDB's ``maximum_object_size``, beyond
    which its reader fails the whole file, ``ignore_errors`` or not) is a row of its own, marked with
    :func:`long_line_reason` and appended to ``long``; it is not held in memory beyond the limit (a line is read
    on to its end in blocks). Where its text would be decoded for keys given twice, it is not."""
    import json

    limit = duck.MAX_OBJECT
    too_long = long_line_reason(limit)
    long = [] if long is None else long
    keys = sorted({json.dumps(k, ensure_ascii=a).encode() for p in paths for k in p for a in (True, False)})
    chars = np.array(sorted({ord(c) for p in paths for k in p for c in k}), dtype=np.int64)
    found: dict[str, dict[int, str]] = {}
    for f in files:
        rows: dict[int, str] = {}
        base, lines, pos, carry = 0, 0, 0, b""  # rows and lines before `carry`, and its byte offset in the file
        skipping: LongLine | None = None  # an over-long line being read on to its end
        with _opens(f) as fh:
            if fh.read(len(aio.BOM)) != aio.BOM:
                fh.seek(0)
            else:
                pos = len(aio.BOM)
            while True:
                block = fh.read(1 << 22)
                eof = not block
                if skipping is not None:
                    i = block.find(b"\n")
                    if i < 0:
                        pos += len(block)
                        if eof:
                            skipping.end = pos
                            long.append(skipping)
                            break
                        continue
                    skipping.end = pos + i
                    long.append(skipping)
                    skipping = None
                    pos += i + 1
                    block = block[i + 1:]
                data = carry + block
                if not data:
                    break
                cut = len(data) if eof else data.rfind(b"\n") + 1
                if cut == 0:  # no whole line yet
                    if len(data) - data.endswith(b"\r") > limit:  # over the limit before its end: not held further
                        skipping = LongLine(f, base + 1, lines + 1, pos, -1)
                        rows[base + 1] = too_long
                        base, lines, pos, carry = base + 1, lines + 1, pos + len(data), b""
                        continue
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut:]
                arr = np.frombuffer(chunk, dtype=np.uint8)
                nl = np.flatnonzero(arr == 10)
                starts = np.concatenate([[0], nl + 1])  # line i of the chunk: starts[i]:ends[i] (its \n left out)
                ends = np.concatenate([nl, [len(chunk)]])
                size = ends - starts
                over = np.flatnonzero(size > limit)
                if over.size:  # a \r before the \n is the line's end too
                    over = over[size[over] - (arr[ends[over] - 1] == 13) > limit]
                over = set(over.tolist())
                freq = np.bincount(arr, minlength=256)
                # a key's text twice, or a key written with escapes (its text not found: decoded to be sure)
                cand = np.unique(np.concatenate([_key_lines(arr, nl, k, freq) for k in keys]
                                                + [_escape_lines(arr, nl, chars)])) if keys else []
                last, count = 0, base
                for i in sorted(over.union(cand.tolist() if len(cand) else ())):
                    start, end = int(starts[i]), int(ends[i])
                    count += _nonblank(chunk, last, start)
                    if i in over:  # a row of its own, whatever it holds
                        rows[count + 1] = too_long
                        long.append(LongLine(f, count + 1, lines + i + 1, pos + start, pos + end))
                        count, last = count + 1, min(end + 1, len(chunk))
                        continue
                    last = start
                    path = repeated_key(chunk[start:end], paths)
                    if path is not None:
                        rows[count + 1] = repeated_key_reason(path)
                base = count + _nonblank(chunk, last, cut if chunk.endswith(b"\n") else last)
                lines, pos = lines + len(nl), pos + cut
                if eof:
                    break
        if rows:
            found[names.get(str(f), str(f))] = rows
    return found


def without_long_lines(files: list[Path], names: dict[str, str], long: list[LongLine],
                       tmp: Path) -> tuple[list[Path], dict[str, str]]:
    """The files DuckDB reads, each one holding a line of ``long`` copied into ``tmp`` with that line's text
    replaced by ``{}`` (an object of none of the spec's fields: a row of its own in its place, which the reader
    skips and counts by the reason :func:`_repeated_keys` gave it; a gzipped file's copy is decompressed); and the
    original name of each copy. Rows and lines are not renumbered."""
    at: dict[Path, list[LongLine]] = {}
    for ln in long:
        at.setdefault(ln.file, []).append(ln)
    out, names = [], dict(names)
    for i, f in enumerate(files):
        if f not in at:
            out.append(f)
            continue
        name = f.name[:-3] if f.name.lower().endswith(".gz") else f.name
        copy = tmp / f"long-{i}-{name}"
        with _opens(f) as src, open(copy, "wb") as dst:
            done = 0
            for ln in sorted(at[f], key=lambda x: x.start):
                _copy(src, dst, ln.start - done)
                dst.write(b"{}")
                _copy(src, None, ln.end - ln.start)
                done = ln.end
            _copy(src, dst, -1)
        names[str(copy)] = names.get(str(f), str(f))
        out.append(copy)
    return out, names


def _copy(src, dst, n: int) -> None:
    """``n`` bytes of ``src`` (``-1``: the rest) written to ``dst`` (``None``: passed over), in blocks."""
    while n != 0:
        block = src.read(1 << 22 if n < 0 else min(n, 1 << 22))
        if not block:
            return
        if dst is not None:
            dst.write(block)
        if n > 0:
            n -= len(block)
