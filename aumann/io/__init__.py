"""Files: atomic writes, ``.npz`` + JSON metadata, JSON without NaN, checksums.

Every file aumann writes goes through this package, so a crash or a full disk never leaves a
half-written result where a finished one is expected: data goes to a temporary file in the target's
own directory (same filesystem), is flushed and fsynced, and is renamed over the target
(:func:`os.replace` is atomic on POSIX and Windows).

* :func:`atomic_path`   a temporary path for writers that insist on a file name (pandas, matplotlib,
  DuckDB), renamed into place when the block exits without an exception (a write killed before the rename
  leaves its temporary file, ``.NAME.XXXXXXXX.tmpSUFFIX``: :func:`partial_write` tells it by its name, and the
  next write of ``NAME`` in a folder whose lock the process holds removes it, unless it is minutes fresh);
* :func:`write_bytes`, :func:`write_text`, :func:`write_json` (NaN/inf → ``null``: JSON has neither),
  :func:`write_npz` (arrays plus a JSON metadata record);
* :func:`read_npz` the reverse of :func:`write_npz`, for archives from anywhere: the zip directory and
  every ``.npy`` header are checked (:mod:`aumann.npz`) before anything is decompressed, and the metadata
  goes through the bounded JSON reader (:mod:`aumann.bounded`);
* :func:`read_json` a JSON file (size and depth bounded), :func:`open_read` a file opened for reading;
* :func:`write_csv` tables of plain numbers (Python floats written so they read back exactly; a missing
  or non-finite value is an empty cell);
* :func:`starts_with_bom` / :func:`copy_without_bom` a text file's leading UTF-8 byte-order mark, which
  DuckDB's JSON reader refuses (the trace readers and the Jetstream ingester read such a file through a
  copy without it);
* :func:`sha256_bytes`, :func:`sha256_file`, :func:`record_checksum` checksums (for resume checks);
* :func:`safe_component` / :func:`child_path` the one rule for names that become path components
  (topics, scenario names, groups, file stems): nothing a name holds can lead outside its folder;
* :func:`ensure_output_dir` an output folder checked before any work starts (not a file, writable);
* :func:`confine` the run-directory rule: given ``within=`` (the run directory), every reader and writer
  here refuses a path that leaves it — lexically (``..``) or through a symbolic link anywhere along the
  way — with :class:`~aumann.errors.PathEscapeError`; :func:`file_digests` / :func:`check_digests` the
  checksums that cover every file a resume reads;
* which files in an output folder are aumann's (:mod:`aumann.io.outputs`): the output journal
  (:func:`journaled`), :func:`recorded_outputs`, :func:`output_check`, and :func:`check_outputs` /
  :func:`check_stale`, which refuse to replace or remove a file of yours with an output's name;
* one writer per output folder (:mod:`aumann.io.lock`): :func:`lock_output_dir` / :func:`output_lock`, an
  advisory ``flock`` on :data:`OUTPUTS_LOCK` in the folder; a second live command writing there gets an
  :class:`~aumann.errors.OutputBusyError` at once (no lock where there is no ``flock``: Windows).

The confined reads, atomic writes, removal and file checksums live in :mod:`aumann.io.files` (under both), the
output-ownership layer in :mod:`aumann.io.outputs` and the folder's lock in :mod:`aumann.io.lock`; this module
re-exports every public name of them.

Confinement is a resolved-path check made at the moment a file is opened (``os.path.realpath`` of the
target must lie inside the real run directory; the file itself is then opened with ``O_NOFOLLOW``; a
write goes to a temporary file in the checked folder and is renamed over the target, which replaces a
symbolic link rather than following it). It defends against links already in the directory (a copied or
shared run folder, a planted ``runs -> /elsewhere``); it does not defend against a process that swaps a
folder for a link between the check and the open while aumann runs.

A write that fails for a reason of the file system (no permission, an existing file where a folder is
needed, a full disk) raises :class:`~aumann.errors.OutputError` naming the path.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io as _io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aumann import bounded, npz
from aumann.checks import as_path
from aumann.errors import ConfigError, OutputError, PathEscapeError, UnsafeNameError
from aumann.io.files import (
    _DIGESTS,
    PathLike,
    _os_reason,
    _remember_digest,
    _signature,
    atomic_path,
    confine,
    open_read,
    partial_write,
    read_json,
    remove_stale,
    sha256_bytes,
    sha256_file,
    write_bytes,
)
from aumann.io.lock import (
    OUTPUTS_LOCK,
    lock_output_dir,
    output_lock,
    release_output_locks,
    unlock_output_dir,
)
from aumann.io.outputs import (
    OUTPUTS_COMPLETE,
    OUTPUTS_JOURNAL,
    OutputCheck,
    RecordedOutputs,
    adopt_outputs,
    check_outputs,
    check_stale,
    journal_output,
    journal_outputs,
    journaled,
    output_check,
    recorded_outputs,
    settle_journal,
)

#: key of the JSON metadata record inside an ``.npz`` written by :func:`write_npz`
META_KEY = "__meta__"


def write_text(path: PathLike, text: str, *, within: PathLike | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically.

    Raises:
        OutputError: ``text`` holds a lone surrogate (U+D800–U+DFFF), which UTF-8 cannot encode: the message names
            the file and the character, instead of a bare ``UnicodeEncodeError``.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        line = text.count("\n", 0, exc.start) + 1
        raise OutputError(f"cannot write {Path(path)}: line {line} holds the character U+{ord(bad):04X} (a lone "
                          f"surrogate, as a file name or a JSON \\u escape that is not UTF-8 yields), which UTF-8 "
                          f"cannot encode: {visible_surrogates(text[max(0, exc.start - 30):exc.start + 30])!r}") \
            from None
    return write_bytes(path, data, within=within)


_GLOB_CHARS = re.compile(r"[\[*?]")


def duckdb_file_name(path: PathLike) -> str:
    """``path`` as DuckDB's file readers (``read_json``, ``read_csv``, ``read_parquet``) take it literally: they
    expand every name as a glob, so ``day[1].jsonl`` read ``day1.jsonl`` instead, silently; each ``[``, ``*`` and
    ``?`` becomes a one-character class (``[[]``, ``[*]``, ``[?]``), which matches only itself."""
    return _GLOB_CHARS.sub(lambda m: f"[{m.group()}]", str(path))


BOM = b"\xef\xbb\xbf"


def starts_with_bom(path: PathLike) -> bool:
    """Whether the file at ``path`` starts with a UTF-8 byte-order mark."""
    with open(path, "rb") as fh:
        return fh.read(len(BOM)) == BOM


def copy_without_bom(src: PathLike, dst: PathLike, *, chunk_size: int = 1 << 22) -> int:
    """Copy ``src`` to ``dst`` without its leading UTF-8 byte-order mark (if any); the bytes written.

    ``dst`` is a scratch copy for a reader (a temporary folder), not a result: it is written in place.
    """
    written = 0
    with open(src, "rb") as fh, open(dst, "wb") as out:
        head = fh.read(len(BOM))
        if head != BOM:
            out.write(head)
            written += len(head)
        while block := fh.read(chunk_size):
            out.write(block)
            written += len(block)
    return written


def plain(obj: Any) -> Any:
    """A JSON-ready copy of ``obj``: numpy scalars/arrays → Python numbers/lists, NaN/inf → ``None``,
    paths → strings, tuples/sets → lists, mapping keys → strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str | int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.datetime64 | np.timedelta64) or (
            isinstance(obj, np.ndarray) and obj.dtype.kind in "mM"):
        return time_text(obj)
    if isinstance(obj, np.generic):
        return plain(obj.item())
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, _dt.datetime | _dt.date | _dt.time):
        return obj.isoformat()
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "model_dump"):
        return plain(obj.model_dump(mode="json"))
    return obj


