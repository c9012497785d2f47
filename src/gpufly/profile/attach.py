"""`gpufly profile script.py` / `module:function`: the profiler attached without a code change.

Every DataLoader the code iterates goes through the profiler's timed iterator, and every optimizer
step (torch's global step hooks) marks the end of a step; an inference loop without an optimizer
gets one step per batch. The code runs in this process, as ``python script.py`` would run it, so a
crash leaves the measurements up to it, and its exit code is kept. SIGTERM stops it as Ctrl-C does: the
measurements are kept and the exit code is the shell's for the signal (143; 130 for Ctrl-C).
"""

from __future__ import annotations

import difflib
import os
import runpy
import signal
import stat
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext
from gpufly.loading import load_function, missing_function, one_line, split_ref
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
        where, _colon, name = target.rpartition(":")
        try:
            _check_defined(target)
            return target, load_function(target, example=name or "main")  # a missing name's hint names it
        except GpuflyError as exc:
            if exc.message.startswith(f"{target} is not a function"):  # there the example must be another name
                exc.hint = _("name a function, e.g. {where}:main").format(where=where)
            raise
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


def _check_defined(target: str) -> None:
    """For ``file.py:function``: that the file binds ``function`` at its top level, read before the file is run
    (``gpufly.loading.missing_function``)."""
    where, name = split_ref(target)
    functions = missing_function(where, name)
    if functions is None:
        return
    close = difflib.get_close_matches(name, functions, n=3)
    raise GpuflyError(_("{where} has no function '{name}'").format(where=where, name=name),
                      _("did you mean {names}?").format(names=", ".join(close)) if close else
                      _("define def {name}(): ... at the top level of {where} (checked before running it: nothing "
                        "ran)").format(name=name, where=where))


def _syntax_error(target: str, exc: SyntaxError, where: str, file: str) -> GpuflyError:
    """A script or module that does not compile: one line naming the place, and how to see it."""
    return GpuflyError(f"{target} has a syntax error: {exc.msg} ({where})",
                       f"fix the code there; `python -m py_compile {file}` shows it")


def _print_user_traceback(exc: BaseException) -> None:
    """The traceback as ``python script.py`` would print it: the frames of gpufly and runpy left out, those around
    the script's and those under it (a print that failed in gpufly's guarded stdout, a gpufly call that raised), in
    the exception and in those it was raised from."""
    here = str(Path(__file__).resolve().parent.parent)

    def theirs(frame: traceback.FrameSummary) -> bool:
        return not (frame.filename.startswith(here) or frame.filename.endswith(f"{os.sep}runpy.py")
                    or frame.filename == "<frozen runpy>")

    shown = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    pending = [shown]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.stack = traceback.StackSummary.from_list([frame for frame in current.stack if theirs(frame)])
        pending.extend(chained for chained in (current.__cause__, current.__context__) if chained is not None)
    sys.stderr.write("".join(shown.format()))


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


@dataclass
class Outcome:
    """How the target ended: its exit code, and where it raised, what to say about it at the end of the run."""

    code: int = 0
    error: str | None = None
    """For a script that raised: the exception and the step it raised in, for the run's closing `error:` line."""
    hint: str | None = None
    """What to do: after a raise, or when no step was measured."""


