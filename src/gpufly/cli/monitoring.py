"""What the long-running monitor commands (`watch`, `serve`, `top`) share: stopping cleanly, option checks."""

from __future__ import annotations

import signal
from types import FrameType

from gpufly.errors import GpuflyError


def check_interval(interval: float) -> None:
    if interval <= 0:
        raise GpuflyError(f"--interval must be positive, not {interval:g}", "for example --interval 1")


def check_history(history: int) -> None:
    if history < 2:
        raise GpuflyError(f"--history must be at least 2 samples, not {history}", "for example --history 600")


class Stop(Exception):
    """Raised from the signal handler so a `kill` ends the loop the way Ctrl-C does."""


class StopSignals:
    """SIGTERM and SIGINT end the loop, but never between writing a sample and counting it.

    A signal that arrives while a sample is being written is held until the write is done, so
    the closing "wrote N samples" always matches the file.
    """

    def __init__(self) -> None:
        self.writing = False
        self.pending = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]

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