#: a character Python text can hold but UTF-8 cannot: a lone surrogate, e.g. the ``\udcff`` that a file name with
#: a byte that is not UTF-8 (``\xff``, a Latin-1 name) becomes in ``sys.argv`` and ``os.listdir``
_SURROGATE = re.compile("[\ud800-\udfff]")
#: the JSON escape of a surrogate: a lone one, or half of the pair ``ensure_ascii`` writes for a character beyond
#: U+FFFF (an emoji; those, and a literal backslash-``ud800`` text, only cost the second pass below, which changes
#: nothing in them); two lone surrogates that happen to form a pair are written visibly too, as record_checksum
#: sees them
_SURROGATE_ESCAPE = re.compile(r"\\ud[89a-f][0-9a-f]{2}", re.IGNORECASE)


def visible_surrogates(text: str) -> str:
    r"""``text`` with every lone surrogate shown as its escape: ``\xff`` for a byte that was not UTF-8 (Python's
    ``surrogateescape``: U+DCFF), ``\ud800`` for any other. Such text cannot be encoded as UTF-8, so it is shown
    this way wherever it is only displayed or recorded (a file name in ``manifest.json`` or a report); an agent id
    holding one is refused where the panel is built (:class:`~aumann.errors.PanelError`).

    >>> visible_surrogates("x\udcff y.npz")
    'x\\xff y.npz'
    """
    def shown(m: re.Match[str]) -> str:
        o = ord(m.group(0))
        return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}"

    return _SURROGATE.sub(shown, text)


def _without_surrogates(obj: Any) -> Any:
    if isinstance(obj, str):
        return visible_surrogates(obj)
    if isinstance(obj, dict):
        return {visible_surrogates(k): _without_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_without_surrogates(v) for v in obj]
    return obj


def dumps_json(obj: Any, *, indent: int | None = 1) -> str:
    """JSON text of :func:`plain` (``obj``): never contains ``NaN`` or ``Infinity``, and is always well-formed
    Unicode: a lone surrogate in a string (a file name that is not UTF-8: ``x\udcff.npz``) is written as its
    visible escape (``x\\xff.npz``, :func:`visible_surrogates`), not as ``"\\udcff"``, which strict readers
    (pydantic, Rust's serde, the run-record schemas of :mod:`aumann.records`) refuse.

    Raises:
        ConfigError: ``obj`` holds something JSON cannot represent (an arbitrary object).
    """
    try:
        value = plain(obj)
        text = json.dumps(value, indent=indent, allow_nan=False)
        if _SURROGATE_ESCAPE.search(text):
            text = json.dumps(_without_surrogates(value), indent=indent, allow_nan=False)
        return text + "\n"
    except TypeError as exc:
        raise ConfigError(f"cannot write as JSON: {exc}") from exc


def write_json(path: PathLike, obj: Any, *, indent: int | None = 1, within: PathLike | None = None) -> Path:
    """Write ``obj`` as JSON atomically; NaN/inf are written as ``null`` (JSON has neither)."""
    return write_text(path, dumps_json(obj, indent=indent), within=within)


