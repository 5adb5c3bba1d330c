"""Reading ``.npz`` archives that come from outside: everything declared is checked before anything is
allocated or decompressed.

``np.load`` trusts an archive: a member's ``.npy`` header may promise any shape, and a deflated member
may expand to anything its (unchecked) zip entry claims. A 0.5 MiB archive of deflated zeros is half a
gigabyte once read, and a header claiming (10⁶, 10⁶, 10) float64 asks numpy for 80 TB. Here the
archive is read in two passes:

1. **declared**: the zip's central directory and each member's ``.npy`` header (a few hundred bytes
   each) → :class:`Member` (name, shape, dtype, bytes). Refused as *damaged*: more than
   :data:`MAX_MEMBERS` members, a compression method other than stored/deflate, encryption, a member
   that is not ``.npy``, a header that does not parse, a dtype holding Python objects (pickles), a
   header whose shape × itemsize is not the size the zip entry declares, and an entry that claims to
   expand further than deflate can (:data:`DEFLATE_MAX_RATIO` : 1 — no honest file does);
2. **checked**: the caller's ``check(members)`` (e.g. a panel's ``values`` is (T, N, D), its
   ``agent_ids`` (N,), its ``steps`` (T,)) and the total against ``max_bytes``; only then is each member
   decompressed, into exactly the bytes its header promised (the zip reader stops there and checks
   the CRC).

Every failure raises the caller's ``error`` naming ``what`` and the path.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

#: most members an archive may hold (panels and attributions have a handful; groups/context add a few)
MAX_MEMBERS = 4096
#: deflate's largest possible expansion is ~1032 : 1 (258-byte matches coded in 2 bits); more is a lie
DEFLATE_MAX_RATIO = 1032
#: largest ``.npy`` header read (numpy's own default limit)
MAX_HEADER_BYTES = 10_000
#: dtype kinds an archive may hold: bool, integers, floats, complex, text, bytes, datetimes
_KINDS = set("biufcUSMm")


@dataclass(frozen=True)
class Member:
    """One array of an archive as declared: its key (file name without ``.npy``), shape, dtype and bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    info: zipfile.ZipInfo
    fortran: bool = False


def _damaged(error: type[Exception], what: str, path: str, why: str) -> Exception:
    return error(f"{what} {path!r} is damaged: {why}")


def members(fh: IO[bytes], *, error: type[Exception], what: str, path: str) -> dict[str, Member]:
    """The arrays an open ``.npz`` file declares (zip directory + ``.npy`` headers; nothing else is read)."""
    return _members(fh, error=error, what=what, path=path)[1]


def _members(fh: IO[bytes], *, error: type[Exception], what: str, path: str
             ) -> tuple[zipfile.ZipFile, dict[str, Member]]:
    try:
        zf = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise _damaged(error, what, path, f"not a readable zip archive ({type(exc).__name__}: "
                                          f"{str(exc)[:100]})") from exc
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _damaged(error, what, path, f"it lists {len(infos):,} members (at most {MAX_MEMBERS:,} expected)")
    out: dict[str, Member] = {}
    for info in infos:
        name = info.filename
        if not name.endswith(".npy"):
            raise _damaged(error, what, path, f"member {name[:80]!r} is not an .npy array")
        key = name[:-4]
        if key in out:
            raise _damaged(error, what, path, f"member {name[:80]!r} appears twice")
        if info.flag_bits & 0x1:
            raise _damaged(error, what, path, f"member {name[:80]!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _damaged(error, what, path, f"member {name[:80]!r} uses compression method {info.compress_type} "
                                              "(numpy writes stored or deflate)")
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise _damaged(error, what, path, f"member {name[:80]!r} is stored with {info.compress_size:,} bytes but "
                                              f"declares {info.file_size:,}")
        if info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 1024:
            raise _damaged(error, what, path, f"member {name[:80]!r} claims to expand from {info.compress_size:,} "
                                              f"to {info.file_size:,} bytes, more than deflate can")
        out[key] = _header(zf, info, key, error=error, what=what, path=path)
    return zf, out


def _header(zf: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, *, error: type[Exception], what: str,
            path: str) -> Member:
    fmt = np.lib.format
    shown = info.filename[:80]
    try:
        with zf.open(info) as m:
            version = fmt.read_magic(m)
            if version == (1, 0):
                shape, fortran, dtype = fmt.read_array_header_1_0(m, max_header_size=MAX_HEADER_BYTES)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = fmt.read_array_header_2_0(m, max_header_size=MAX_HEADER_BYTES)
            else:
                raise ValueError(f"unknown .npy version {version}")
            offset = m.tell()
    except Exception as exc:  # numpy's header parser raises whatever its tokenizer does (TokenError, ...)
        raise _damaged(error, what, path, f"member {shown!r} has no readable .npy header ({type(exc).__name__}: "
                                          f"{str(exc)[:100]})") from exc
    if dtype.hasobject:
        raise error(f"{what} {path!r} holds pickled Python objects (object arrays), which aumann never writes and "
                    "does not load")
    if dtype.kind not in _KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise _damaged(error, what, path, f"member {shown!r} has dtype {str(dtype)[:60]}, not a plain array")
    if not isinstance(shape, tuple) or any(not isinstance(s, int) or s < 0 for s in shape):
        raise _damaged(error, what, path, f"member {shown!r} declares shape {str(shape)[:80]}")
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes != info.file_size:
        raise _damaged(error, what, path, f"member {shown!r} promises shape {shape} of {dtype} ({nbytes:,} bytes) "
                                          f"but the archive holds {max(0, info.file_size - offset):,}")
    return Member(key, tuple(int(s) for s in shape), dtype, nbytes, info, bool(fortran))


