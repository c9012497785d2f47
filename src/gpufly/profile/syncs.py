"""Counting the loop's host-device syncs and timing its host-to-device copies, by wrapping ``torch.Tensor``.

The wrappers are installed for the profiler's detailed steps only (``gpufly.profile.sampling``) and the
originals put back between them and when it stops. Only the
loop's own calls count: torch calling its own methods (Adam reading its step count, printing a tensor
through ``.item()``) is not the user's to change.
"""

from __future__ import annotations

import sys
import time
import warnings
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from gpufly.profile.sampling import OwnTime

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

ARMS_PER_PROCESS = 200
"""How many times the wrappers go into one tensor class in a process. Each change to a class gives it a new version
tag once it is next looked up, and from Python 3.13 a class gets 1000 in its life: after that its attribute lookups
are never cached again, and every tensor attribute in torch's Python code is read the slow way for the rest of the
process. Putting the wrappers in and taking them out costs ``torch.Tensor`` (and each subclass) two tags; 200 times
leaves most of the 1000 to everything else. With the default schedule that is the first 800 or so windows (one in
four counts syncs): a run of several hundred thousand steps; the later windows then leave syncs uncounted
(``syncs_counted`` false on their steps) rather than slow the loop for good."""

_arms_left: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""Per tensor class, how many more times the wrappers may go in (``ARMS_PER_PROCESS`` at first)."""


class SyncCounter:
    """Counts sync calls by label in ``calls`` (every one seen, in any step) and reports each one, and each
    host-to-device copy, as it happens.

    The wrappers are in place only while armed (the profiler's detailed steps): a wrapped call costs the loop
    time, an unwrapped one nothing. ``on_sync(started, waited_s, label)`` hears each sync (when it was called, how
    long the call took: on a GPU, the stall; and its label); ``on_copy(seconds, blocking)`` hears each
    host-to-device copy (GPU runs only). ``own`` is told the time spent in the wrappers themselves.
    """

    def __init__(self, on_sync: Callable[[float, float, str], None], on_copy: Callable[[float, bool], None],
                 clock: Callable[[], float] = time.perf_counter, own: OwnTime | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.cuda = False
        self.armed = False
        self._on_sync = on_sync
        self._on_copy = on_copy
        self._clock = clock
        self._own = own or OwnTime(clock)
        self._torch: Any = None
        self._patched: list[tuple[Any, str, Any, Any]] = []

    def start(self, torch: Any, cuda: bool) -> None:
        """Say which torch to wrap and whether the run is on a GPU; the wrappers go in with ``arm``."""
        self._torch = torch
        self.cuda = cuda

    def arm(self) -> bool:
        """Wrap the Tensor methods (and, on a GPU run, the copies and ``torch.cuda.synchronize``); whether the counter
        is in. It stays out once ``ARMS_PER_PROCESS`` arms have changed this process's tensor class."""
        if self.armed:
            return True
        if self._torch is None:
            return False
        torch = self._torch
        left = _arms_left.get(torch.Tensor, ARMS_PER_PROCESS)
        if left <= 0:
            return False
        _arms_left[torch.Tensor] = left - 1
        self.armed = True
        for method in SYNC_METHODS:
            gpu_only = method in ("cpu", "numpy")
            if self.cuda or not gpu_only:  # on a CPU run these never wait: wrapping them would only cost
                self._count(torch.Tensor, method, f".{method}()", gpu_only=gpu_only)
        for method, label in SYNC_CONVERSIONS:
            self._count(torch.Tensor, method, label, gpu_only=False)
        if self.cuda:
            for method in COPY_METHODS:
                self._time_copies(torch.Tensor, method)
            self._count_synchronize(torch.cuda)
        return True

    def disarm(self) -> None:
        """Put back every original (deleting the wrapper where the method was inherited).

        One at a time, each taken off the list as it is put back: a Ctrl-C landing in the middle (windows open and
        close all through a run) leaves a list that the next ``disarm`` finishes, never one it undoes twice. A wrapper
        that another profiler has wrapped since is left in place, passing calls through, with what it would have put
        back noted on it: that profiler puts that back when it disarms, not this wrapper."""
        while self._patched:
            owner, name, original, replacement = self._patched[-1]
            if owner.__dict__.get(name) is replacement:
                original = _put_back(original)
                if original is not None:
                    setattr(owner, name, original)
                elif name in owner.__dict__:
                    delattr(owner, name)
            else:
                replacement.gpufly_put_back = original
            self._patched.pop()
        self.armed = False

    def _replace(self, owner: Any, name: str, replacement: Any) -> None:
        """Install ``replacement`` until ``disarm``, remembering what to put back (None: it was inherited)."""
        self._patched.append((owner, name, owner.__dict__.get(name), replacement))
        setattr(owner, name, replacement)

    def _count(self, tensor_type: Any, method: str, label: str, gpu_only: bool) -> None:
        original = _class_attribute(tensor_type, method)
        counter, clock, own = self, self._clock, self._own

        def counted(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not counter.armed:  # left in place under another profiler's wrapper after this one disarmed
                return original(tensor, *args, **kwargs)
            entered = clock()
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if caller == "torch" or caller.startswith("torch."):
                # torch's own call (CPU Adam reads each parameter's step count so), not counted: the clock is read
                # once less, as these come several a step.
                called = clock()
                own.add(called - entered)
                if not tensor.requires_grad:
                    return original(tensor, *args, **kwargs)
                return _warning_at_caller(original, tensor, *args, **kwargs)
            # On a GPU run only GPU tensors wait; on a CPU run every call is one that would.
            counts = tensor.is_cuda or not (gpu_only or counter.cuda)
            called = clock()
            if not tensor.requires_grad:
                result = original(tensor, *args, **kwargs)
            else:
                result = _warning_at_caller(original, tensor, *args, **kwargs)
            returned = clock()
            if counts:
                counter.calls[label] += 1
                counter._on_sync(called, returned - called, label)
            own.add(called - entered + clock() - returned)
            return result

        counted.__wrapped__ = original  # type: ignore[attr-defined]
        self._replace(tensor_type, method, counted)

    def _time_copies(self, tensor_type: Any, method: str) -> None:
        original = _class_attribute(tensor_type, method)
        counter, clock, own = self, self._clock, self._own

        def timed(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if not counter.armed:  # left in place under another profiler's wrapper after this one disarmed
                return original(tensor, *args, **kwargs)
            entered = clock()
            result = original(tensor, *args, **kwargs)
            returned = clock()
            if tensor.is_cuda:
                if not getattr(result, "is_cuda", True) and not _called_from_torch():
                    label = f".{method}(cpu)"  # device to host waits, like .cpu()
                    counter.calls[label] += 1
                    counter._on_sync(entered, returned - entered, label)
            elif getattr(result, "is_cuda", False):
                counter._on_copy(returned - entered, not kwargs.get("non_blocking", False))
            own.since(returned)
            return result

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        self._replace(tensor_type, method, timed)

    def _count_synchronize(self, cuda: Any) -> None:
        original = cuda.synchronize
        counter, clock = self, self._clock

        def synchronize(*args: Any, **kwargs: Any) -> Any:
            if not counter.armed:
                return original(*args, **kwargs)
            called = clock()
            result = original(*args, **kwargs)
            counter.calls["torch.cuda.synchronize()"] += 1
            counter._on_sync(called, clock() - called, "torch.cuda.synchronize()")
            return result

        self._replace(cuda, "synchronize", synchronize)


def _class_attribute(owner: type, name: str) -> Any:
    """What ``getattr(owner, name)`` gives, read from the classes' own dicts: a ``getattr`` on a class gives it a
    version tag when it has none (each wrapper put in takes it away), and from Python 3.13 a class gets only 1000."""
    for klass in owner.__mro__:
        if name in klass.__dict__:
            value = klass.__dict__[name]
            get = getattr(type(value), "__get__", None)
            return get(value, None, owner) if get is not None else value
    raise AttributeError(f"type object {owner.__name__!r} has no attribute {name!r}")


def _put_back(original: Any) -> Any:
    """What to put back for ``original``: itself, or, where it is a wrapper whose profiler has disarmed since (another
    profiler's wrapper sat on top of it then), what that wrapper would have put back."""
    while hasattr(original, "gpufly_put_back"):
        original = original.gpufly_put_back
    return original


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
