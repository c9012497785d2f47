"""What the long-running monitor commands (`watch`, `serve`, `top`) share: stopping cleanly, option checks."""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from types import FrameType

from gpufly.errors import GpuflyError

MAX_INTERVAL_S = 3600.0
"""An hour between samples is already a sampler that looks stopped; beyond it, time.sleep and the
sampler's deadlines overflow (inf) or never come (nan turns every comparison false: a busy loop)."""


def check_interval(interval: float) -> None:
    if not math.isfinite(interval) or not 0 < interval <= MAX_INTERVAL_S:
        raise GpuflyError(f"--interval must be positive and at most {MAX_INTERVAL_S:g} seconds, not {interval:g}",
                          "for example --interval 1")


def check_rotate(rotate_mb: float | None) -> int | None:
    """``--rotate`` in MB as bytes; inf and nan would overflow ``int()`` long after the option was read."""
    if rotate_mb is None:
        return None
    if not math.isfinite(rotate_mb) or rotate_mb <= 0:
        raise GpuflyError(f"--rotate must be a positive size in MB, not {rotate_mb:g}", "for example --rotate 100")
    return max(1, int(rotate_mb * 1e6))


def check_history(history: int) -> None:
    if history < 2:
        raise GpuflyError(f"--history must be at least 2 samples, not {history}", "for example --history 600")


class Stop(Exception):
    """Raised from the signal handler so a `kill` ends the loop the way Ctrl-C does."""


class _OnStopSignals:
    """Installs ``_handle`` for SIGTERM and SIGINT for the ``with`` block, then puts back what was there."""

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _OnStopSignals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        raise NotImplementedError


class StopSignals(_OnStopSignals):
    """SIGTERM and SIGINT end the loop, but never between writing a sample and counting it.

    A signal that arrives while a sample is being written is held until the write is done, so
    the closing "wrote N samples" always matches the file.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writing = False
        self.pending = False

    def __enter__(self) -> StopSignals:
        super().__enter__()
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.writing:
            self.pending = True
        else:
            raise Stop

    def begin_write(self) -> None:
        self.writing = True

    def end_write(self) -> None:
        self.writing = False
        if self.pending:
            raise Stop


class SignalsCall(_OnStopSignals):
    """SIGTERM and SIGINT call ``stop`` (which must only set a flag) instead of raising anything.

    For `gpufly serve`: its main thread runs socketserver's loop, which catches every Exception around
    each request to keep serving, so a ``Stop`` raised from the handler was taken for a failed request
    (a traceback per signal, and the server went on). The loop checks the flag between requests instead.
    """

    def __init__(self, stop: Callable[[], None]) -> None:
        super().__init__()
        self._stop = stop

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._stop()