#: deflate level of compressed ``.npz`` files: level 1 writes a 10⁶-agent panel ~2.6× faster than numpy's
#: default (level 6) for ~15 % more bytes (MegaScale-Social's run directory at 10⁶: ~14 CPU-s saved)
NPZ_LEVEL = 1
#: a member whose sample deflates to more than this share of its bytes is stored as it is: float64 results (φ,
#: standard errors, curves) deflate to ~0.92 at ~35 MB/s, seconds of a 10⁶-agent run for 8 % of their bytes
STORE_ABOVE = 0.85
_SAMPLE = 64 * 1024  # bytes of each of the three slices (start, middle, end) a member's choice is made on
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # every member's timestamp (as numpy's savez): the same arrays, the same bytes


def _worth_deflating(arr: np.ndarray) -> bool:
    """Whether deflating ``arr`` pays: small or non-contiguous arrays always are; otherwise three 64 KiB
    slices are deflated and the member is stored when they keep more than :data:`STORE_ABOVE` of their size.
    A function of the bytes only, so the same arrays always give the same archive."""
    import zlib

    if arr.nbytes <= 4 * _SAMPLE or not arr.flags.c_contiguous or arr.dtype.hasobject:
        return True
    raw = memoryview(arr.reshape(-1)).cast("B")
    mid = (arr.nbytes - _SAMPLE) // 2
    sample = b"".join(bytes(raw[o:o + _SAMPLE]) for o in (0, mid, arr.nbytes - _SAMPLE))
    return len(zlib.compress(sample, NPZ_LEVEL)) <= STORE_ABOVE * len(sample)


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray], *, meta: Mapping[str, Any] | None = None,
              compressed: bool = True, within: PathLike | None = None) -> Path:
    """Write ``arrays`` (and a JSON ``meta`` record under :data:`META_KEY`) to one ``.npz`` atomically
    (with ``within``, confined to that directory like :func:`write_bytes`).

    The archive is what ``np.savez_compressed`` (``compressed=False``: ``np.savez``) writes — one
    ``<name>.npy`` member per array — streamed member by member into the temporary file (never held
    whole in memory), deflated at :data:`NPZ_LEVEL` — except members that barely deflate (float64 results:
    :data:`STORE_ABOVE`), which are stored. Members carry a fixed timestamp: the same arrays give the same bytes."""
    import zipfile

    data = dict(arrays)
    if meta is not None:
        data[META_KEY] = np.frombuffer(dumps_json(meta, indent=None).encode("utf-8"), dtype=np.uint8)
    path = Path(path)
    with atomic_path(path, within=within) as tmp:
        with open(tmp, "wb") as raw:
            fh = _HashingWriter(raw)  # the checksum as it is written; zipfile then never seeks back
            with zipfile.ZipFile(fh, "w", allowZip64=True) as zf:
                for key, val in data.items():
                    arr = np.asanyarray(val)
                    info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
                    if compressed and _worth_deflating(arr):
                        info.compress_type = zipfile.ZIP_DEFLATED
                        # the level's attribute: compress_level from Python 3.13, _compresslevel before
                        setattr(info, "compress_level" if hasattr(info, "compress_level") else "_compresslevel",
                                NPZ_LEVEL)
                    with zf.open(info, "w", force_zip64=True) as member:
                        if info.compress_type == zipfile.ZIP_DEFLATED and arr.nbytes >= PARALLEL_DEFLATE_FROM \
                                and getattr(member, "_compressor", None) is not None:
                            member._compressor = _BlockDeflate(NPZ_LEVEL)  # big members: blocks on two threads
                        spilled_arr = spilled(arr)  # a spilled array: its pages dropped behind the write
                        np.lib.format.write_array(_DropBehind(member, arr) if spilled_arr else member, arr,
                                                  allow_pickle=True)
                    if spilled_arr:
                        drop_resident(arr)
            raw.flush()
            os.fsync(raw.fileno())
            hot = _written_big(raw.fileno(), fh.hexdigest())
            if hot is not None:  # for the output journal, which records the file as it is renamed into place
                _DIGESTS[os.path.abspath(tmp)] = hot
    if hot is not None:
        _remember_digest(path, *hot)  # the rename keeps the device, inode, size and mtime
    return path


class _HashingWriter:
    """A write-only stream over the file ``fp`` that takes the SHA-256 of everything written to it, in order.

    It tells its position but cannot seek, so :mod:`zipfile` writes each member's CRC and sizes after its data
    (a data descriptor, as for a pipe) instead of seeking back to patch its local header. The file is then
    exactly the bytes written, in the order written, and its checksum is known when the write ends — never
    read back (at 10⁷ agents the run directory's 9 GB came back from the disk to be hashed)."""

    def __init__(self, fp: Any) -> None:
        self.fp, self.pos, self._h = fp, 0, hashlib.sha256()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.fp.write(view)
        self._h.update(view)
        self.pos += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.pos

    def seek(self, *_: Any) -> int:
        raise _io.UnsupportedOperation("written once, in order (its checksum is taken as it is written)")

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        self.fp.flush()

    def hexdigest(self) -> str:
        return self._h.hexdigest()


#: from this size a written archive's SHA-256 (taken as it is written) is remembered, and its pages then leave the
#: page cache (:func:`_written_big`)
HOT_DIGEST_FROM = 64 * 2**20


