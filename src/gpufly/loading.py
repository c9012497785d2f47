"""One loader for the functions a user names on the command line: ``package.module:function`` or ``file.py:function``.

`gpufly fit`, `gpufly profile` and `gpufly tune` all take such a reference; they resolve it here, so the same
input gets the same import semantics and the same one-line errors everywhere. A file is imported under a
private module name registered in ``sys.modules`` (so dataclasses and pickle find its classes), with its own
folder first on ``sys.path`` (so it imports its neighbours, as ``python file.py`` would); a module is imported
with the current folder on ``sys.path`` (as ``python -m`` would).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
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
