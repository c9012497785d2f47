"""`gpufly profile script.py` / `module:function`: the profiler attached without a code change.

Every DataLoader the code iterates goes through the profiler's timed iterator, and every optimizer
step (torch's global step hooks) marks the end of a step; an inference loop without an optimizer
gets one step per batch. The code runs in this process, as ``python script.py`` would run it, so a
crash leaves the measurements up to it, and its exit code is kept. SIGTERM stops it as Ctrl-C does: the
measurements are kept and the exit code is the shell's for the signal (143; 130 for Ctrl-C).
"""

from __future__ import annotations

import os
import runpy
import signal
import stat
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.loading import load_function
from gpufly.profile.profiler import Profiler


@contextmanager
def attached(profiler: Profiler) -> Iterator[Profiler]:
    """Route DataLoader iteration and optimizer steps through ``profiler`` while the block runs."""
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import DataLoader

    original_iter = DataLoader.__iter__

    def timed_iter(loader: Any) -> Iterator[Any]:
        return profiler.timed(loader, lambda: original_iter(loader))

    DataLoader.__iter__ = timed_iter  # type: ignore[method-assign,assignment]
    ending = register_optimizer_step_post_hook(profiler.hooks.after_optimizer_step_ending_the_step)
    profiler.hooks.time_every_optimizer()
    try:
        profiler.start()
        yield profiler
    finally:
        DataLoader.__iter__ = original_iter  # type: ignore[method-assign]
        ending.remove()
        profiler.hooks.disarm()


def resolve(target: str) -> tuple[str, Callable[[], Any]]:
    """``path/train.py`` runs as __main__ (as ``python train.py`` would); ``package.module:function`` or
    ``file.py:function`` is loaded through gpufly's one loader and called."""
    if target.count(":") == 1 and not Path(target).exists():
        try:
            return target, load_function(target, example="main")
        except SyntaxError as exc:  # before anything runs: one line naming the place, as `fit` and `tune` say it
            where = f"{exc.filename}, line {exc.lineno}" if exc.filename else f"line {exc.lineno}"
            raise _syntax_error(target, exc, where, exc.filename or "FILE") from None
    path = Path(target)
    hint = "give a Python file (train.py) or module:function"
    if not path.exists():
        raise GpuflyError(f"no such script: {target}", hint)
    if not stat.S_ISREG(path.stat().st_mode):
        raise GpuflyError(f"{target} is not a regular file (a folder, device, pipe or socket)", hint)
    try:  # before running anything: /proc/self/mem is "regular" but cannot be read
        with path.open("rb") as handle:
            source = handle.read()
    except OSError as exc:
        raise GpuflyError(f"cannot read {target}: {exc.strerror or exc}", hint) from None
    try:  # a script that cannot even be compiled is one error line, as `fit` and `tune` say it, not a traceback
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise _syntax_error(target, exc, f"line {exc.lineno}", target) from None
    except ValueError as exc:  # null bytes: not Python source
        raise GpuflyError(f"{target} is not Python source ({exc})", hint) from None
    return str(path), lambda: runpy.run_path(str(path), run_name="__main__")


def _syntax_error(target: str, exc: SyntaxError, where: str, file: str) -> GpuflyError:
    """A script or module that does not compile: one line naming the place, and how to see it."""
    return GpuflyError(f"{target} has a syntax error: {exc.msg} ({where})",
                       f"fix the code there; `python -m py_compile {file}` shows it")


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback as ``python script.py`` would print it: the frames of gpufly and runpy left out."""
    here = str(Path(__file__).resolve().parent.parent)
    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename.startswith(here)
                              or "runpy" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


class Stopped(BaseException):
    """A stop signal (SIGTERM, as systemd, Kubernetes and `kill` send) turned into an exception in the script, so
    that the run ends as after Ctrl-C: the measurements kept, the script's ``finally`` blocks run. A BaseException,
    so the script's ``except Exception`` does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum
        """The shell's code for a process ended by this signal (143 for SIGTERM)."""


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """SIGTERM raises ``Stopped`` in the main thread while the block runs (Python already turns SIGINT into
    KeyboardInterrupt); the previous handler is put back after. Elsewhere than the main thread (where signal
    handlers cannot be set) the block runs as it is. A process forked inside the block keeps the signal's default
    action. After a stop, the children's deaths are no longer errors: SIGCHLD is left at its default, as the
    process is ending."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def raise_stopped(signum: int, frame: object) -> None:
        if os.getpid() != owner:  # a forked child (a DataLoader worker) dies of the signal, as it would unprofiled
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        # The stop reaches the whole process group too (systemd, `kill -- -PID`), so the script's DataLoader workers
        # die of it; torch's SIGCHLD handler would report that as an error in the middle of saving the profile.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _exit_code(exc: SystemExit) -> int:
    """The code ``python script.py`` ends with for this SystemExit; a message (``sys.exit("msg")``) goes to stderr,
    as Python prints it, and is code 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run(target: str, args: list[str], profiler: Profiler, quiet_stdout: bool = False) -> int:
    """Run the target under the profiler; returns its exit code (0, its SystemExit code, 1 on an exception, 130 on
    Ctrl-C, 143 on SIGTERM).

    ``quiet_stdout`` sends the code's own prints to stderr, so `--json` output stays one document.
    """
    label, call = resolve(target)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [label, *args]
    if label.endswith(".py"):
        sys.path.insert(0, str(Path(label).resolve().parent))
    code: int = 0
    crash: BaseException | None = None
    try:
        with stop_signals_raise(), attached(profiler), \
                redirect_stdout(sys.stderr) if quiet_stdout else nullcontext():
            call()
    except SystemExit as exc:
        code = _exit_code(exc)
        if code:
            crash = exc
    except KeyboardInterrupt as exc:
        code, crash = 130, exc
    except Stopped as exc:
        code, crash = exc.exit_code, exc
    except Exception as exc:  # the user's code failed: show its traceback, keep what was measured
        _print_user_traceback(exc)
        code, crash = 1, exc
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    data = profiler.finish(crash)
    data.exit_code = code
    data.command = " ".join([target, *args])
    return code