def _written_big(fd: int, digest: str) -> tuple[tuple[int, ...], str] | None:
    """(signature, SHA-256) of a big archive just written (open as ``fd``, flushed and synced; ``digest`` taken
    as it was written, :class:`_HashingWriter`), and its pages dropped from the page cache (they are clean).
    ``None`` below :data:`HOT_DIGEST_FROM`.

    Why: a study lists its panel and attributions by checksum (:func:`file_digests`), and nobody reads them again
    until the report. At 10⁷ agents they are 8.5 GB: hashed later they were read back from the disk, and kept in
    the cache they pushed out the spilled panel (:func:`spill`) that the later stages read step by step."""
    st = os.fstat(fd)
    if st.st_size < HOT_DIGEST_FROM:
        return None
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):  # advice only (a file system may not take it)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), digest


#: raw bytes from which a member is deflated in blocks on two threads (:class:`_BlockDeflate`)
PARALLEL_DEFLATE_FROM = 64 * 2**20
_DEFLATE_BLOCK = 2**20  # raw bytes per block
_WINDOW = 32 * 1024  # deflate's window: each block is primed with the last 32 KiB before it
_DEFLATERS: dict[int, Any] = {}


def _deflater() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    pool = _DEFLATERS.get(os.getpid())  # a forked child builds its own (threads do not survive fork)
    if pool is None:
        pool = _DEFLATERS[os.getpid()] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="aumann-deflate")
    return pool


def _deflate_block(block: bytes, primer: bytes, level: int, final: bool) -> bytes:
    import zlib

    c = zlib.compressobj(level, zlib.DEFLATED, -15, zlib.DEF_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY,
                         *((primer,) if primer else ()))
    return c.compress(block) + c.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


class _BlockDeflate:
    """A zipfile compressor (``compress`` / ``flush``) that deflates 1 MiB blocks on two threads, as pigz does:
    each block is a raw deflate stream primed with the 32 KiB of input before it (so matches may reach back
    into it) and ended by a sync flush (byte-aligned, not final), the last one by a final block. Their
    concatenation is one valid deflate stream of the whole input, which any inflater reads. The bytes depend
    on the input only (fixed block size), never on the threads. zlib drops the GIL while it deflates."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.pending = bytearray()
        self.primer = b""
        self.jobs: list[Any] = []

    def _submit(self, block: bytes, final: bool) -> None:
        self.jobs.append(_deflater().submit(_deflate_block, block, self.primer, self.level, final))
        self.primer = (self.primer + block)[-_WINDOW:]  # the 32 KiB before the next block

    def _ready(self, keep: int) -> bytes:
        out = []
        while len(self.jobs) > keep or (self.jobs and self.jobs[0].done()):
            out.append(self.jobs.pop(0).result())
        return b"".join(out)

    def compress(self, data: Any) -> bytes:
        self.pending += data
        if len(self.pending) >= _DEFLATE_BLOCK:
            whole = len(self.pending) // _DEFLATE_BLOCK * _DEFLATE_BLOCK
            view = memoryview(self.pending)
            for o in range(0, whole, _DEFLATE_BLOCK):
                self._submit(bytes(view[o:o + _DEFLATE_BLOCK]), final=False)
            view.release()
            del self.pending[:whole]
        return self._ready(keep=8)  # at most 8 blocks in flight

    def flush(self) -> bytes:
        self._submit(bytes(self.pending), final=True)
        self.pending = bytearray()
        return self._ready(keep=0)


#: largest JSON metadata record an ``.npz`` may carry
MAX_META_BYTES = 16 * 2**20


def memory_bytes() -> int:
    """This machine's physical memory in bytes (2⁴⁰ where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**40


def saved_npz(path: PathLike, *, what: str, error: type[Exception]) -> Path:
    """The ``.npz`` file a ``save(path)`` wrote: ``path`` itself when it exists, else ``path`` + ``.npz`` when that
    exists (``save`` appends ``.npz`` to the whole name — ``run.v2`` → ``run.v2.npz`` — so replacing the last
    suffix instead would read another file, ``run.npz``)."""
    path = as_path(path, what, error=error)
    if not path.exists() and path.suffix != ".npz":
        named = path.with_name(path.name + ".npz")
        if named.exists():
            return named
    return path


