"""Files: atomic writes, ``.npz`` + JSON metadata, JSON without NaN, checksums.

Every file aumann writes goes through this module, so a crash or a full disk never leaves a
half-written result where a finished one is expected: data goes to a temporary file in the target's
own directory (same filesystem), is flushed and fsynced, and is renamed over the target
(:func:`os.replace` is atomic on POSIX and Windows).

* :func:`atomic_path`   a temporary path for writers that insist on a file name (pandas, matplotlib,
  DuckDB), renamed into place when the block exits without an exception;
* :func:`write_bytes`, :func:`write_text`, :func:`write_json` (NaN/inf → ``null``: JSON has neither),
  :func:`write_npz` (arrays plus a JSON metadata record);
* :func:`read_npz` the reverse of :func:`write_npz`;
* :func:`write_csv` tables of plain numbers (Python floats written so they read back exactly; a missing
  or non-finite value is an empty cell);
* :func:`sha256_bytes`, :func:`sha256_file`, :func:`record_checksum` checksums (for resume checks);
* :func:`safe_component` / :func:`child_path` the one rule for names that become path components
  (topics, scenario names, groups, file stems): nothing a name holds can lead outside its folder;
* :func:`ensure_output_dir` an output folder checked before any work starts (not a file, writable).

A write that fails for a reason of the file system (no permission, an existing file where a folder is
needed, a full disk) raises :class:`~aumann.errors.OutputError` naming the path.
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from aumann.checks import as_path
from aumann.errors import ConfigError, OutputError, UnsafeNameError

PathLike = str | os.PathLike[str]

#: key of the JSON metadata record inside an ``.npz`` written by :func:`write_npz`
META_KEY = "__meta__"


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: files get the permissions a plain ``open(path, "w")`` would give (``mkstemp`` alone makes them 0600)
_FILE_MODE = 0o666 & ~_read_umask()


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block succeeds.

    The parent directory is created. On an exception the temporary file is removed and ``path`` is
    left as it was.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "table.csv"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("a,b\\n1,2\\n")
        >>> target.read_text()
        'a,b\\n1,2\\n'
    """
    path = as_path(path, "output file", error=OutputError)
    if path.is_dir():
        raise OutputError(f"cannot write {str(path)!r}: it is an existing directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {_os_reason(exc, path.parent)}") from exc
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if tmp.exists():
            os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OutputError):
            raise
        raise OutputError(f"cannot write {str(path)!r}: {_os_reason(exc, path)}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _os_reason(exc: OSError, path: Path) -> str:
    """A short reason for an OSError while writing under ``path`` (names a file that blocks a folder)."""
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{str(parent)!r} is an existing file, not a directory"
            break
    return f"{exc.strerror or type(exc).__name__}" + (f" ({exc.filename})" if exc.filename else "")


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (flushed and fsynced before the rename).

    Raises:
        OutputError: the file cannot be written (the message names it and why).
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def plain(obj: Any) -> Any:
    """A JSON-ready copy of ``obj``: numpy scalars/arrays → Python numbers/lists, NaN/inf → ``None``,
    paths → strings, tuples/sets → lists, mapping keys → strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str | int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return plain(obj.item())
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "model_dump"):
        return plain(obj.model_dump(mode="json"))
    return obj


def dumps_json(obj: Any, *, indent: int | None = 1) -> str:
    """JSON text of :func:`plain` (``obj``): never contains ``NaN`` or ``Infinity``.

    Raises:
        ConfigError: ``obj`` holds something JSON cannot represent (an arbitrary object).
    """
    try:
        return json.dumps(plain(obj), indent=indent, allow_nan=False) + "\n"
    except TypeError as exc:
        raise ConfigError(f"cannot write as JSON: {exc}") from exc


def write_json(path: PathLike, obj: Any, *, indent: int | None = 1) -> Path:
    """Write ``obj`` as JSON atomically; NaN/inf are written as ``null`` (JSON has neither)."""
    return write_text(path, dumps_json(obj, indent=indent))


#: deflate level of compressed ``.npz`` files: level 1 writes a 10⁶-agent panel ~2.6× faster than numpy's
#: default (level 6) for ~15 % more bytes (MegaScale-Social's run directory at 10⁶: ~14 CPU-s saved)
NPZ_LEVEL = 1


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray], *, meta: Mapping[str, Any] | None = None,
              compressed: bool = True) -> Path:
    """Write ``arrays`` (and a JSON ``meta`` record under :data:`META_KEY`) to one ``.npz`` atomically.

    The archive is what ``np.savez_compressed`` (``compressed=False``: ``np.savez``) writes — one
    ``<name>.npy`` member per array — streamed member by member into the temporary file (never held
    whole in memory), deflated at :data:`NPZ_LEVEL`."""
    import zipfile

    data = dict(arrays)
    if meta is not None:
        data[META_KEY] = np.frombuffer(dumps_json(meta, indent=None).encode("utf-8"), dtype=np.uint8)
    path = Path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED,
                                 compresslevel=NPZ_LEVEL if compressed else None, allowZip64=True) as zf:
                for key, val in data.items():
                    with zf.open(f"{key}.npy", "w", force_zip64=True) as member:
                        np.lib.format.write_array(member, np.asanyarray(val), allow_pickle=True)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def read_npz(path: PathLike, *, error: type[Exception], what: str = "file") -> tuple[dict[str, np.ndarray],
                                                                                      dict[str, Any] | None]:
    """Read an ``.npz`` written by :func:`write_npz` → (arrays, meta or ``None``).

    Anything that is not a readable ``.npz`` of plain arrays raises ``error`` with a message naming
    ``what``, the path and the problem: missing, a directory, empty, a lone ``.npy`` array, not a zip
    archive (random bytes), truncated or corrupted members, pickled objects, broken metadata.
    """
    import zipfile
    import zlib

    path = as_path(path, what, error=error)
    if path.is_dir():
        raise error(f"{what} {str(path)!r} is a directory, not an .npz file")
    if not path.is_file():
        raise error(f"no {what} at {str(path)!r}")
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError as exc:
        raise error(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from exc
    if not head:
        raise error(f"{what} {str(path)!r} is empty (0 bytes); was it truncated?")
    if head.startswith(b"\x93NUMPY"):
        raise error(f"{what} {str(path)!r} is a single .npy array, not an .npz archive")
    if not head.startswith(b"PK"):
        raise error(f"{what} {str(path)!r} is not an .npz archive (no zip signature at its start; got "
                    f"{head[:4]!r}): damaged, or another kind of file")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except ValueError as exc:
        if "pickle" in str(exc):
            raise error(f"{what} {str(path)!r} holds pickled Python objects (object arrays), which aumann never "
                        "writes and does not load") from exc
        raise error(f"{what} {str(path)!r} is damaged ({type(exc).__name__}: {str(exc)[:120]})") from exc
    except (OSError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error,
            UnicodeDecodeError, NotImplementedError) as exc:
        raise error(f"{what} {str(path)!r} is damaged or truncated ({type(exc).__name__}: "
                    f"{str(exc)[:120]})") from exc
    meta = None
    if META_KEY in data:
        raw = data.pop(META_KEY)
        try:
            if raw.dtype != np.uint8 or raw.ndim != 1:
                raise ValueError(f"metadata stored as {raw.dtype} {raw.shape}")
            meta = json.loads(bytes(raw).decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise error(f"{what} {str(path)!r} has unreadable metadata ({type(exc).__name__})") from exc
        if not isinstance(meta, dict):
            raise error(f"{what} {str(path)!r} has metadata of type {type(meta).__name__}; expected an object")
    return data, meta


def write_csv(path: PathLike, table: Any, columns: Sequence[str] | None = None) -> Path:
    """Write a table as CSV atomically, cells as plain text numbers.

    ``table`` is a pandas DataFrame or a sequence of row mappings (``columns`` picks and orders the
    columns; default: the DataFrame's, or the keys of the rows in first-seen order). Numbers are written
    as Python writes them (``repr``: shortest text that reads back exactly, never ``np.float64(...)``);
    ``None``, NaN, ±inf, ``pd.NA`` and ``NaT`` are empty cells; booleans ``True``/``False``; anything else
    its ``str``.
    """
    import csv

    if hasattr(table, "to_dict") and hasattr(table, "columns"):
        cols = [str(c) for c in (columns or list(table.columns))]
        rows: list[Mapping[str, Any]] = [{str(k): v for k, v in r.items()} for r in table.to_dict("records")]
    else:
        rows = list(table)
        cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([csv_cell(r.get(c)) for c in cols])
    return write_text(path, buf.getvalue())


def csv_cell(v: Any) -> str:
    """The text of one CSV cell (see :func:`write_csv`)."""
    if v is None:
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        return repr(f) if math.isfinite(f) else ""
    if isinstance(v, str):
        return v
    if type(v).__name__ in ("NAType", "NaTType"):
        return ""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return csv_cell(v.item())
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return json.dumps(plain(v), allow_nan=False)


def record_checksum(obj: Any) -> str:
    """SHA-256 of the canonical JSON of :func:`plain` (``obj``) (sorted keys, no whitespace).

    A JSON record read back from disk gives the same checksum as the record that was written (floats
    print and parse exactly), so a stored checksum detects edited, truncated or incomplete records.
    """
    text = json.dumps(plain(obj), sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------- names that become paths
_FORBIDDEN_CHARS = '/\\:*?"<>|'
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
MAX_NAME_BYTES = 200


def safe_component(name: Any, what: str = "name") -> str:
    """``name`` if it can be used as one file or folder name on every OS, else :class:`UnsafeNameError`.

    The one rule for every name that becomes a path component (topics, scenario names, agent groups,
    context names, file stems), wherever it comes from (TOML, ``counts.json``, the Python API): a
    non-empty string of at most 200 UTF-8 bytes, not ``.`` or ``..``, without path separators (``/``,
    ``\\``), ``:*?"<>|``, control characters, leading or trailing whitespace, a trailing ``.``, or a
    Windows device name (``con``, ``nul``, ``com1``, …). So nothing a name holds can lead outside the
    folder it is joined to.

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
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        why = "it contains a control character"
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


def ensure_output_dir(path: PathLike, what: str = "output directory") -> Path:
    """Create ``path`` (with parents) and check that files can be written in it — before any work starts.

    Raises:
        OutputError: ``path`` (or a parent) is an existing file, or the folder cannot be created or written.
    """
    p = as_path(path, what, error=OutputError)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{what} {str(p)!r} is an existing file, not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {what} {str(p)!r}: {_os_reason(exc, p)}") from exc
    try:
        fd, probe = tempfile.mkstemp(dir=p, prefix=".aumann-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what} {str(p)!r} is not writable: {exc.strerror or exc}") from exc
    return p


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike, *, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of the file at ``path`` (read in chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


__all__ = [
    "MAX_NAME_BYTES",
    "META_KEY",
    "atomic_path",
    "child_path",
    "csv_cell",
    "dumps_json",
    "ensure_output_dir",
    "plain",
    "read_npz",
    "record_checksum",
    "safe_component",
    "sha256_bytes",
    "sha256_file",
    "write_bytes",
    "write_csv",
    "write_json",
    "write_npz",
    "write_text",
]
