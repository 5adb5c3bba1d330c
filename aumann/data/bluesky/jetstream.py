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
  ordinary ``.jsonl.zst`` frame ends with ``\\n``). Frames are decoded into a temporary JSONL file
  (streaming, memory-bounded) that the ingester then reads like any other; a frame that fails to
  decode is counted (``malformed_frames``) and the decoder resynchronises at the next magic number.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aumann.errors import IngestError, ZstdDictionaryError

Container = Literal["jsonl", "zstd", "zstd-frames"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
JETSTREAM_DICTIONARY_ID = 1612007021
_SNIFF = 1 << 20


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


def detect_container(path: str | os.PathLike[str]) -> Container:
    """The container of one input file (see the module docstring).

    Raises:
        IngestError: the file does not exist.
    """
    import zstandard

    p = Path(path)
    if not p.is_file():
        raise IngestError(f"input file {str(p)!r} does not exist or is not a file")
    with open(p, "rb") as fh:
        head = fh.read(_SNIFF)
    if not head.startswith(ZSTD_MAGIC):
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
        dobj = zstandard.ZstdDecompressor().decompressobj()
        first = dobj.decompress(head)
    except zstandard.ZstdError:
        return "zstd"
    if dobj.eof and dobj.unused_data.startswith(ZSTD_MAGIC) and not first.endswith(b"\n"):
        return "zstd-frames"
    return "zstd"


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
                    yield dctx.decompressobj().decompress(frame)
                    pos += length
                    continue
                except zstandard.ZstdError:
                    pass
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
) -> FramedDecodeStats:
    """Decode a ``zstd-frames`` file into newline-delimited JSON at ``dst``.

    Raises:
        ZstdDictionaryError: the frames declare a dictionary and none (or another one) was given.
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
    with open(dst, "wb") as out:
        for payload in iter_frames(src, zdict):
            frames += 1
            if payload is None:
                bad += 1
                continue
            if not payload.endswith(b"\n"):
                payload += b"\n"
            out.write(payload)
            out_bytes += len(payload)
    return FramedDecodeStats(frames=frames, malformed_frames=bad, bytes_in=Path(src).stat().st_size,
                             bytes_out=out_bytes)


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
                                *, chunk_size: int = 1 << 16) -> StreamDecodeStats:
    """Decompress a zstd stream to ``dst`` up to the first error (a truncated or damaged file).

    What decoded is kept; a line cut by the damage stays cut, so the ingester counts it as malformed.
    """
    import zstandard

    out_bytes = 0
    error = None
    with open(src, "rb") as fh, open(dst, "wb") as out:
        reader = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)
        while True:
            try:
                chunk = reader.read(chunk_size)
            except zstandard.ZstdError as exc:
                error = str(exc)
                break
            if not chunk:
                break
            out.write(chunk)
            out_bytes += len(chunk)
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
    "JETSTREAM_DICTIONARY_ID",
    "ZSTD_MAGIC",
    "Container",
    "FramedDecodeStats",
    "StreamDecodeStats",
    "ZstdDictionaryError",
    "decode_frames_to_jsonl",
    "decode_zstd_stream_to_jsonl",
    "detect_container",
    "frame_dictionary_id",
    "iter_frames",
    "write_frames",
    "zstd_stream_problem",
]