def read_npz(path: PathLike, *, error: type[Exception], what: str = "file",
             check: Any = None, within: PathLike | None = None, max_bytes: int | None = None,
             keys: Sequence[str] | None = None, rows: Mapping[str, int] | None = None,
             ) -> tuple[dict[str, np.ndarray], dict[str, Any] | None]:
    """Read an ``.npz`` written by :func:`write_npz` → (arrays, meta or ``None``).

    Nothing is allocated or decompressed before the archive's declarations are checked
    (:mod:`aumann.npz`): its zip directory and each ``.npy`` header (shape × itemsize = the size the zip
    declares, no expansion beyond deflate's, no object dtype), the metadata record (≤ 16 MiB, bounded
    JSON), then ``check(members, meta)`` — the caller's consistency rule over the declared shapes
    (``members``: name → :class:`aumann.npz.Member`), e.g. a panel's ``values`` (T, N, D) against its
    ``steps`` (T,) — and the total against ``max_bytes`` (default: the machine's physical memory).

    Anything that is not a readable ``.npz`` of plain arrays raises ``error`` with a message naming
    ``what``, the path and the problem: missing, a directory, empty, a lone ``.npy`` array, not a zip
    archive (random bytes), truncated or corrupted members, pickled objects, shapes that contradict the
    archive or each other, broken metadata.

    ``keys`` reads only those members; ``rows`` (member → index) keeps one row along a member's first axis,
    streamed (:func:`aumann.npz.load`): e.g. one step of a panel without holding the panel.
    """
    path = as_path(path, what, error=error)
    if path.is_dir():
        raise error(f"{what} {str(path)!r} is a directory, not an .npz file")
    if within is None and not path.is_file():
        raise error(f"no {what} at {str(path)!r}")
    shown = str(path)
    with open_read(path, within=within, what=what, error=error) as fh:
        head = fh.read(8)
        if not head:
            raise error(f"{what} {shown!r} is empty (0 bytes); was it truncated?")
        if head.startswith(b"\x93NUMPY"):
            raise error(f"{what} {shown!r} is a single .npy array, not an .npz archive")
        if not head.startswith(b"PK"):
            raise error(f"{what} {shown!r} is not an .npz archive (no zip signature at its start; got "
                        f"{head[:4]!r}): damaged, or another kind of file")
        fh.seek(0)
        meta_box: list[Any] = [None]

        def checked(members: Any) -> None:
            m = members.get(META_KEY)
            if m is not None:
                if m.dtype != np.uint8 or len(m.shape) != 1:
                    raise error(f"{what} {shown!r} has unreadable metadata (stored as {m.dtype} {m.shape})")
                raw = members.early.get(META_KEY)
                meta = bounded.loads_json(bytes(raw), what=f"the metadata of {what} {shown!r}", error=error,
                                          max_bytes=MAX_META_BYTES)
                if not isinstance(meta, dict):
                    raise error(f"{what} {shown!r} has metadata of type {type(meta).__name__}; expected an object")
                meta_box[0] = meta
            if check is not None:
                check({k: v for k, v in members.items() if k != META_KEY}, meta_box[0])

        meta_member = {META_KEY}

        def early_ok(members: Any) -> None:  # the metadata member is small before it is read
            for k in meta_member & set(members):
                if members[k].nbytes > MAX_META_BYTES:
                    raise error(f"{what} {shown!r} has a {members[k].nbytes:,}-byte metadata record (at most "
                                f"{MAX_META_BYTES:,})")

        data = npz.load(fh, error=error, what=what, path=shown, max_bytes=max_bytes or memory_bytes(),
                        check=checked, first=(META_KEY,), precheck=early_ok, keys=keys, rows=rows)
    data.pop(META_KEY, None)
    return data, meta_box[0]


def write_csv(path: PathLike, table: Any, columns: Sequence[str] | None = None, *,
              within: PathLike | None = None) -> Path:
    """Write a table as CSV atomically, cells as plain text numbers.

    ``table`` is a pandas DataFrame or a sequence of row mappings (``columns`` picks and orders the
    columns; default: the DataFrame's, or the keys of the rows in first-seen order). Numbers are written
    as Python writes them (``repr``: shortest text that reads back exactly, never ``np.float64(...)``);
    ``None``, NaN, ±inf, ``pd.NA`` and ``NaT`` are empty cells; booleans ``True``/``False``; datetimes ISO
    8601 text; anything else its ``str``. Text cells a spreadsheet would execute as a formula (starting
    with ``=``, ``+``, ``-``, ``@``, tab or CR, e.g. an agent id ``=HYPERLINK(...)``) get a leading
    apostrophe (:func:`neutralise_cell`); numbers are never changed (a negative number is not a formula).
    """

    if hasattr(table, "to_dict") and hasattr(table, "columns"):
        cols = [str(c) for c in (columns or list(table.columns))]
        rows: list[Mapping[str, Any]] = [{str(k): v for k, v in r.items()} for r in table.to_dict("records")]
    else:
        rows = list(table)
        cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
    text = csv_text(cols, ([r.get(c) for c in cols] for r in rows))
    return write_text(path, text, within=within)


def time_text(v: Any) -> Any:
    """ISO 8601 text of a numpy datetime64 (``2026-05-25T00:00:00``) or timedelta64 (``3600 seconds``),
    elementwise for arrays (as a list); ``None`` for NaT. Never the nanosecond integer numpy's ``.item()``
    gives."""
    if isinstance(v, np.ndarray):
        return [time_text(x) for x in v.tolist()] if v.dtype.kind not in "mM" else [time_text(x) for x in v]
    if isinstance(v, np.datetime64):
        return None if np.isnat(v) else str(np.datetime_as_string(v))
    if isinstance(v, np.timedelta64):
        if np.isnat(v):
            return None
        unit = np.datetime_data(v.dtype)[0]
        names = {"D": "days", "h": "hours", "m": "minutes", "s": "seconds", "ms": "milliseconds",
                 "us": "microseconds", "ns": "nanoseconds", "W": "weeks", "Y": "years", "M": "months"}
        return f"{int(v.astype(np.int64))} {names.get(unit, unit)}"
    return v


#: characters that make a spreadsheet read a text cell as a formula (OWASP's CSV-injection list)
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _formula(text: str) -> bool:
    return bool(text) and text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.fullmatch(text)


