"""Hand-made ``.npz`` archives that lie: headers promising more than they hold, zip entries that claim
impossible expansion, metadata too deep or too large. Shared by the regression and fuzz tests."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np

META = "__meta__"


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def meta_bytes(obj: object) -> bytes:
    return npy(np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8))


def panel_meta(d: int) -> dict:
    return {"format": "aumann.panel/1", "features": [f"f{i}" for i in range(d)], "meta": {}}


def archive(path: Path, members: dict[str, bytes], *, method: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in members.items():
            z.writestr(name if name.endswith(".npy") else name + ".npy", data)
    return path


def zeros_member(path: Path, shape: tuple[int, ...], others: dict[str, bytes]) -> Path:
    """An archive whose ``values`` member is honest deflated zeros of ``shape`` (tiny on disk)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("values.npy", "w", force_zip64=True) as m:
            m.write(header(shape))
            left = int(np.prod(shape)) * 8
            chunk = bytes(1 << 20)
            while left:
                n = min(left, len(chunk))
                m.write(chunk[:n])
                left -= n
        for name, data in others.items():
            z.writestr(name + ".npy", data)
    return path


def lying_sizes(path: Path, *, file_size: int) -> Path:
    """A one-member archive whose central directory claims ``file_size`` uncompressed bytes for a tiny
    deflated member (the local header is left honest): a zip bomb's declaration."""
    good = path.with_suffix(".tmp")
    archive(good, {"values": npy(np.zeros(4))})
    raw = bytearray(good.read_bytes())
    good.unlink()
    cd = raw.rfind(b"PK\x01\x02")
    # central directory entry: uncompressed size at offset 24 (4 bytes)
    struct.pack_into("<I", raw, cd + 24, min(file_size, 0xFFFFFFFE))
    path.write_bytes(bytes(raw))
    return path


__all__ = ["META", "archive", "header", "lying_sizes", "meta_bytes", "npy", "panel_meta", "zeros_member"]
