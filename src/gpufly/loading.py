"""One loader for the functions a user names on the command line: ``package.module:function`` or ``file.py:function``,
and one way to run them where they cannot take gpufly down.

`gpufly fit`, `gpufly profile` and `gpufly tune` all take such a reference; they resolve it here, so the same
input gets the same import semantics and the same one-line errors everywhere. A file is imported under a
private module name registered in ``sys.modules`` (so dataclasses and pickle find its classes), with its own
folder first on ``sys.path`` (so it imports its neighbours, as ``python file.py`` would); a module is imported
with the current folder on ``sys.path`` (as ``python -m`` would).

User code can hang, ``sys.exit``, ``os._exit`` or crash the interpreter, so `fit` and `tune` call it through
``call_in_child``: in a child process of its own session, with a timeout, whose every way out (an answer, an
error, an exit code, a signal, a hang, an answer that cannot be sent back) becomes a value or one GpuflyError.
``process_group`` is how such a child (and a tuner trial) is started: a session of its own, so that the whole
group is killed on a timeout, an exception or a stop signal, and armed to die with gpufly even on a SIGKILL.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib
import importlib.util
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from gpufly.errors import GpuflyError

IMPORT_HINT = "run the file with python to see the whole error; it must import without side effects"
FORMS = "package.module:function or path/to/file.py:function"


def split_ref(ref: str) -> tuple[str, str]:
    """``(where, function)`` of a reference; a GpuflyError for anything that is not one.

    >>> split_ref("models/my.py:build"), split_ref("pkg.mod:make")
    (('models/my.py', 'build'), ('pkg.mod', 'make'))
    """
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name:
        raise GpuflyError(f"not a function reference: '{ref}'", hint=f"write {FORMS}")
    return where, name


def is_file_ref(where: str) -> bool:
    """Whether the part before the ':' names a file rather than a module."""
    return where.endswith(".py") or "/" in where or "\\" in where


DYNAMIC_BINDERS = frozenset({"globals", "exec", "eval", "setattr", "vars", "__import__"})
"""Calls through which a module can bind names that its source never spells out as a binding."""


def missing_function(where: str, name: str) -> list[str] | None:
    """For a ``file.py`` reference, read with ``ast`` before anything of it runs (importing it runs the whole script,
    a training run perhaps, before the name could be looked up): None when the file binds ``name`` at its top level
    or may (a module reference, a file that cannot be read or parsed, a star import, ``globals()``, ``exec``, a module
    ``__getattr__``: left to the import, which says what is wrong in its own words); else the file's public
    top-level functions, for the error's hint."""
    import ast

    if not is_file_ref(where):
        return None
    path = Path(where).expanduser()
    try:
        tree = ast.parse(path.read_bytes(), filename=where)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bound = top_level_names(tree)
    if bound is None or name in bound:
        return None
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and not node.name.startswith("_")]


def top_level_names(tree: Any) -> set[str] | None:
    r"""The names a module binds at its top level (not inside a function or a class body, where they are not its
    attributes; a ``global`` declaration in a function binds one), or None where it may bind others the source does
    not spell out (DYNAMIC_BINDERS, a star import, a module ``__getattr__``).

    >>> import ast
    >>> sorted(top_level_names(ast.parse("import os.path\nfrom a import b as c\nx = y = 1\nif x:\n    def f(): pass")))
    ['c', 'f', 'os', 'x', 'y']
    >>> sorted(top_level_names(ast.parse("def g():\n    def main(): pass\nclass Box:\n    main = 1")))
    ['Box', 'g']
    >>> top_level_names(ast.parse("from torch import *")) is None
    True
    """
    import ast

    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            if node.name == "__getattr__":
                return None
            pending.extend(node.decorator_list)
            names.update(name for inner in ast.walk(node) if isinstance(inner, ast.Global) for name in inner.names)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            continue
        if isinstance(node, ast.Call):
            called = node.func
            if (called.id if isinstance(called, ast.Name) else called.attr if isinstance(called, ast.Attribute)
                    else "") in DYNAMIC_BINDERS:
                return None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        elif isinstance(node, ast.Lambda):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return names


def run_it_yourself(ref: str) -> str:
    """The shell command that calls the function ``ref`` names, for a hint: where its traceback shows.

    >>> run_it_yourself("pkg.models:build"), run_it_yourself("models/my.py:build")
    ("python -c 'from pkg.models import build; build()'", "cd models && python -c 'from my import build; build()'")
    """
    where, name = split_ref(ref)
    if not is_file_ref(where):
        return f"python -c 'from {where} import {name}; {name}()'"
    path = Path(where)
    return f"cd {path.parent} && python -c 'from {path.stem} import {name}; {name}()'"