def neutralise_cell(text: str) -> str:
    r"""``text`` safe for a spreadsheet: a text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return gets a leading apostrophe (``'=HYPERLINK(...)``), which spreadsheets show as text and
    never execute; a plain number written as text (``-1.5``, ``+3e2``) stays as it is.
    :func:`read_csv_cell` removes the apostrophe again.

    Text that already starts with apostrophes before such a character (an id ``'=x``) gets one more
    (``''=x``), so it never reads back as the different id ``=x`` (which is written ``'=x``): two ids are never
    written as one cell. Any other text is written as it is.

    >>> neutralise_cell('=HYPERLINK("http://x")'), neutralise_cell("-1.5"), neutralise_cell("agent-7")
    ('\'=HYPERLINK("http://x")', '-1.5', 'agent-7')
    >>> neutralise_cell("'=x"), neutralise_cell("'quoted")
    ("''=x", "'quoted")
    """
    if _formula(text) or (text[:1] == "'" and _formula(text.lstrip("'"))):
        return "'" + text
    return text


def read_csv_cell(text: str) -> str:
    """The inverse of :func:`neutralise_cell` for a cell read back from one of aumann's CSVs."""
    if text[:1] == "'" and _formula(text.lstrip("'")):
        return text[1:]
    return text


def csv_text(columns: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """CSV text: a header of ``columns`` and one line per row of values (:func:`csv_cell` each).

    A row with a carriage return in a cell is written fully quoted (Python's ``csv`` quotes only the
    delimiter, the quote and the line terminator ``\\n``, so a bare CR would split the row for readers
    that take CR as a line end).
    """
    import csv

    buf = _io.StringIO()
    plain_w = csv.writer(buf, lineterminator="\n")
    quoted_w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for cells in ([neutralise_cell(str(c)) for c in columns], *([csv_cell(v) for v in r] for r in rows)):
        (quoted_w if any("\r" in c for c in cells) else plain_w).writerow(cells)
    return buf.getvalue()


def csv_cell(v: Any) -> str:
    """The text of one CSV cell (see :func:`write_csv`); text that a spreadsheet would execute is
    neutralised (:func:`neutralise_cell`); datetimes are ISO 8601 text."""
    if v is None:
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, np.datetime64 | np.timedelta64):  # (np.timedelta64 is an np.integer)
        return time_text(v) or ""
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        return repr(f) if math.isfinite(f) else ""
    if isinstance(v, str):
        return neutralise_cell(v)
    if type(v).__name__ in ("NAType", "NaTType"):
        return ""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return csv_cell(v[()])
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if isinstance(v, np.str_ | bytes):
        return neutralise_cell(str(v))
    return neutralise_cell(json.dumps(plain(v), allow_nan=False))


