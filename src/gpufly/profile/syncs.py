"""Counting the loop's host-device syncs and timing its host-to-device copies, by wrapping ``torch.Tensor``.

The wrappers are installed when the profiler starts and the originals put back when it stops. Only the
loop's own calls count: torch calling its own methods (Adam reading its step count, printing a tensor
through ``.item()``) is not the user's to change.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

SYNC_METHODS = ("item", "tolist", "cpu", "numpy")
"""Tensor methods that wait for the device (``cpu``/``numpy`` only count on a GPU tensor)."""

SYNC_CONVERSIONS: tuple[tuple[str, str], ...] = (
    ("__repr__", "print(tensor)"),
    ("__format__", "f-string of a tensor"),
    ("__float__", "float(tensor)"),
    ("__int__", "int(tensor)"),
    ("__bool__", "bool(tensor)"),
    ("__index__", "tensor as an index"),
)
"""Python conversions that read a tensor's value, so wait for the device like ``.item()``. Counted once, where
the user's code calls them: the ``.item()``/``.tolist()`` that printing makes inside torch is not counted again,
and torch's own ``if tensor:`` checks are not the user's to change."""

COPY_METHODS = ("to", "cuda")
"""Tensor methods that copy to the GPU (timed), or, called on a GPU tensor for the CPU, wait like ``.cpu()``."""


class SyncCounter:
    """Counts sync calls by label in ``calls`` and reports each one, and each host-to-device copy, as it happens.

    ``on_sync()`` hears each sync; ``on_copy(seconds, blocking)`` hears each host-to-device copy (GPU runs only).
    """

    def __init__(self, on_sync: Callable[[], None], on_copy: Callable[[float, bool], None],
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.calls: Counter[str] = Counter()
        self.cuda = False
        self._on_sync = on_sync
        self._on_copy = on_copy
        self._clock = clock
        self._patched: list[tuple[Any, str, Any]] = []

    def start(self, torch: Any, cuda: bool) -> None:
        """Wrap the Tensor methods (and, on a GPU run, the copies and ``torch.cuda.synchronize``)."""
        self.cuda = cuda
        for method in SYNC_METHODS:
            self._count(torch.Tensor, method, f".{method}()", gpu_only=method in ("cpu", "numpy"))
        for method, label in SYNC_CONVERSIONS:
            self._count(torch.Tensor, method, label, gpu_only=False)
        if cuda:
            for method in COPY_METHODS:
                self._time_copies(torch.Tensor, method)
            self._count_synchronize(torch.cuda)

    def stop(self) -> None:
        """Put back every original (deleting the wrapper where the method was inherited)."""
        for owner, name, original in reversed(self._patched):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._patched.clear()

    def _replace(self, owner: Any, name: str, replacement: Any) -> None:
        """Install ``replacement`` until ``stop``, remembering what to put back (None: it was inherited)."""
        self._patched.append((owner, name, owner.__dict__.get(name)))
        setattr(owner, name, replacement)

    def _sync(self, label: str) -> None:
        self.calls[label] += 1
        self._on_sync()

    def _count(self, tensor_type: Any, method: str, label: str, gpu_only: bool) -> None:
        original = getattr(tensor_type, method)
        counter = self

        def counted(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            # On a GPU run only GPU tensors wait; on a CPU run every call is one that would.
            if (tensor.is_cuda or not (gpu_only or counter.cuda)) and not _called_from_torch():
                counter._sync(label)
            if not tensor.requires_grad:
                return original(tensor, *args, **kwargs)
            return _warning_at_caller(original, tensor, *args, **kwargs)

        counted.__wrapped__ = original  # type: ignore[attr-defined]
        self._replace(tensor_type, method, counted)

    def _time_copies(self, tensor_type: Any, method: str) -> None:
        original = getattr(tensor_type, method)
        counter = self

        def timed(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if tensor.is_cuda:
                result = original(tensor, *args, **kwargs)
                if not getattr(result, "is_cuda", True) and not _called_from_torch():
                    counter._sync(f".{method}(cpu)")  # device to host waits, like .cpu()
                return result
            started = counter._clock()
            result = original(tensor, *args, **kwargs)
            if getattr(result, "is_cuda", False):
                counter._on_copy(counter._clock() - started, not kwargs.get("non_blocking", False))
            return result

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        self._replace(tensor_type, method, timed)

    def _count_synchronize(self, cuda: Any) -> None:
        original = cuda.synchronize

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            self._sync("torch.cuda.synchronize()")
            return original(*args, **kwargs)

        self._replace(cuda, "synchronize", synchronize)


def _warning_at_caller(original: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``original`` and re-issue its warnings from the user's line, not this wrapper's: torch warns from C++
    at the calling Python frame ("Converting a tensor with requires_grad=True to a scalar"), which is now ours.
    Only tensors that require grad come here: catching warnings touches process-wide state on every call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = original(*args, **kwargs)
    frame = sys._getframe(2)  # 0 this, 1 the wrapper, 2 the user's call
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, frame.f_code.co_filename, frame.f_lineno,
                               module=frame.f_globals.get("__name__"),
                               registry=frame.f_globals.setdefault("__warningregistry__", {}),
                               module_globals=frame.f_globals)
    return result


def _called_from_torch() -> bool:
    """Whether the wrapped call came from torch itself: frame 0 is this, 1 the wrapper, 2 the caller."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return caller == "torch" or caller.startswith("torch.")
