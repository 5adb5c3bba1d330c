"""Where attribution runs: a torch device, checked once, and a working-memory budget sized for it.

``attribute(..., device="cuda")`` (or ``device=`` on a method) moves the heavy kernels — the
path integral, the running-sum kernels of the coalition methods — onto a torch device. The panel
stays on the host; steps (and chunks of integration points or permutations) are copied over as
they are needed, so memory on the device is bounded by the method's budget, not by the panel.
Results always come back as host numpy arrays.

Nothing here initialises CUDA unless a CUDA device is asked for.
"""

from __future__ import annotations

from typing import Any

import torch

from aumann.errors import MethodError

CPU = torch.device("cpu")
SUPPORTED = ("cpu", "cuda")
#: the share of the device's free memory one batch may use (the rest is left to the caller's model)
DEVICE_MEMORY_SHARE = 0.5


def resolve_device(device: Any) -> torch.device:
    """``None`` → cpu; a string or :class:`torch.device` → a checked torch device.

    Raises:
        MethodError: for a malformed device string, an unsupported device type, or a CUDA device
            that is not available (no CUDA build, no GPU, or an index past the last GPU).
    """
    if device is None:
        return CPU
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device)
        except (RuntimeError, ValueError) as exc:
            raise MethodError(f"invalid device {device!r}: {exc}; use 'cpu', 'cuda' or 'cuda:<index>'") from None
    else:
        raise MethodError(f"device must be a string such as 'cpu' or 'cuda:0', or a torch.device; got {device!r}")
    if dev.type == "cpu":
        return CPU
    if dev.type != "cuda":
        raise MethodError(f"unsupported device {str(dev)!r}: attribution runs on {list(SUPPORTED)} "
                          "(float64 kernels; other backends lack float64 or are untested)")
    if not torch.cuda.is_available():
        raise MethodError(f"device {str(dev)!r} requested but CUDA is not available here "
                          f"(torch {torch.__version__} built with CUDA {torch.version.cuda}); use device='cpu'")
    count = torch.cuda.device_count()
    index = 0 if dev.index is None else dev.index
    if not 0 <= index < count:
        raise MethodError(f"device {str(dev)!r} does not exist: {count} CUDA device(s) visible")
    return torch.device("cuda", index)


def pick_device(call: Any, method: Any) -> torch.device:
    """The device of one ``attribute`` call: its ``device=``, else the method's, else cpu.

    Raises:
        MethodError: when both are given and disagree.
    """
    a = None if call is None else resolve_device(call)
    m = None if method is None else resolve_device(method)
    if a is not None and m is not None and a != m:
        raise MethodError(f"attribute(..., device={str(a)!r}) disagrees with the method's device={str(m)!r}; "
                          "give one of them")
    return a or m or CPU


def memory_budget(device: torch.device, requested: int | None, host_default: int) -> int:
    """Bytes of working memory one batch may use.

    ``requested`` (a method's ``memory_budget=``) wins when given. Otherwise ``host_default`` on the
    host, lowered to half the memory available on the machine when that is less; on a GPU a share
    (:data:`DEVICE_MEMORY_SHARE`) of the device's free memory, at most 8 GiB (bigger batches buy
    nothing once the device is saturated) and at least 64 MiB. See :mod:`aumann.attribution.memory`
    for how a batch is sized from it.
    """
    from aumann.attribution.memory import limits

    return limits(device, requested, host_default)[0]


__all__ = ["CPU", "SUPPORTED", "memory_budget", "pick_device", "resolve_device"]
