"""The floor of a hand-written JSON reader for the ingest (``bench_ingest.py --floors``): a compiled (numba)
validator that checks every line against JSON's grammar and records where the values of the ingester's
envelope and record fields lie (``did``, ``time_us``, ``kind``, ``commit.collection`` / ``operation`` /
``rkey`` / ``rev``, ``commit.record.text`` / ``subject``, ``identity.handle``), on 2 threads, reading the file
from the page cache inside the timing (as DuckDB does).

It is a lower bound on the work such a reader would do before the ingester's statements could run: it builds
no string, decodes no escape, checks no UTF-8, reads no nested list (the tags) and computes no derived column.
A line is valid here iff it is one JSON object (the count is printed next to DuckDB's ``json_valid`` count).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

_FIELDS = 10  # did, time_us, kind, collection, operation, rkey, rev, text, subject, identity.handle
_COMMIT, _IDENTITY, _RECORD = 100, 101, 102  # containers whose members are looked up


def _build():
    import numba
    from numba import prange

    @numba.njit(inline="always")
    def ws(c):
        return c == 32 or c == 9 or c == 13 or c == 10

    @numba.njit(inline="always")
    def key_id(buf, ks, n, depth, parent):
        """The field (or container) a key names at this depth, -1 for any other key."""
        b0, b1 = buf[ks], buf[ks + 1] if n > 1 else 0
        if depth == 1:
            if n == 3 and b0 == 100 and b1 == 105 and buf[ks + 2] == 100:
                return 0  # did
            if n == 7 and b0 == 116 and buf[ks + 5] == 117:
                return 1  # time_us
            if n == 4 and b0 == 107 and b1 == 105:
                return 2  # kind
            if n == 6 and b0 == 99 and b1 == 111 and buf[ks + 2] == 109:
                return _COMMIT
            if n == 8 and b0 == 105 and b1 == 100:
                return _IDENTITY
        elif depth == 2 and parent == _COMMIT:
            if n == 10 and b0 == 99:
                return 3  # collection
            if n == 9 and b0 == 111:
                return 4  # operation
            if n == 4 and b0 == 114 and b1 == 107:
                return 5  # rkey
            if n == 3 and b0 == 114 and b1 == 101:
                return 6  # rev
            if n == 6 and b0 == 114 and b1 == 101 and buf[ks + 2] == 99:
                return _RECORD
        elif depth == 2 and parent == _IDENTITY:
            if n == 6 and b0 == 104:
                return 9  # handle
        elif depth == 3 and parent == _RECORD:
            if n == 4 and b0 == 116 and b1 == 101:
                return 7  # text
            if n == 7 and b0 == 115 and b1 == 117:
                return 8  # subject
        return -1

    @numba.njit(nogil=True)
    def string_end(buf, i, e):
        """The index after the string starting at ``buf[i] == '"'``, -1 if it is not a valid JSON string."""
        i += 1
        while i < e:
            c = buf[i]
            if c == 34:
                return i + 1
            if c == 92:
                i += 1
                if i >= e:
                    return -1
                x = buf[i]
                if x == 117:
                    for _ in range(4):
                        i += 1
                        if i >= e:
                            return -1
                        h = buf[i]
                        if not (48 <= h <= 57 or 65 <= h <= 70 or 97 <= h <= 102):
                            return -1
                elif not (x == 34 or x == 92 or x == 47 or x == 98 or x == 102 or x == 110 or x == 114 or x == 116):
                    return -1
            elif c < 32:
                return -1
            i += 1
        return -1

    @numba.njit(nogil=True)
    def number_end(buf, i, e):
        if buf[i] == 45:
            i += 1
        if i >= e:
            return -1
        if buf[i] == 48:
            i += 1
        elif 49 <= buf[i] <= 57:
            while i < e and 48 <= buf[i] <= 57:
                i += 1
        else:
            return -1
        if i < e and buf[i] == 46:
            i += 1
            if i >= e or not 48 <= buf[i] <= 57:
                return -1
            while i < e and 48 <= buf[i] <= 57:
                i += 1
        if i < e and (buf[i] == 101 or buf[i] == 69):
            i += 1
            if i < e and (buf[i] == 43 or buf[i] == 45):
                i += 1
            if i >= e or not 48 <= buf[i] <= 57:
                return -1
            while i < e and 48 <= buf[i] <= 57:
                i += 1
        return i

    @numba.njit(nogil=True)
    def member_key(buf, i, e, depth, parent, out):
        """Read ``"key":`` at ``i``; ``out[0]`` = the index after the colon (-1: invalid), ``out[1]`` = key_id."""
        while i < e and ws(buf[i]):
            i += 1
        if i >= e or buf[i] != 34:
            out[0] = -1
            return
        j = string_end(buf, i, e)
        if j < 0:
            out[0] = -1
            return
        out[1] = key_id(buf, i + 1, j - 1 - (i + 1), depth, parent)
        i = j
        while i < e and ws(buf[i]):
            i += 1
        out[0] = i + 1 if i < e and buf[i] == 58 else -1

    @numba.njit(nogil=True)
    def parse_line(buf, s, e, spans, row, kinds, ctx, kv):
        """Whether ``buf[s:e]`` is one JSON object; the spans of the wanted values go to ``spans[row]``."""
        depth, i, want = 0, s, -1
        while i < e and ws(buf[i]):
            i += 1
        if i >= e or buf[i] != 123:
            return False
        while True:
            while i < e and ws(buf[i]):
                i += 1
            if i >= e:
                return False
            c = buf[i]
            if c == 123 or c == 91:  # open a container
                if depth >= kinds.size:
                    return False
                kinds[depth], ctx[depth] = (0, want) if c == 123 else (1, -1)
                depth += 1
                i += 1
                while i < e and ws(buf[i]):
                    i += 1
                if i < e and buf[i] == (125 if c == 123 else 93):
                    depth -= 1
                    i += 1
                elif c == 123:
                    member_key(buf, i, e, depth, ctx[depth - 1], kv)
                    if kv[0] < 0:
                        return False
                    i, want = kv[0], kv[1]
                    continue
                else:
                    want = -1
                    continue
            else:
                if c == 34:
                    j = string_end(buf, i, e)
                elif c == 116:
                    j = i + 4 if i + 4 <= e and buf[i + 1] == 114 and buf[i + 2] == 117 and buf[i + 3] == 101 else -1
                elif c == 102:
                    j = (i + 5 if i + 5 <= e and buf[i + 1] == 97 and buf[i + 2] == 108 and buf[i + 3] == 115
                         and buf[i + 4] == 101 else -1)
                elif c == 110:
                    j = i + 4 if i + 4 <= e and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108 else -1
                else:
                    j = number_end(buf, i, e)
                if j < 0:
                    return False
                if 0 <= want < _FIELDS:
                    spans[row, 2 * want] = i
                    spans[row, 2 * want + 1] = j
                i = j
            while True:  # after a value: the next member or element, or close containers
                while i < e and ws(buf[i]):
                    i += 1
                if depth == 0:
                    return i == e
                if i >= e:
                    return False
                c = buf[i]
                if c == 44:
                    if kinds[depth - 1] == 0:
                        member_key(buf, i + 1, e, depth, ctx[depth - 1] if depth > 1 else -1, kv)
                        if kv[0] < 0:
                            return False
                        i, want = kv[0], kv[1]
                    else:
                        i, want = i + 1, -1
                    break
                if (c == 125 and kinds[depth - 1] == 0) or (c == 93 and kinds[depth - 1] == 1):
                    depth -= 1
                    i += 1
                    continue
                return False

    @numba.njit(parallel=True, nogil=True)
    def count_newlines(buf, cuts, counts):
        for ch in prange(cuts.size - 1):
            n = 0
            for k in range(cuts[ch], cuts[ch + 1]):
                n += buf[k] == 10
            counts[ch] = n + 1  # at most this many lines in the chunk

    @numba.njit(parallel=True, nogil=True)
    def scan(buf, cuts, base, spans, ok, used):
        for ch in prange(cuts.size - 1):
            kinds, ctx, kv = np.empty(64, np.int64), np.empty(64, np.int64), np.empty(2, np.int64)
            i, hi, r = cuts[ch], cuts[ch + 1], base[ch]
            while i < hi:
                j = i
                while j < hi and buf[j] != 10:
                    j += 1
                if j > i:
                    ok[r] = parse_line(buf, i, j, spans, r, kinds, ctx, kv)
                    r += 1
                i = j + 1
            used[ch] = r - base[ch]

    return count_newlines, scan


_KERNELS: list = []


def locate(path: Path, threads: int = 2) -> tuple[float, int, int]:
    """Read ``path``, validate every non-blank line and locate the fields; return (seconds, lines, valid lines)."""
    import numba

    if not _KERNELS:
        _KERNELS.extend(_build())
    count_newlines, scan = _KERNELS
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    t = time.perf_counter()
    buf = np.fromfile(path, dtype=np.uint8)
    cuts = np.zeros(threads + 1, np.int64)
    cuts[-1] = buf.size
    for q in range(1, threads):  # each thread starts at the beginning of a line
        c = max(buf.size * q // threads, 1)
        while c < buf.size:
            nl = np.flatnonzero(buf[c - 1:c + 65535] == 10)
            if nl.size:
                c += int(nl[0])
                break
            c += 65536
        cuts[q] = min(c, buf.size)
    counts, used = np.zeros(threads, np.int64), np.zeros(threads, np.int64)
    count_newlines(buf, cuts, counts)
    base = np.zeros(threads, np.int64)
    base[1:] = np.cumsum(counts)[:-1]
    n = int(counts.sum())
    spans = np.full((n, 2 * _FIELDS), -1, np.int32 if buf.size < 2**31 else np.int64)
    ok = np.zeros(n, np.bool_)
    scan(buf, cuts, base, spans, ok, used)
    return time.perf_counter() - t, int(used.sum()), int(ok.sum())


if __name__ == "__main__":  # python _json_locator.py PATH THREADS: one warm-up (compiles), then one timed pass
    import json
    import sys

    locate(Path(sys.argv[1]), int(sys.argv[2]))
    took, lines, valid = locate(Path(sys.argv[1]), int(sys.argv[2]))
    print(json.dumps({"seconds": took, "lines": lines, "valid": valid}))
