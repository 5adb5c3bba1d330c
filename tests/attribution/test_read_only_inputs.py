"""Read-only inputs (``np.load(mmap_mode="r")``, ``np.broadcast_to``, frozen arrays) attribute without torch's
"The given NumPy array is not writable" UserWarning, and to the same numbers as writable ones.

torch says that warning once per process, so the check runs in a fresh interpreter with ``-W error::UserWarning``:
before :func:`aumann.checks.as_torch`, the first read-only array to reach ``torch.as_tensor`` there (the context
of a panel, at ``attribution/problem.py``) raised. Each method's φ for the read-only panel is compared, exactly,
with the writable panel's."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np

from aumann.checks import as_torch
from tests.paths import REPO

_SCRIPT = r"""
import os, sys, tempfile
import numpy as np
from aumann.panel import Panel
from aumann.attribution import AumannShapley, ExactShapley, LeaveOneOut, SampledShapley, attribute

rng = np.random.default_rng(4)
T, N, D = 4, 5, 2
values = rng.normal(size=(T, N, D)) + 2.0
alive = np.ones((T, N), bool)
alive[2, 1] = False
price = np.arange(T, dtype=np.float64)[:, None] * np.ones((1, 3))
folder = tempfile.mkdtemp()
np.save(os.path.join(folder, "v.npy"), values)
np.save(os.path.join(folder, "a.npy"), alive)


def frozen(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def panels():
    yield "writable", Panel(values.copy(), alive=alive.copy(), context={"price": price.copy()})
    yield "mmap", Panel(np.load(os.path.join(folder, "v.npy"), mmap_mode="r"),
                        alive=np.load(os.path.join(folder, "a.npy"), mmap_mode="r"),
                        context={"price": np.broadcast_to(price[:, :1], price.shape)})
    yield "frozen", Panel(frozen(values), alive=frozen(alive), context={"price": frozen(price)})


def f_ctx(z, context=None):
    return (z.sum(dim=(-1, -2)) * context["price"][..., 0]) if context else z.sum(dim=(-1, -2))


methods = [AumannShapley(), LeaveOneOut(), ExactShapley(), SampledShapley(permutations=6)]
ref = None
for label, panel in panels():
    assert label == "writable" or not panel.values.flags.writeable, label
    got = []
    for m in methods:
        for f in ("lin", "var", "gini", f_ctx):
            for baseline in ("zero", np.broadcast_to(np.ones(D), (N, D))):
                got.append(attribute(f, panel, method=m, rng=0, baseline=baseline).phi)
    if ref is None:
        ref = got
    else:
        for k, (a, b) in enumerate(zip(ref, got)):
            np.testing.assert_array_equal(a, b, err_msg=f"{label} case {k}")
print("ok", len(ref))
"""


def test_read_only_panels_attribute_without_the_warning_and_to_the_same_numbers():
    run = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", _SCRIPT], cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["ok", "32"]


def test_as_torch_shares_a_read_only_array_and_copies_it_only_for_writing():
    x = np.arange(12.0).reshape(3, 4)
    ro = np.broadcast_to(x[:1], (3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = as_torch(ro)
        assert t.data_ptr() == ro.ctypes.data  # no copy
        np.testing.assert_array_equal(t.numpy(), ro)
        w = as_torch(ro, writable=True)
        w += 1.0
    assert x[0, 0] == 0.0 and w.data_ptr() != ro.ctypes.data  # the owner's data is untouched
    mine = np.zeros(3)
    as_torch(mine, writable=True)[0] = 5.0  # a writable array is shared as before
    assert mine[0] == 5.0


def test_panel_to_torch_of_a_read_only_panel_is_a_copy_safe_to_write(tmp_path):
    """Panel.to_torch() of a memory-mapped panel shared the read-only mapping: writing into the tensor killed the
    process (SIGSEGV, exit 139), and into a frozen panel's tensor changed the panel's read-only values. On the CPU a
    read-only panel's tensor is now a copy (a writable panel's still shares its memory); share_read_only=True
    shares it for readers, as as_torch does."""
    from aumann.panel import Panel

    values = np.arange(12.0).reshape(2, 3, 2)
    np.save(tmp_path / "v.npy", values)
    frozen = values.copy()
    frozen.flags.writeable = False
    for panel in (Panel(np.load(tmp_path / "v.npy", mmap_mode="r")), Panel(frozen)):
        assert not panel.values.flags.writeable
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            t = panel.to_torch()
            assert not np.shares_memory(t.numpy(), panel.values)  # checked before writing: sharing would crash here
            shared = panel.to_torch(share_read_only=True)
        assert shared.data_ptr() == panel.values.ctypes.data
        t[0, 0, 0] = 99.0
        assert t[0, 0, 0].item() == 99.0 and panel.values[0, 0, 0] == 0.0
        np.testing.assert_array_equal(t.numpy()[1], values[1])
    writable = Panel(values.copy())
    writable.to_torch()[0, 0, 0] = 7.0  # a writable panel's tensor shares its memory, as documented
    assert writable.values[0, 0, 0] == 7.0
