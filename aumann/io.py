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
* :func:`sha256_bytes`, :func:`sha256_file` checksums (for resume checks).
"""

from __future__ import annotations

import hashlib
import io as _io
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if tmp.exists():
            os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (flushed and fsynced before the rename)."""
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
    """JSON text of :func:`plain` (``obj``): never contains ``NaN`` or ``Infinity``."""
    return json.dumps(plain(obj), indent=indent, allow_nan=False) + "\n"


def write_json(path: PathLike, obj: Any, *, indent: int | None = 1) -> Path:
    """Write ``obj`` as JSON atomically; NaN/inf are written as ``null`` (JSON has neither)."""
    return write_text(path, dumps_json(obj, indent=indent))


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray], *, meta: Mapping[str, Any] | None = None,
              compressed: bool = True) -> Path:
    """Write ``arrays`` (and a JSON ``meta`` record under :data:`META_KEY`) to one ``.npz`` atomically."""
    data = dict(arrays)
    if meta is not None:
        data[META_KEY] = np.frombuffer(dumps_json(meta, indent=None).encode("utf-8"), dtype=np.uint8)
    buf = _io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **data)
    return write_bytes(path, buf.getvalue())


def read_npz(path: PathLike, *, error: type[Exception], what: str = "file") -> tuple[dict[str, np.ndarray],
                                                                                      dict[str, Any] | None]:
    """Read an ``.npz`` written by :func:`write_npz` → (arrays, meta or ``None``).

    Anything that is not a readable ``.npz`` of plain arrays (missing, truncated, not a zip, pickled
    objects, broken metadata) raises ``error`` with a message naming ``what`` and the path.
    """
    import zipfile

    path = Path(path)
    if not path.is_file():
        raise error(f"no {what} at {str(path)!r}")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise error(f"{what} {str(path)!r} is damaged or not an .npz archive ({type(exc).__name__}: "
                    f"{str(exc)[:120]})") from exc
    meta = None
    if META_KEY in data:
        try:
            meta = json.loads(bytes(data.pop(META_KEY)).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise error(f"{what} {str(path)!r} has unreadable metadata ({type(exc).__name__})") from exc
        if not isinstance(meta, dict):
            raise error(f"{what} {str(path)!r} has metadata of type {type(meta).__name__}; expected an object")
    return data, meta


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
    "META_KEY",
    "atomic_path",
    "dumps_json",
    "plain",
    "read_npz",
    "sha256_bytes",
    "sha256_file",
    "write_bytes",
    "write_json",
    "write_npz",
    "write_text",
]