def run(target: str, args: list[str], profiler: Profiler, quiet_stdout: bool = False) -> Outcome:
    """Run the target under the profiler; returns its exit code (0, its SystemExit code, 1 on an exception, 130 on
    Ctrl-C, 143 on SIGTERM) and what to say of its end.

    ``quiet_stdout`` sends the code's own output to stderr, so `--json` output stays one document: its prints, and
    whatever writes to file descriptor 1 itself (``sys.__stdout__``, ``os.write(1, ...)``, a subprocess, C code).
    """
    label, call = resolve(target)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [label, *args]
    if label.endswith(".py"):
        sys.path.insert(0, str(Path(label).resolve().parent))
    outcome = Outcome()
    frameworks = _keras_modules()
    crash: BaseException | None = None
    raised: Exception | None = None
    try:
        with stop_signals_raise(), attached(profiler), \
                stdout_to_stderr() if quiet_stdout else nullcontext():
            call()
    except SystemExit as exc:
        outcome.code = _exit_code(exc)
        if outcome.code:
            crash = exc
    except KeyboardInterrupt as exc:
        outcome.code, crash = 130, exc
    except Stopped as exc:
        outcome.code, crash = exc.exit_code, exc
    except Exception as exc:  # the user's code failed: show its traceback, keep what was measured
        _print_user_traceback(exc)
        outcome.code, crash, raised = 1, exc, exc
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    data = profiler.finish(crash)
    data.exit_code = outcome.code
    data.command = " ".join([target, *args])
    done = len(data.steps)  # the step it raised in is the next one, numbered from 0 as the saved steps are
    ran_keras = _keras_modules().items() - frameworks.items() != set()
    if not done:
        data.no_step_reason = _why_no_step(profiler, label, crash, outcome.code, ran_keras)
    if raised is not None:
        what = one_line(raised)
        outcome.error = (ngettext("{target} raised {error} in step {step} (steps count from 0): the step before it is "
                                  "measured above",
                                  "{target} raised {error} in step {step} (steps count from 0): the {count} steps "
                                  "before it are measured above", done).format(target=label, error=what, step=done,
                                                                               count=done)
                         if done else
                         _("{target} raised {error} before its first step ended: nothing was measured").format(
                             target=label, error=what))
        outcome.hint = _("the traceback above is the script's own (python would stop there too): fix the script "
                         "there and run it again")
    elif not data.steps and crash is None:
        outcome.hint = _no_step_hint(ran_keras)
    return outcome


def _keras_modules() -> dict[str, int]:
    """TensorFlow's and Keras's modules, if imported (by identity): a script that imported them while it ran is a
    Keras or TensorFlow script."""
    return {name: id(sys.modules[name]) for name in ("keras", "tensorflow") if name in sys.modules}


def _why_no_step(profiler: Profiler, label: str, crash: BaseException | None, code: int, ran_keras: bool) -> str:
    """Why the run measured no step, for the saved profile (English: a file's field) and the report."""
    if isinstance(crash, Stopped | KeyboardInterrupt):
        return f"{label} was stopped ({'Ctrl-C' if isinstance(crash, KeyboardInterrupt) else crash}) before its " \
               "first step ended"
    if isinstance(crash, SystemExit):
        return f"{label} exited with code {code} before its first step ended"
    if crash is not None:
        return f"{label} raised {one_line(crash)} before its first step ended"
    if ran_keras:
        return (f"{label} ran TensorFlow/Keras, and `gpufly profile` attaches to PyTorch loops (their DataLoaders "
                "and optimizer steps); a Keras fit is profiled with gpufly.keras.ProfilerCallback")
    if not profiler.steps.loaders and not profiler.steps.optimizer_steps:
        return (f"{label} iterated no torch DataLoader and made no optimizer step, which is where `gpufly profile` "
                "finds a loop's steps")
    return f"no step of {label} ended: a step ends at an optimizer step, or at the fetch of the batch after it"


def _no_step_hint(ran_keras: bool) -> str:
    if ran_keras:
        return _("profile a Keras fit with its callback: model.fit(..., callbacks=[gpufly.keras.ProfilerCallback()]) "
                 "(see docs/profile.md, Keras)")
    return _("mark the steps yourself: prof = gpufly.Profiler(); `with prof.step():` around each step's work; "
             "prof.report() at the end (see docs/profile.md)")


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """While the block runs, standard output is standard error: ``sys.stdout`` (the script's prints) and file
    descriptor 1 itself (what writes to it directly: ``sys.__stdout__``, ``os.write(1, ...)``, a subprocess, C code),
    so that what gpufly prints after it is the only thing on stdout. Where a descriptor cannot be copied (standard
    output or error closed), only ``sys.stdout`` is sent."""
    _flush_all()
    saved: int | None = None
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        if saved is not None:
            os.close(saved)
            saved = None
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            _flush_all()  # what the block left in Python's and C's buffers goes to stderr, where it was written
            os.dup2(saved, 1)
            os.close(saved)


def _flush_all() -> None:
    """Flush what Python and the C library hold for file descriptor 1 (and stderr), ignoring a failure to."""
    for stream in (sys.stdout, sys.__stdout__, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):
        pass
