"""Jetstream v1 files on disk: container formats, detection, and decoding of dictionary frames.

Three containers are read, detected from the file's first bytes (never from its name):

* ``jsonl``: one Jetstream v1 event (a JSON object) per line, UTF-8, ``\\n``-separated; what
  ``aumann bluesky capture`` writes (one file per UTC day by ``time_us``).
* ``zstd``: the same JSONL compressed as an ordinary zstd stream (``zstd file.jsonl`` →
  ``file.jsonl.zst``). DuckDB reads it directly.
* ``zstd-frames``: the bytes of Jetstream's compressed websocket messages (``compress=true``)
  appended back to back, exactly as received, one independent zstd frame per event, no separator.
  Zstd frames are self-delimiting, so a decoder walks the file frame by frame
  (``ZstdDecompressor.decompressobj()`` stops at the end of one frame and hands back the rest as
  ``unused_data``). Jetstream compresses with its published dictionary (dictionary ID
  1612007021, ``pkg/models/zstd_dictionary`` in the legacy repository); pass that file as
  ``dictionary``. Detection: the file starts with the zstd magic number and its first frame either
  declares a dictionary ID or decodes to a single message that does not end with a newline (an
  ordinary ``.jsonl.zst`` frame ends with ``\\n``), and none of the first frames holds a newline inside (an
  ordinary ``.jsonl.zst`` written in frames that end mid-line does). Frames are decoded into a temporary JSONL file
  (streaming, memory-bounded) that the ingester then reads like any other; a frame that fails to
  decode is counted (``malformed_frames``) and the decoder resynchronises at the next magic number.
  Frames compressed with a dictionary but without its ID in the header are recognised when the
  dictionary is given (the first frame decodes with it and not without); without it they cannot be
  told from damage, so the error says to pass ``--zstd-dictionary``.
* ``length-prefixed``: records ``[u32 length][payload]`` back to back, the payload a zstd frame (a
  recorder that stores each websocket message with its length) or one JSON object; little- or
  big-endian, detected by walking the first records (each length must land exactly on the next
  record, the last one on the end of the file or of the sniffed head). Decoded into JSONL like frames;
  a record that fails to decode or a truncated last record is one ``malformed_frames``.

A UTF-8 byte-order mark at the start of a file (or of a decoded message) is removed, so it never
costs the first event. A compressed file (``zstd``, ``zstd-frames``, ``length-prefixed``) that decodes to more
than :data:`MAX_BLANK_LINES` blank lines is refused (:class:`IngestError` naming it): a "newline bomb". A file
in none of these layouts that is not text (NUL bytes or invalid UTF-8 at its start) is refused with an
:class:`IngestError` naming it — never read as JSONL with every line lost.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aumann import bounded
from aumann import io as aio
from aumann.errors import IngestError, ZstdDictionaryError

Container = Literal["jsonl", "zstd", "zstd-frames", "length-prefixed"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BOM = aio.BOM
JETSTREAM_DICTIONARY_ID = 1612007021
_SNIFF = 1 << 20


def is_skippable_frame(head: bytes) -> bool:
    """Whether ``head`` starts with a zstd skippable frame (magic ``0x184D2A50``-``0x184D2A5F``, little-endian): what
    ``pzstd`` writes before every frame and the seekable format after the last one; a decoder skips it."""
    return len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and head[0] & 0xF0 == 0x50


def _skip_skippable_frames(head: bytes) -> bytes:
    """``head`` from its first frame that is not a skippable frame (``b""`` if the skippable frames fill it)."""
    pos = 0
    while is_skippable_frame(head[pos:pos + 4]):
        if len(head) < pos + 8:
            return b""
        pos += 8 + int.from_bytes(head[pos + 4:pos + 8], "little")
    return head[pos:]


#: the most blank lines a compressed capture may decode to (:data:`aumann.bounded.MAX_BLANK_LINES`, the trace readers'
#: cap too). zstd holds 1 GiB of line ends in 33 KB: such a "newline bomb" held the ingest for 1.8 s per GiB decoded to
#: read nothing (DuckDB's scan, then the line count), and the frame decoders wrote it all into the temporary folder.
#: Counted where the decoded text passes anyway (the line count, before DuckDB reads the file; the frame decoders)
MAX_BLANK_LINES = bounded.MAX_BLANK_LINES
_WHITESPACE = b" \t\r"
_BLANK_BLOCK = 1 << 20


class BlankLines:
    """The blank lines of one file's decoded text, fed block by block; an :class:`IngestError` naming ``path`` once
    more than ``limit`` are counted.

    A block in which every line that starts inside it starts with ``{`` (every line of a Jetstream capture) costs
    what counting its ``\n`` costs (numpy finds them, and the bytes after them are looked at): only the line open at
    its start can end blank there. Any other block is counted exactly (the whitespace deleted, then ``\n`` after
    ``\n`` counted)."""

    def __init__(self, path: str | os.PathLike[str], limit: int = MAX_BLANK_LINES) -> None:
        self.path, self.limit, self.count = Path(path), limit, 0
        self._content = False  # the line still open holds something other than whitespace

    def feed(self, block: bytes) -> int:
        """Count the blank lines that end in ``block``; return its ``\n`` count."""
        if len(block) > _BLANK_BLOCK:
            return sum(self.feed(block[i:i + _BLANK_BLOCK]) for i in range(0, len(block), _BLANK_BLOCK))
        if not block:
            return 0
        import numpy as np

        a = np.frombuffer(block, dtype=np.uint8)
        ends = np.flatnonzero(a == 10)
        nl = len(ends)
        if nl == 0:
            self._content = self._content or bool(block.translate(None, _WHITESPACE))
            return 0
        starts = ends + 1 if block[-1] != 10 else ends[:-1] + 1  # the lines that start inside the block
        if not np.any(a[starts] != 123):  # all start with "{": only the line open at the start can end blank here
            if not self._content and not block[:int(ends[0])].translate(None, _WHITESPACE):
                self.count += 1
            self._content = block[-1] != 10
        else:
            self._exact(block)
        if self.count > self.limit:
            raise IngestError(
                f"{str(self.path)!r} holds more than {self.limit:,} blank lines once decompressed (a zstd 'newline "
                f"bomb': {self.path.stat().st_size:,} bytes on disk): a compressed capture may hold at most "
                f"{self.limit:,}; remove them first, e.g. zstdcat FILE | grep -v '^[[:space:]]*$' | zstd > "
                "CLEAN.jsonl.zst")
        return nl

    def _exact(self, block: bytes) -> None:
        import numpy as np

        s = block.translate(None, _WHITESPACE)
        if not s:
            return
        ends = np.frombuffer(s, dtype=np.uint8) == 10
        self.count += int(np.count_nonzero(ends[1:] & ends[:-1])) + int(bool(ends[0]) and not self._content)
        self._content = not bool(ends[-1])


class _CountingWriter:
    """A binary file that passes what is written through a :class:`BlankLines` in blocks of about 1 MiB (the frame
    decoders write one line per frame: counting each would cost a Python call per event)."""

    def __init__(self, out, blanks: BlankLines | None) -> None:
        self._out, self._blanks, self._buf, self._size = out, blanks, [], 0

    def write(self, data: bytes) -> None:
        self._buf.append(data)
        self._size += len(data)
        if self._size >= _BLANK_BLOCK:
            self.flush()

    def flush(self) -> None:
        if self._buf:
            block = b"".join(self._buf)
            self._buf, self._size = [], 0
            if self._blanks is not None:
                self._blanks.feed(block)
            self._out.write(block)


def _jsonl_line(payload: bytes) -> bytes:
    """A decoded frame as one JSONL line: a leading UTF-8 BOM dropped, a final newline ensured."""
    if payload.startswith(BOM):
        payload = payload[len(BOM):]
    return payload if payload.endswith(b"\n") else payload + b"\n"


@dataclass(frozen=True)
class FramedDecodeStats:
    """What decoding one ``zstd-frames`` file found."""

    frames: int
    malformed_frames: int
    bytes_in: int
    bytes_out: int


def _load_dictionary(dictionary: str | os.PathLike[str] | bytes | None):
    import zstandard

    if dictionary is None:
        return None
    if isinstance(dictionary, bytes):
        return zstandard.ZstdCompressionDict(dictionary)
    path = Path(dictionary)
    if not path.is_file():
        raise ZstdDictionaryError(f"zstd dictionary {str(path)!r} does not exist or is not a file")
    return zstandard.ZstdCompressionDict(path.read_bytes())


#: other compressed or archive formats, named in the error that refuses them
_OTHER_FORMATS = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"PK\x03\x04", "zip"),
                  (b"7z\xbc\xaf\x27\x1c", "7z"), (b"PAR1", "Parquet"), (b"\x04\x22\x4d\x18", "lz4"))


def detect_container(path: str | os.PathLike[str], dictionary: str | os.PathLike[str] | bytes | None = None
                     ) -> Container:
    """The container of one input file (see the module docstring).

    Raises:
        IngestError: the file does not exist, or it is binary in no layout aumann reads.
    """
    import zstandard

    p = Path(path)
    if not p.is_file():
        raise IngestError(f"input file {str(p)!r} does not exist or is not a file")
    with open(p, "rb") as fh:
        head = fh.read(_SNIFF)
        size = os.fstat(fh.fileno()).st_size
    if is_skippable_frame(head):  # a zstd stream that starts with skippable frames (pzstd): judge its first frame
        head = _skip_skippable_frames(head)
        if not head.startswith(ZSTD_MAGIC):
            return "zstd"
    if not head.startswith(ZSTD_MAGIC):
        if record_byteorder(head, size) is not None:
            return "length-prefixed"
        if _looks_binary(head, whole=len(head) >= size):
            known = next((name for magic, name in _OTHER_FORMATS if head.startswith(magic)), None)
            what = f"a {known} file, which aumann does not read (decompress or unpack it first)" if known else \
                "binary but not in a layout aumann reads"
            raise IngestError(
                f"input file {str(p)!r} is {what} (it reads JSONL, .jsonl.zst, zstd frames "
                f"with or without a dictionary, [u32 length][zstd frame or JSON] records); it starts with "
                f"{head[:8]!r}. Nothing was ingested from it")
        return "jsonl"
    try:
        params = zstandard.get_frame_parameters(head)
    except zstandard.ZstdError:
        return "zstd"  # let the reader report it; a broken header is not a framed file either
    if params.dict_id:
        return "zstd-frames"
    # A dictionary-less per-message capture: the first frame holds exactly one message and no
    # trailing newline; an ordinary .jsonl.zst frame ends with "\n".
    try:
        first, complete, rest = _sniff_frame(zstandard.ZstdDecompressor(), head)
    except zstandard.ZstdError:
        # Undecodable without a dictionary: frames compressed with one whose header omits its ID?
        zdict = _load_dictionary(dictionary)
        if zdict is None:
            return "zstd"
        try:
            _sniff_frame(zstandard.ZstdDecompressor(dict_data=zdict), head)
        except zstandard.ZstdError:
            return "zstd"
        return "zstd-frames"
    if complete and rest.startswith(ZSTD_MAGIC) and not first.endswith(b"\n") \
            and _frames_hold_single_lines(first, rest):
        return "zstd-frames"
    return "zstd"


#: the decoded bytes of one frame that detection looks at: a Jetstream message is far smaller, and a frame that
#: decodes to more is no per-message frame. Without the bound the first frame was decoded whole, in memory: a
#: 66 KB .jsonl.zst of line ends took 2.1 GB to detect (a 1 MiB one would take 32 GiB)
_SNIFF_DECODED = 1 << 24
_SNIFF_STEP = 256  # compressed bytes fed at a time: at most ~64 blocks, 8 MiB decoded, past the bound


#: the most one message (a frame of a ``zstd-frames`` file, a zstd record of a ``length-prefixed`` one) may decode
#: to; a frame that decodes to more is a malformed frame. Each frame was decoded whole, in memory: one frame of
#: 33 KB holds 1 GiB of line ends
MAX_MESSAGE_BYTES = 1 << 26


def _decode_message(dctx, frame: bytes) -> bytes | None:
    """The decoded ``frame`` (one message), or ``None`` when it decodes to more than :data:`MAX_MESSAGE_BYTES`. A
    frame too short to pass the bound, or one that declares its size (libzstd holds it to that size), is decoded at
    once; any other is decoded a few hundred bytes at a time, up to the bound.

    Raises:
        zstandard.ZstdError: the frame does not decode (with ``dctx``).
    """
    if len(frame) <= MAX_MESSAGE_BYTES >> 15:  # a block of 4 bytes (header and RLE byte) decodes to 128 KiB at most,
        return dctx.decompressobj().decompress(frame)  # so a frame this short cannot pass the bound (the usual case)
    import zstandard

    size = zstandard.get_frame_parameters(frame).content_size
    if size != zstandard.CONTENTSIZE_UNKNOWN:
        return dctx.decompressobj().decompress(frame) if size <= MAX_MESSAGE_BYTES else None
    data, complete, _ = _sniff_frame(dctx, frame, MAX_MESSAGE_BYTES)
    return data if complete else None


def _sniff_frame(dctx, data: bytes, limit: int = _SNIFF_DECODED) -> tuple[bytes, bool, bytes]:
    """(the decoded start of the frame at the start of ``data``, whether the frame ended within ``data`` and within
    ``limit`` decoded bytes, the bytes after it). Fed a few hundred bytes at a time, so no more than the bound (and
    one step) is ever decoded.

    Raises:
        zstandard.ZstdError: the frame does not decode (with ``dctx``).
    """
    dobj = dctx.decompressobj()
    out: list[bytes] = []
    size = 0
    for i in range(0, len(data), _SNIFF_STEP):
        piece = dobj.decompress(data[i:i + _SNIFF_STEP])
        out.append(piece)
        size += len(piece)
        if dobj.eof:
            return b"".join(out), size <= limit, dobj.unused_data + data[i + _SNIFF_STEP:]
        if size > limit:
            break
    return b"".join(out), False, b""


def _frames_hold_single_lines(first: bytes, rest: bytes, *, frames: int = 8) -> bool:
    """Whether the first frames of a file (``first`` decoded, ``rest`` the bytes after it) each hold at most one
    line, as per-message frames do (a Jetstream message has no newline): an ordinary .jsonl.zst written in several
    frames that end mid-line (a frame per N bytes) has a newline inside one, and read as frames each of its cut
    lines cost a valid event and counted twice as malformed."""
    import zstandard

    payloads = [first]
    dctx = zstandard.ZstdDecompressor()
    while len(payloads) < frames and rest.startswith(ZSTD_MAGIC):
        try:
            payload, complete, rest = _sniff_frame(dctx, rest)
        except zstandard.ZstdError:
            break
        payloads.append(payload)
        if not complete:
            break  # the frame goes on past the sniffed head (or past the bound)
    return not any(b"\n" in p.rstrip(b"\r\n") for p in payloads)


def _looks_binary(head: bytes, whole: bool = False) -> bool:
    """Binary and not JSONL: no complete line of the head is a JSON object, and its first KiB holds NUL
    bytes or invalid UTF-8 (a JSONL capture with some garbage lines is still JSONL: those are counted).
    ``whole``: the head is the entire file, so its last line (without a final newline) is complete too."""
    lines = head.split(b"\n")
    for line in lines if whole or len(lines) == 1 else lines[:-1]:
        text = line.strip(b" \t\r\x0b\x0c")
        if text.startswith(BOM):
            text = text[len(BOM):]
        if text[:1] != b"{":
            continue
        try:
            if isinstance(bounded.loads_json(text, what="a head line", error=ValueError), dict):
                return False
        except (ValueError, UnicodeDecodeError):
            continue
    sample = head[:1024]
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(sample) - 3
    return False


def record_byteorder(head: bytes, size: int, *, min_records: int = 2) -> Literal["little", "big"] | None:
    """The byte order of ``[u32 length][payload]`` records at the start of a file, or ``None``.

    ``head`` is the file's first bytes and ``size`` its length. Walking the records from the start, each
    payload must begin (inside ``head``) with the zstd magic number, ``{`` or a BOM, and each length must
    land on the next record; the walk must reach the end of the file exactly, or check ``min_records``
    records (a truncated last record is the decoder's to count).
    """
    for order in ("little", "big"):
        pos = checked = 0
        while pos + 4 <= min(len(head), size):
            n = int.from_bytes(head[pos:pos + 4], order)  # type: ignore[arg-type]
            start = pos + 4
            lead = head[start:start + 4]
            if n < 1 or start >= len(head) or not (lead.startswith(ZSTD_MAGIC) or lead[:1] == b"{"
                                                  or lead.startswith(BOM[:len(lead)])):
                break
            checked += 1
            if start + n > size:
                break  # a truncated last record
            pos = start + n
            if pos == size:
                return order  # type: ignore[return-value]
        if checked >= min_records:
            return order  # type: ignore[return-value]
    return None


def frame_dictionary_id(path: str | os.PathLike[str]) -> int:
    """The dictionary ID declared by the first zstd frame of ``path`` (0 when none)."""
    import zstandard

    with open(path, "rb") as fh:
        head = fh.read(1024)
    return int(zstandard.get_frame_parameters(head).dict_id)


def _frame_length(buf: bytes | memoryview, pos: int) -> int:
    """Length of the zstd frame starting at ``pos`` (RFC 8878 §3.1.1), or -1 if ``buf`` ends first.

    Raises:
        ValueError: the bytes at ``pos`` are not a well-formed frame header or block sequence.
    """
    n = len(buf)
    if n - pos < 6:
        return -1
    if bytes(buf[pos:pos + 4]) != ZSTD_MAGIC:
        raise ValueError("no zstd magic number")
    fhd = buf[pos + 4]
    fcs_flag, single, checksum, did_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
    if fhd & 0x08:
        raise ValueError("reserved bit set in frame header")
    off = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag]
    while True:
        if n - off < 3:
            return -1
        h = buf[off] | (buf[off + 1] << 8) | (buf[off + 2] << 16)
        last, btype, bsize = h & 1, (h >> 1) & 3, h >> 3
        if btype == 3:
            raise ValueError("reserved block type")
        off += 3 + (1 if btype == 1 else bsize)
        if last:
            break
    off += 4 if checksum else 0
    return -1 if off > n else off - pos


def iter_frames(
    path: str | os.PathLike[str], dictionary=None, *, chunk_size: int = 1 << 22
) -> Iterator[bytes | None]:
    """Yield the decoded payload of each zstd frame in ``path``; ``None`` for a frame that fails.

    Frame boundaries come from the frame and block headers, so memory stays bounded by
    ``chunk_size`` plus one frame. After a failure the decoder skips to the next magic number.
    """
    import zstandard

    dctx = zstandard.ZstdDecompressor(dict_data=dictionary) if dictionary is not None \
        else zstandard.ZstdDecompressor()
    buf = b""
    pos = 0
    eof = False
    with open(path, "rb") as fh:
        while True:
            try:
                length = _frame_length(buf, pos)
            except ValueError:
                length = -2
            if length == -1 and not eof:
                buf = buf[pos:] + fh.read(max(chunk_size, len(buf) - pos))
                pos = 0
                eof = fh.peek(1) == b"" if hasattr(fh, "peek") else False
                continue
            if length == -1:  # eof and an incomplete tail
                if pos < len(buf):
                    yield None
                return
            if length > 0:
                frame = buf[pos:pos + length]
                try:
                    payload = _decode_message(dctx, frame)
                except zstandard.ZstdError:
                    pass
                else:
                    yield payload  # None: a frame that decodes past MAX_MESSAGE_BYTES, a malformed frame
                    pos += length
                    continue
            yield None  # a broken frame: resynchronise at the next magic number
            while True:
                nxt = buf.find(ZSTD_MAGIC, pos + 1)
                if nxt >= 0:
                    pos = nxt
                    break
                if eof:
                    return
                buf = buf[-3:] + fh.read(chunk_size)
                pos = 0
                eof = fh.peek(1) == b""


def decode_frames_to_jsonl(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    dictionary: str | os.PathLike[str] | bytes | None = None,
    *,
    blanks: BlankLines | None = None,
) -> FramedDecodeStats:
    """Decode a ``zstd-frames`` file into newline-delimited JSON at ``dst`` (its blank lines counted by ``blanks``).

    Raises:
        ZstdDictionaryError: the frames declare a dictionary and none (or another one) was given.
        IngestError: ``blanks`` counted more blank lines than its limit (a newline bomb).
    """
    zdict = _load_dictionary(dictionary)
    want = frame_dictionary_id(src)
    if want and zdict is None:
        raise ZstdDictionaryError(
            f"{str(src)!r} is compressed with zstd dictionary ID {want}"
            + (" (Jetstream's published dictionary)" if want == JETSTREAM_DICTIONARY_ID else "")
            + "; pass the dictionary file with --zstd-dictionary PATH"
        )
    if want and zdict is not None and zdict.dict_id() != want:
        raise ZstdDictionaryError(
            f"{str(src)!r} needs zstd dictionary ID {want}; the dictionary given has ID {zdict.dict_id()}"
        )
    frames = bad = out_bytes = 0
    with open(dst, "wb") as fh:
        out = _CountingWriter(fh, blanks)
        for payload in iter_frames(src, zdict):
            frames += 1
            if payload is None:
                bad += 1
                continue
            line = _jsonl_line(payload)
            out.write(line)
            out_bytes += len(line)
        out.flush()
    return FramedDecodeStats(frames=frames, malformed_frames=bad, bytes_in=Path(src).stat().st_size,
                             bytes_out=out_bytes)


def decode_records_to_jsonl(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    dictionary: str | os.PathLike[str] | bytes | None = None,
    *,
    chunk_size: int = 1 << 22,
    blanks: BlankLines | None = None,
) -> FramedDecodeStats:
    """Decode a ``length-prefixed`` file (``[u32 length][zstd frame or JSON]`` records) into JSONL at ``dst`` (its
    blank lines counted by ``blanks``: more than its limit is an :class:`IngestError`, a newline bomb).

    A record whose frame does not decode, a length that runs past the end of the file, or a payload that
    is neither a zstd frame nor JSON counts as one malformed record (``malformed_frames``); a bad length
    ends the walk (nothing after it can be located), and the bytes left are counted as one more.

    Raises:
        IngestError: the file is not length-prefixed.
        ZstdDictionaryError: the frames declare a dictionary and none (or another one) was given.
    """
    import zstandard

    size = Path(src).stat().st_size
    with open(src, "rb") as fh:
        order = record_byteorder(fh.read(_SNIFF), size)
    if order is None:
        raise IngestError(f"{str(src)!r} is not a sequence of [u32 length][payload] records")
    zdict = _load_dictionary(dictionary)
    dctx_plain = zstandard.ZstdDecompressor()
    dctx_dict = zstandard.ZstdDecompressor(dict_data=zdict) if zdict is not None else None
    frames = bad = out_bytes = 0
    with open(src, "rb") as fh, open(dst, "wb") as dst_fh:
        out = _CountingWriter(dst_fh, blanks)
        while True:
            prefix = fh.read(4)
            if not prefix:
                break
            frames += 1
            if len(prefix) < 4:
                bad += 1
                break
            n = int.from_bytes(prefix, order)
            payload = fh.read(n) if 0 < n <= chunk_size * 64 else b""
            if n < 1 or len(payload) < n:
                bad += 1  # a bad length or a truncated last record: nothing after it can be located
                break
            if payload.startswith(ZSTD_MAGIC):
                try:
                    want = zstandard.get_frame_parameters(payload).dict_id
                except zstandard.ZstdError:
                    bad += 1
                    continue
                if want and zdict is None:
                    raise ZstdDictionaryError(
                        f"{str(src)!r} holds zstd frames compressed with dictionary ID {want}; pass the "
                        "dictionary file with --zstd-dictionary PATH")
                if want and zdict is not None and zdict.dict_id() != want:
                    raise ZstdDictionaryError(f"{str(src)!r} needs zstd dictionary ID {want}; the dictionary given "
                                              f"has ID {zdict.dict_id()}")
                decoded = None
                for dctx in (dctx_dict, dctx_plain):  # the dictionary first when one is given
                    if dctx is None:
                        continue
                    try:
                        decoded = _decode_message(dctx, payload)  # None past MAX_MESSAGE_BYTES: malformed
                        break
                    except zstandard.ZstdError:
                        continue
                if decoded is None:
                    bad += 1
                    continue
                payload = decoded
            elif payload[:1] != b"{" and not payload.startswith(BOM):
                bad += 1
                continue
            line = _jsonl_line(payload)
            out.write(line)
            out_bytes += len(line)
        out.flush()
    return FramedDecodeStats(frames=frames, malformed_frames=bad, bytes_in=size, bytes_out=out_bytes)


def count_lines(path: str | os.PathLike[str], *, compressed: bool = False, chunk_size: int = 1 << 20,
                blanks: BlankLines | None = None, threads: int = 2) -> int:
    """Lines in a file (``\n``-terminated, plus a last one without ``\n``); of its decompressed content
    with ``compressed=True`` (a zstd stream; stops quietly where a damaged stream stops decoding), its blank lines
    counted by ``blanks`` (more than its limit is an :class:`IngestError`, a newline bomb). A plain file is counted
    on up to ``threads`` threads (1 or 2)."""
    import zstandard

    if not compressed and blanks is None:
        return _count_lines_mapped(path, chunk_size, threads)
    lines = 0
    last = b"\n"
    with open(path, "rb") as fh:
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True) if compressed else fh
        while True:
            try:
                block = reader.read(chunk_size)
            except zstandard.ZstdError:
                break
            if not block:
                break
            lines += block.count(b"\n") if blanks is None else blanks.feed(block)
            last = block[-1:]
    return lines + (last != b"\n")


_THREADED_COUNT_FROM = 64_000_000  # bytes; below it a second thread costs more than it saves


def _count_lines_mapped(path: str | os.PathLike[str], chunk_size: int, threads: int = 2) -> int:
    """:func:`count_lines` of a plain file: the file mapped, not copied, and ``\\n`` counted by numpy's
    vectorised compare in cache-sized slices (1 MiB: ~2× faster than 16 MiB, whose mask leaves the
    cache), the slices split over up to two threads (numpy releases the GIL), from 64 MB on."""
    import mmap
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return 0
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            data = np.frombuffer(mm, dtype=np.uint8)
            try:
                starts = range(0, size, chunk_size)
                if threads > 1 and size >= _THREADED_COUNT_FROM and (os.cpu_count() or 1) > 1:
                    half = len(starts) // 2
                    with ThreadPoolExecutor(2) as pool:
                        lines = sum(pool.map(_newlines, (data, data), (starts[:half], starts[half:]),
                                             (chunk_size, chunk_size)))
                else:
                    lines = _newlines(data, starts, chunk_size)
                last = int(data[-1])
            finally:
                del data  # the mapping closes only once no array refers to it
    return lines + (last != 10)


def _newlines(data, starts: range, chunk_size: int) -> int:
    """``\\n`` bytes in ``data[s:s + chunk_size]`` over ``starts``."""
    import numpy as np

    return sum(int(np.count_nonzero(data[i:i + chunk_size] == 10)) for i in starts)


def starts_with_bom(path: str | os.PathLike[str], *, compressed: bool = False) -> bool:
    """Whether the (decompressed) content of ``path`` starts with a UTF-8 byte-order mark."""
    import zstandard

    if not compressed:
        return aio.starts_with_bom(path)
    with open(path, "rb") as fh:
        try:
            return zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).read(3) == BOM
        except zstandard.ZstdError:
            return False


def copy_without_bom(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, compressed: bool = False,
                     chunk_size: int = 1 << 22, recompress: bool = False,
                     blanks: BlankLines | None = None) -> StreamDecodeStats:
    """Copy (decompressing with ``compressed=True``) ``src`` to plain JSONL at ``dst`` without its leading BOM
    (``recompress``: a zstd stream's copy is zstd again, at level 1; ``blanks``: a compressed file's blank lines
    are counted, see :func:`decode_zstd_stream_to_jsonl`)."""
    if compressed:
        return decode_zstd_stream_to_jsonl(src, dst, strip_bom=True, recompress=recompress, blanks=blanks)
    return StreamDecodeStats(bytes_out=aio.copy_without_bom(src, dst, chunk_size=chunk_size), error=None)


def zstd_stream_problem(path: str | os.PathLike[str]) -> str | None:
    """``None`` if ``path`` is a sequence of complete zstd frames, else what is wrong with it.

    Walks the frame and block headers with seeks (a few bytes per 128 KiB block), so a capture cut
    mid-write is noticed without decompressing it.
    """
    size = Path(path).stat().st_size
    with open(path, "rb") as fh:
        pos = 0
        while pos < size:
            fh.seek(pos)
            head = fh.read(18)
            if is_skippable_frame(head) and len(head) >= 8:  # no content: a decoder skips it, and so do we
                pos += 8 + int.from_bytes(head[4:8], "little")
                continue
            if head[:4] != ZSTD_MAGIC:
                return f"no zstd frame at byte {pos}"
            fhd = head[4]
            single, checksum, did_flag, fcs_flag = (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3, fhd >> 6
            off = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[did_flag] + ((1 if single else 0), 2, 4, 8)[fcs_flag]
            while True:
                fh.seek(off)
                b = fh.read(3)
                if len(b) < 3:
                    return f"truncated: the frame at byte {pos} ends early"
                h = b[0] | (b[1] << 8) | (b[2] << 16)
                btype = (h >> 1) & 3
                if btype == 3:
                    return f"damaged block header at byte {off}"
                off += 3 + (1 if btype == 1 else h >> 3)
                if h & 1:
                    break
            pos = off + (4 if checksum else 0)
        return None if pos == size else f"truncated: the last frame needs {pos - size} more bytes"


@dataclass(frozen=True)
class StreamDecodeStats:
    """What decoding a (possibly damaged) zstd stream recovered."""

    bytes_out: int
    error: str | None


def decode_zstd_stream_to_jsonl(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                                *, chunk_size: int = 1 << 10, strip_bom: bool = True,
                                recompress: bool = False, blanks: BlankLines | None = None) -> StreamDecodeStats:
    """Decompress a zstd stream to ``dst`` up to the first error (a truncated or damaged file).

    What decoded is kept: the stream is decoded a frame at a time (one ``decompressobj`` per frame, the next
    started on the bytes after its end), so everything a complete frame held is written before the bytes after
    it are even looked at — garbage after the last frame costs nothing that decoded (a buffered reader lost
    the last chunk it had decoded when the next read failed). A line cut by the damage stays cut, so the
    ingester counts it as malformed. A leading UTF-8 byte-order mark is dropped (``strip_bom``). ``recompress``:
    ``dst`` is written as one zstd stream at level 1 (``bytes_out`` still counts the decoded bytes), so a scratch
    copy takes about the capture's own size, not its decoded text (a 34 KB capture of line ends decoded to 1 GiB in
    the temporary folder; 4 MB of them would fill 120 GiB). ``blanks`` counts the decoded text's blank lines (more
    than its limit is an :class:`IngestError`, a newline bomb). The stream is fed ``chunk_size`` bytes at a time
    (1 KiB: up to 32 MiB decoded per call; 64 KiB decoded a 66 KB stream of line ends into one 2 GiB piece).
    """
    import contextlib

    import zstandard

    out_bytes = 0
    error = None
    first = strip_bom
    dctx = zstandard.ZstdDecompressor()
    frame = dctx.decompressobj()
    fed = False  # the current frame has been given input
    with contextlib.ExitStack() as stack:
        fh = stack.enter_context(open(src, "rb"))
        out = stack.enter_context(open(dst, "wb"))
        if recompress:
            out = stack.enter_context(zstandard.ZstdCompressor(level=1).stream_writer(out))
        out = _CountingWriter(out, blanks)
        stack.callback(out.flush)
        while error is None:
            data = fh.read(chunk_size)
            if not data:
                break
            while data:
                try:
                    piece = frame.decompress(data)
                except zstandard.ZstdError as exc:
                    error = str(exc)
                    break
                fed = True
                if first and piece:
                    first = False
                    if piece.startswith(BOM):
                        piece = piece[len(BOM):]
                out.write(piece)
                out_bytes += len(piece)
                if frame.eof:  # the frame is complete: what follows it starts the next one
                    data = frame.unused_data
                    frame, fed = dctx.decompressobj(), False
                else:
                    data = b""
        if error is None and fed:
            error = "the stream ends inside a frame (a truncated file)"
    return StreamDecodeStats(bytes_out=out_bytes, error=error)


def write_frames(messages: list[bytes], dst: str | os.PathLike[str], dictionary: bytes | None = None,
                 level: int = 3) -> Path:
    """Write ``messages`` as back-to-back independent zstd frames (the ``zstd-frames`` container).

    This is what a recorder saving Jetstream's ``compress=true`` binary messages produces; it is
    used by the tests and by users converting their own recordings.
    """
    import zstandard

    zdict = zstandard.ZstdCompressionDict(dictionary) if dictionary is not None else None
    cctx = zstandard.ZstdCompressor(level=level, dict_data=zdict) if zdict is not None \
        else zstandard.ZstdCompressor(level=level)
    dst = Path(dst)
    with open(dst, "wb") as fh:
        for m in messages:
            fh.write(cctx.compress(m))
    return dst


__all__ = [
    "BOM",
    "JETSTREAM_DICTIONARY_ID",
    "MAX_BLANK_LINES",
    "MAX_MESSAGE_BYTES",
    "ZSTD_MAGIC",
    "BlankLines",
    "Container",
    "FramedDecodeStats",
    "StreamDecodeStats",
    "ZstdDictionaryError",
    "copy_without_bom",
    "count_lines",
    "decode_frames_to_jsonl",
    "decode_records_to_jsonl",
    "decode_zstd_stream_to_jsonl",
    "detect_container",
    "frame_dictionary_id",
    "iter_frames",
    "record_byteorder",
    "starts_with_bom",
    "write_frames",
    "zstd_stream_problem",
]