def one_line(exc: BaseException) -> str:
    """An exception as ``Type: first line of its message``."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def import_file(target: str) -> ModuleType:
    """Import ``target`` (a .py file) under a private, stable module name."""
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise GpuflyError(f"no such file: {target}", hint=f"give {FORMS}")
    name = f"_gpufly_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise GpuflyError(f"cannot import {target} as Python", hint="give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except SyntaxError:
        del sys.modules[name]
        raise
    except Exception as exc:
        del sys.modules[name]
        raise GpuflyError(f"importing {target} failed: {one_line(exc)}", hint=IMPORT_HINT) from exc
    return module


def import_module(target: str) -> ModuleType:
    """Import the module ``target``, with the current folder importable (as ``python -m`` has it)."""
    if target.startswith(".") or not all(part.isidentifier() for part in target.split(".")):
        raise GpuflyError(f"{target!r} is not an absolute module name", hint=f"give {FORMS} (no leading dot)")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name and (target == exc.name or target.startswith(exc.name + ".")):
            raise GpuflyError(f"module not found: {target}", hint="check the spelling and that you run from the "
                              "folder that holds the package, or give path/to/file.py:function") from exc
        raise GpuflyError(f"importing {target} failed: {one_line(exc)}", hint=IMPORT_HINT) from exc
    except SyntaxError:
        raise
    except Exception as exc:
        raise GpuflyError(f"importing {target} failed: {one_line(exc)}", hint=IMPORT_HINT) from exc


def load_function(ref: str, example: str = "build") -> Callable[..., Any]:
    """The callable ``ref`` names; a missing file, module or name is one error with "did you mean".

    ``example`` is the function name the hint suggests when the name is not there. A SyntaxError in the
    user's file is raised as it is, so the caller can point at the line.
    """
    where, name = split_ref(ref)
    module = import_file(where) if is_file_ref(where) else import_module(where)
    if not hasattr(module, name):
        public = [key for key in vars(module) if not key.startswith("_")]
        close = difflib.get_close_matches(name, public, n=3)
        raise GpuflyError(f"{where} has no function '{name}'",
                          hint=f"did you mean {', '.join(close)}?" if close else f"define def {example}(): ... there")
    function = getattr(module, name)
    if not callable(function):
        raise GpuflyError(f"{ref} is not a function (type {type(function).__name__})",
                          hint=f"name a function, e.g. {where}:{example}")
    return function


PR_SET_PDEATHSIG = 1
"""prctl(2)'s option that names the signal the kernel sends a process when the thread that started it ends."""
CHILD_ENTRY = "from gpufly.loading import serve_child; serve_child()"
"""What a ``call_in_child`` child runs: ``python -c`` keeps the current folder first on its ``sys.path``."""


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None off Linux. Resolved in the parent, so the child only calls it between fork and exec."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` ends, even by SIGKILL, where no handler runs.

    ``PR_SET_PDEATHSIG`` rather than a thread polling ``os.getppid()``: the kernel delivers it, so it holds
    while the interpreter is busy in C code or not started yet, and it survives ``exec`` (set between fork and
    exec, it covers a torchrun launcher, which is not gpufly's code). It is not inherited by the process's own
    children, so each process that must die with its parent asks for itself (a torchrun rank, whose launcher
    starts it in a session of its own, does in ``gpufly.tune.worker``). If ``parent`` ended before the signal was
    armed, this process was already handed to another parent and ends now. Off Linux only the check is made.
    """
    prctl = _prctl()
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


def dies_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` that arms ``die_with_parent(parent)`` in a child started in a process group of the caller's
    making (``gpufly.tune.trial.one_group``); prctl is resolved here, in the parent, so that the child only calls it
    between fork and exec."""
    _prctl()
    return functools.partial(die_with_parent, parent)


def kill_group(process: subprocess.Popen[Any]) -> None:
    """SIGKILL ``process``'s whole process group (it leads one: see ``process_group``) and reap it.

    The group outlives its leader while any member does, so this also ends what the leader left running."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


@contextlib.contextmanager
def process_group(command: list[str], **popen: Any) -> Iterator[subprocess.Popen[Any]]:
    """``subprocess.Popen(command, **popen)`` as the leader of a new session, which dies with this process.

    A session of its own, so that Ctrl-C at the terminal reaches gpufly only (which then stops the child itself)
    and one ``killpg`` ends the child and everything it started; whatever way the block is left (the child done,
    a timeout, an exception, a stop signal raised in it) the group is killed. The death signal is tied to the
    thread that starts the child: start it from the thread that waits for it.
    """
    _prctl()
    process = subprocess.Popen(command, start_new_session=True,
                               preexec_fn=functools.partial(die_with_parent, os.getpid()), **popen)
    try:
        yield process
    finally:
        kill_group(process)


def call_in_child(function: str, arguments: dict[str, Any], what: str, timeout_s: float, hint: str) -> Any:
    """``function(**arguments)`` in a child process (a gpufly ``module:function`` that runs a user's code), and
    what it returned; every other way out is one GpuflyError about ``what`` ("the factory m:f") with ``hint``.

    The child's stdout is its answer alone: whatever the user's code prints goes to stderr, so it can never
    corrupt a ``--json`` document. A GpuflyError raised in the child is raised here as it was.
    """
    request = pickle.dumps({"function": function, "arguments": arguments})
    with process_group([sys.executable, "-c", CHILD_ENTRY], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        try:
            answer, _ = child.communicate(request, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise GpuflyError(f"{what} did not finish within {timeout_s:g} s, and was stopped", hint=hint) from None
    return _answer(answer, child.returncode, what, hint)


def _answer(answer: bytes, returncode: int, what: str, hint: str) -> Any:
    """The child's reply as a value or a GpuflyError; a child that died before replying, by its exit code."""
    try:
        kind, *reply = pickle.loads(answer)
    except Exception:  # no reply, or a torn one: the child died while writing it
        if returncode < 0:
            raise GpuflyError(f"{what} crashed the process it ran in ({_signal_name(-returncode)})",
                              hint=hint) from None
        raise GpuflyError(f"{what} ended its process with exit code {returncode} before it answered",
                          hint=hint) from None
    if kind == "ok":
        return reply[0]
    if kind == "error":
        message, error_hint, exit_code = reply
        raise GpuflyError(message, error_hint, exit_code)
    raise GpuflyError(f"{what} {reply[0]}", hint=hint)


def exit_text(returncode: int) -> str:
    """How a child process ended, for a message; a Windows NTSTATUS code shows as hex.

    >>> exit_text(-11), exit_text(-99), exit_text(3), exit_text(0xC0000005)
    ('crashed with SIGSEGV', 'crashed with signal 99', 'exited with code 3', 'exited with code 0xC0000005')
    """
    if returncode < 0:
        return f"crashed with {_signal_name(-returncode)}"
    return f"exited with code {f'0x{returncode:08X}' if returncode > 0xFFFF else returncode}"


def _signal_name(number: int) -> str:
    """A signal's name for a message.

    >>> _signal_name(11), _signal_name(99)
    ('SIGSEGV', 'signal 99')
    """
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def serve_child() -> None:
    """The child's side of ``call_in_child``: read the request from stdin, answer on the real stdout, exit.

    File descriptor 1 is pointed at stderr before any user code runs (C code and subprocesses that write to
    it included); the answer goes out on a copy of the original. The process ends with ``os._exit``, so a
    thread or an ``atexit`` hook the user's code left behind cannot keep it alive after it has answered.
    """
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    request = pickle.load(sys.stdin.buffer)
    reply = _run_request(request["function"], request["arguments"])
    try:
        data = pickle.dumps(reply)
    except Exception as exc:
        data = pickle.dumps(("failed", f"returned what cannot be sent back to gpufly: {one_line(exc)}"))
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    answers.write(data)
    answers.flush()
    os._exit(0)


def _run_request(function: str, arguments: dict[str, Any]) -> tuple[Any, ...]:
    """``("ok", value)``, ``("error", message, hint, exit code)`` for a GpuflyError, else ``("failed", what
    happened)``: an exception, ``sys.exit`` or KeyboardInterrupt raised by the user's code."""
    module, _, name = function.partition(":")
    try:
        return "ok", getattr(importlib.import_module(module), name)(**arguments)
    except GpuflyError as exc:
        return "error", exc.message, exc.hint, exc.exit_code
    except SystemExit as exc:
        return "failed", f"called sys.exit({exc.code!r})"
    except BaseException as exc:
        return "failed", f"raised {one_line(exc)}"