def load(fh: IO[bytes], *, error: type[Exception], what: str, path: str, max_bytes: int,
         check: Callable[[Mapping[str, Member]], None] | None = None,
         first: tuple[str, ...] = (), precheck: Callable[[Mapping[str, Member]], None] | None = None,
         keys: Collection[str] | None = None, rows: Mapping[str, int] | None = None,
         ) -> dict[str, np.ndarray]:
    """Every array of an open ``.npz`` file, after :func:`members`, ``check`` and the byte budget.

    ``first`` names members read (and handed to ``check`` through the returned mapping's order) before
    the check runs — small ones such as JSON metadata that the check needs; ``precheck(members)`` runs
    before they are read (e.g. to bound their size). ``keys``: read only these members (besides ``first``;
    a missing one is simply absent). ``rows``: member → index along its first axis: only that row is kept
    (the member is streamed through, never held whole: one step of a (T, N, D) panel costs N · D, not T · N · D).
    """
    zf, declared = _members(fh, error=error, what=what, path=path)
    total = sum(m.nbytes for m in declared.values())
    if total > max_bytes:
        raise error(f"{what} {path!r} declares {total / 2**30:.3g} GiB of arrays, over the {max_bytes / 2**30:.3g} "
                    f"GiB this reader allows (damaged, or too large for this machine)")
    if precheck is not None:
        precheck(declared)
    early = {k: _read(zf, declared[k], error=error, what=what, path=path) for k in first if k in declared}
    if check is not None:
        check(_Declared(declared, early))
    out = dict(early)
    rows = dict(rows or {})
    for key, m in declared.items():
        if key in out or (keys is not None and key not in keys):
            continue
        if key in rows:
            out[key] = _read_row(zf, m, rows[key], error=error, what=what, path=path)
        else:
            out[key] = _read(zf, m, error=error, what=what, path=path)
    return {k: out[k] for k in declared if k in out}


_CHUNK = 16 * 2**20  # bytes decompressed at a time while streaming to a row


def _read_row(zf: zipfile.ZipFile, m: Member, index: int, *, error: type[Exception], what: str, path: str
              ) -> np.ndarray:
    """Row ``index`` (along the first axis) of a C-ordered member, streamed (a Fortran-ordered one is read whole)."""
    if not m.shape or not 0 <= index < m.shape[0]:
        raise error(f"{what} {path!r}: member {m.info.filename[:80]!r} of shape {m.shape} has no row {index}")
    if m.fortran:
        return np.ascontiguousarray(_read(zf, m, error=error, what=what, path=path)[index])
    row = m.nbytes // m.shape[0]
    try:
        with zf.open(m.info) as fh:
            todo = m.info.file_size - m.nbytes + index * row  # the .npy header, then the rows before
            while todo > 0:
                got = len(fh.read(min(todo, _CHUNK)))
                if not got:
                    raise EOFError("the member ends early")
                todo -= got
            buf = fh.read(row)
            if len(buf) != row:
                raise EOFError("the member ends early")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, RuntimeError, NotImplementedError) as exc:
        raise error(f"{what} {path!r} is damaged or truncated ({type(exc).__name__}: {str(exc)[:120]})") from exc
    return np.frombuffer(buf, dtype=m.dtype).reshape(m.shape[1:]).copy()


class _Declared(dict):
    """The members as declared, with the arrays read early in ``.early``."""

    def __init__(self, declared: Mapping[str, Member], early: Mapping[str, np.ndarray]) -> None:
        super().__init__(declared)
        self.early = dict(early)


def _read(zf: zipfile.ZipFile, m: Member, *, error: type[Exception], what: str, path: str) -> np.ndarray:
    try:
        with zf.open(m.info) as fh:
            arr = np.lib.format.read_array(fh, allow_pickle=False, max_header_size=MAX_HEADER_BYTES)
            if fh.read(1):
                raise ValueError("bytes after the array")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, UnicodeDecodeError, RuntimeError,
            NotImplementedError, KeyError, TypeError) as exc:
        raise error(f"{what} {path!r} is damaged or truncated ({type(exc).__name__}: {str(exc)[:120]})") from exc
    if arr.shape != m.shape or arr.dtype != m.dtype:
        raise _damaged(error, what, path, f"member {m.info.filename[:80]!r} does not match its header")
    return arr


def describe(members_: Mapping[str, Any]) -> str:
    """``name (shape dtype)`` of each declared member, for messages."""
    return ", ".join(f"{k} {m.shape} {m.dtype}" for k, m in list(members_.items())[:8])


__all__ = ["DEFLATE_MAX_RATIO", "MAX_HEADER_BYTES", "MAX_MEMBERS", "Member", "describe", "load", "members"]