def record_checksum(obj: Any) -> str:
    """SHA-256 of the canonical JSON of :func:`plain` (``obj``) (sorted keys, no whitespace).

    A JSON record read back from disk gives the same checksum as the record that was written (floats
    print and parse exactly), so a stored checksum detects edited, truncated or incomplete records.
    """
    value = plain(obj)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    if _SURROGATE.search(text):  # as dumps_json writes it, so a record read back gives the same checksum
        text = json.dumps(_without_surrogates(value), sort_keys=True, separators=(",", ":"), allow_nan=False,
                          ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------- names that become paths
_FORBIDDEN_CHARS = '/\\:*?"<>|'
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
MAX_NAME_BYTES = 200


#: bidirectional overrides, embeddings, isolates and marks: a name holding one is listed reordered
_REORDERING = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe_component(name: Any, what: str = "name") -> str:
    """``name`` if it can be used as one file or folder name on every OS, else :class:`UnsafeNameError`.

    The one rule for every name that becomes a path component (topics, scenario names, agent groups,
    context names, file stems), wherever it comes from (TOML, ``counts.json``, the Python API): a
    non-empty string of at most 200 UTF-8 bytes, not ``.`` or ``..``, without path separators (``/``,
    ``\\``), ``:*?"<>|``, control characters (C0, DEL, C1), bidirectional controls (U+202E, ...), leading or
    trailing whitespace, a trailing ``.``, or a Windows device name (``con``, ``nul``, ``com1``, …). So nothing a
    name holds can lead outside the folder it is joined to, or be listed as another name.

    >>> safe_component("trump-tariffs", "topic")
    'trump-tariffs'
    """
    if not isinstance(name, str):
        raise UnsafeNameError(f"{what} must be a string; got {type(name).__name__} {name!r}")
    shown = repr(name) if len(name) <= 80 else repr(name[:77] + "...")
    why = None
    if not name:
        why = "it is empty"
    elif name in (".", ".."):
        why = "it names a folder itself, not an entry in it"
    elif any(c in _FORBIDDEN_CHARS for c in name):
        why = f"it contains {next(c for c in name if c in _FORBIDDEN_CHARS)!r} (a path separator or a character " \
              "some file systems refuse)"
    elif any(ord(c) < 32 or 127 <= ord(c) <= 159 for c in name):
        why = "it contains a control character"
    elif (bidi := _REORDERING.search(name)) is not None:
        why = (f"it contains the bidirectional control U+{ord(bidi.group(0)):04X}, which lists the name reordered "
               "(with U+202E, 'a' + U+202E + 'exe.txt' is shown as 'atxt.exe')")
    elif _SURROGATE.search(name):
        why = "it contains a lone surrogate (text that is not UTF-8), which no file system name can hold"
    elif name != name.strip():
        why = "it starts or ends with whitespace"
    elif name.endswith("."):
        why = "it ends with '.'"
    elif name.split(".")[0].lower() in _RESERVED:
        why = "it is a reserved device name on Windows"
    elif len(name.encode("utf-8")) > MAX_NAME_BYTES:
        why = f"it is longer than {MAX_NAME_BYTES} bytes"
    if why is not None:
        raise UnsafeNameError(f"{what} {shown} cannot be used as a file or folder name: {why}")
    return name


def child_path(base: PathLike, *names: Any, what: str = "name") -> Path:
    """``base / names[0] / names[1] ...`` with every name checked by :func:`safe_component`."""
    out = Path(base)
    for n in names:
        out = out / safe_component(n, what)
    return out


#: the folders :func:`ensure_output_dir` created in this process (each the topmost one it had to make), for
#: :func:`remove_unused_output_dirs`
_CREATED: list[Path] = []


def ensure_output_dir(path: PathLike, what: str = "output directory") -> Path:
    """Create ``path`` (with parents) and check that files can be written in it — before any work starts.

    The topmost folder it had to make is remembered: a command that then fails removes it again when nothing was
    written under it (:func:`remove_unused_output_dirs`).

    Raises:
        OutputError: ``path`` (or a parent) is an existing file, or the folder cannot be created or written.
    """
    p = as_path(path, what, error=OutputError)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{what} {str(p)!r} is an existing file, not a directory")
    if p.is_symlink() and not p.exists():
        raise OutputError(f"{what} {str(p)!r} is a symbolic link to {os.readlink(p)!r}, which does not exist: "
                          "create that directory, or give another path")
    top = None  # the topmost folder on the way that is not there yet (a link, even a dangling one, is there)
    for folder in (p, *p.absolute().parents):
        if folder.exists() or folder.is_symlink():
            break
        top = folder
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {what} {str(p)!r}: {_os_reason(exc, p)}") from exc
    if top is not None:
        _CREATED.append(top.absolute())
    try:
        fd, probe = tempfile.mkstemp(dir=p, prefix=".aumann-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what} {str(p)!r} is not writable: {exc.strerror or exc}") from exc
    return p


def forget_created_output_dirs() -> None:
    """Forget the folders :func:`ensure_output_dir` created so far (a command that succeeded keeps them; the next
    command in the same process starts with none)."""
    _CREATED.clear()


def remove_unused_output_dirs() -> list[Path]:
    """Remove each folder :func:`ensure_output_dir` created in this process (since the last
    :func:`forget_created_output_dirs`) that holds no file — only empty folders, however deep (a study's ``runs/``,
    ``panels/``, ...) — and forget them all; the folders removed. A command that failed after making its ``--out``
    (an input file missing, a bad value found later) leaves no empty folder behind. A folder that was there before
    the command is never among them (only what was made is remembered), nor one holding any file or link (kept
    whole), nor one that cannot be removed (kept). Called by :func:`aumann.cli.main` when a command fails, after it
    has let go of its output locks (which removes their lock files)."""
    removed = []
    for top in reversed(_CREATED):
        try:
            if top.is_symlink() or not top.is_dir():
                continue
            tree = list(os.walk(top, topdown=False))  # (links are not followed: one is an entry that is kept)
            if any(files or any(os.path.islink(os.path.join(d, n)) for n in dirs) for d, dirs, files in tree):
                continue
            for d, _, _ in tree:
                os.rmdir(d)
        except OSError:
            continue
        removed.append(top)
    _CREATED.clear()
    return removed


def file_digests(within: PathLike, names: Sequence[str]) -> dict[str, str]:
    """``{name: SHA-256}`` of the files ``names`` (paths relative to the run directory ``within``).

    Stored in a finished record, so that :func:`check_digests` can later prove that every file a resume
    reads is the one that was written (not truncated, edited or swapped for another valid file).

    A file this process already hashed here, wrote with :func:`write_npz` from :data:`HOT_DIGEST_FROM`
    bytes, or wrote inside :func:`journaled` (which hashed it for the journal), is not read again while it is the
    same file: same device, inode, size, modification and status-change time (an atomic rewrite is a new inode; an
    edit in place, even one that puts the modification time back as ``cp -p`` or ``touch -r`` do, sets a new
    status-change time, which no program can set back). A run's record is written twice (after its required stages
    and after the optional ones) and lists its panel and attributions both times: 6 GB at 10⁷ agents, read back
    from disk.
    :func:`check_digests` reads unless asked to ``reuse`` these."""
    out = {}
    for n in names:
        path = Path(within) / n
        sig = _signature(path)
        key = os.path.abspath(path)
        hit = _DIGESTS.get(key)
        if sig is not None and hit is not None and hit[0] == sig:
            confine(path, within)
            out[str(n)] = hit[1]
            continue
        out[str(n)] = digest = sha256_file(path, within=within)
        if sig is not None and _signature(path) == sig:  # unchanged while it was read
            _DIGESTS[key] = (sig, digest)
    return out


def check_digests(within: PathLike, digests: Any, *, reuse: bool = False) -> list[tuple[str, str]]:
    """``[(name, why)]`` for each file of ``digests`` (as :func:`file_digests` wrote them) that is missing,
    unreadable, leads outside ``within`` or no longer matches; ``[]`` when every file verifies.

    Every file is read, unless ``reuse``: then a file this process hashed or wrote (:func:`file_digests`) and
    that is still the same file (device, inode, size, modification and status-change time) is checked against
    that digest. The page of a run is built by the process that has just written it (9 GB to read back at 10⁷
    agents); a copy, a swap or an edit of a file changes its signature, so it is read. Resume (a new process)
    always reads."""
    if not isinstance(digests, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in digests.items()):
        return [("(checksums)", "the stored checksums are malformed")]
    bad: list[tuple[str, str]] = []
    for name, want in digests.items():
        p = Path(within) / name
        try:
            got = file_digests(within, [name])[name] if reuse else sha256_file(p, within=within)
        except PathEscapeError as exc:
            bad.append((name, str(exc)))
            continue
        except OutputError as exc:
            bad.append((name, "missing or unreadable" if not p.exists() else str(exc)))
            continue
        if got != want:
            bad.append((name, "does not match its checksum (truncated, edited or replaced)"))
    return bad


# ---------------------------------------------------------------------------------------------- spilled arrays
#: what :func:`spill` writes at a time (a 10⁷-agent panel is 7 GB; one write of it would need a second copy)
SPILL_CHUNK = 64 * 2**20

_SPILLED: dict[int, Any] = {}  # id → weak reference of each live spilled array (arrays are not hashable)


def spill(arr: np.ndarray, directory: PathLike | None = None) -> np.ndarray:
    """A read-only copy of ``arr`` (same dtype, shape and bytes) backed by an unnamed temporary file in
    ``directory`` (default: the temporary directory, ``$TMPDIR``), mapped into memory.

    Its pages are resident only while they are read; :func:`drop_spilled` hands them back to the page cache
    (they are re-read from it, or from the file, on the next access). A large study spills what it keeps
    for later stages but rarely reads -- a 10⁶-agent run's panel (720 MB) and its φ over every step
    (240 MB) -- so that the resident set holds only what the current stage works on. The file has no name
    and goes away with the last reference to the array."""
    import weakref

    src = np.ascontiguousarray(arr)
    with tempfile.TemporaryFile(dir=None if directory is None else str(directory)) as fh:
        raw = memoryview(src.reshape(-1)).cast("B") if src.size else memoryview(b"")
        for start in range(0, raw.nbytes, SPILL_CHUNK):
            fh.write(raw[start:start + SPILL_CHUNK])
        fh.flush()
        if src.nbytes == 0:
            return src.copy()
        out = np.memmap(fh, dtype=src.dtype, shape=src.shape, mode="r")  # the mapping outlives the descriptor
    key = id(out)
    _SPILLED[key] = weakref.ref(out, lambda _ref, key=key: _SPILLED.pop(key, None))
    return out


def _mapping_of(arr: Any) -> Any:
    """The ``mmap`` behind a spilled array or a view of one (``None`` for anything else)."""
    while arr is not None:
        mm = getattr(arr, "_mmap", None)
        if mm is not None:
            return mm
        arr = getattr(arr, "base", None)
    return None


def spilled(arr: Any) -> bool:
    """Whether ``arr`` is a spilled array (:func:`spill`) or a view of one."""
    return _mapping_of(arr) is not None


def drop_resident(arr: Any, upto: int | None = None) -> None:
    """Hand the resident pages of a spilled array (:func:`spill`) back to the page cache: all of them, or
    those of its first ``upto`` bytes. Nothing happens for an array that is not spilled."""
    import mmap

    mm = _mapping_of(arr)
    if mm is None or mm.closed or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    size = len(mm) if upto is None else min(len(mm), (int(upto) // mmap.PAGESIZE) * mmap.PAGESIZE)
    if size > 0:
        mm.madvise(mmap.MADV_DONTNEED, 0, size)


def drop_spilled() -> None:
    """:func:`drop_resident` for every live spilled array (between the stages of a large study)."""
    for ref in list(_SPILLED.values()):
        arr = ref()
        if arr is not None:
            drop_resident(arr)


class _DropBehind:
    """A writable stream that forwards to ``fp`` and drops the pages of the spilled array ``arr`` already
    written (``np.lib.format.write_array`` streams 16 MiB chunks in order), so that writing a spilled array
    never makes all of it resident at once. The bytes written are those of the plain write."""

    def __init__(self, fp: Any, arr: np.ndarray) -> None:
        self.fp, self.arr, self.done, self.dropped = fp, arr, 0, 0

    def write(self, data: Any) -> int | None:
        n = self.fp.write(data)
        self.done += memoryview(data).nbytes
        if self.done - self.dropped >= SPILL_CHUNK:
            drop_resident(self.arr, self.done)
            self.dropped = self.done
        return n


__all__ = [
    "BOM",
    "FORMULA_TRIGGERS",
    "MAX_NAME_BYTES",
    "META_KEY",
    "OUTPUTS_COMPLETE",
    "OUTPUTS_JOURNAL",
    "OUTPUTS_LOCK",
    "OutputCheck",
    "RecordedOutputs",
    "adopt_outputs",
    "atomic_path",
    "check_digests",
    "check_outputs",
    "check_stale",
    "child_path",
    "confine",
    "copy_without_bom",
    "csv_cell",
    "csv_text",
    "drop_resident",
    "drop_spilled",
    "dumps_json",
    "ensure_output_dir",
    "file_digests",
    "forget_created_output_dirs",
    "journal_output",
    "journal_outputs",
    "journaled",
    "lock_output_dir",
    "memory_bytes",
    "neutralise_cell",
    "open_read",
    "output_check",
    "output_lock",
    "partial_write",
    "plain",
    "read_csv_cell",
    "read_json",
    "read_npz",
    "record_checksum",
    "recorded_outputs",
    "release_output_locks",
    "remove_stale",
    "remove_unused_output_dirs",
    "safe_component",
    "settle_journal",
    "sha256_bytes",
    "sha256_file",
    "spill",
    "spilled",
    "starts_with_bom",
    "time_text",
    "unlock_output_dir",
    "write_bytes",
    "write_csv",
    "write_json",
    "write_npz",
    "write_text",
]
