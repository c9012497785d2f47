"""Shared rendering: consoles, JSON output, number formatting for tables, and a standard output that fails in
words (a full disk, a closed pipe, an ASCII-only encoding) rather than in a traceback."""

from __future__ import annotations

import codecs
import errno
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

MISSING = "—"


PIPED_WIDTH = 160
"""Width for output into a file or pipe, where Rich would otherwise assume 80 columns."""


class OutputClosed(BrokenPipeError):
    """The reader of standard output went away (`gpufly gpus | head -1`): the entry point ends the run in silence
    with exit 0, as a Unix filter whose reader has read enough has done nothing wrong. A BrokenPipeError, so that a
    profiled script's own `except BrokenPipeError` still catches it; without click's EPIPE errno, so that click
    does not answer it with its exit 1."""


class OutputConsole(Console):
    """Rich's console, leaving a closed pipe to the CLI's entry point (Rich's own answer is exit 1)."""

    def on_broken_pipe(self) -> None:
        raise OutputClosed


ASCII_STAND_INS = {
    "\u2014": "-", "\u2013": "-", "\u2248": "~", "\u2026": "...", "\u00d7": "x", "\u2192": "->", "\u2190": "<-",
    "\u00b1": "+/-", "\u2265": ">=", "\u2264": "<=", "\u00b5": "u", "\u00b7": ".", "\u00b0": " deg",
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2591": ".",
    **dict(zip("\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588", "_.:-=+*#", strict=True)),
}
"""What gpufly's own symbols (dashes, `≈`, `µ`, bars and sparklines) become where the output's encoding cannot
show them (LC_ALL=C, PYTHONIOENCODING=ascii); anything else becomes `?`."""


def _stand_in(error: UnicodeError) -> tuple[str | bytes, int]:
    """The codec error handler: stand-ins for what cannot be encoded; the bytes themselves for what Python decoded
    with surrogateescape (a file name in a C locale), as that locale's own handler would write them."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    if all("\udc80" <= char <= "\udcff" for char in text):
        return bytes(ord(char) - 0xDC00 for char in text), error.end
    return "".join(ASCII_STAND_INS.get(char, "?") for char in text), error.end


codecs.register_error("gpufly-stand-in", _stand_in)


def degrade_unencodable(stream: Any) -> None:
    """Let ``stream`` (stdout or stderr) write what its encoding cannot show as stand-ins rather than crash.

    Rich already draws its boxes in ASCII where the encoding is not UTF; this covers gpufly's own `—` and `≈`.
    A stream that cannot be reconfigured (a test's StringIO) takes any character and is left as it is.
    """
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None and not writes_unicode(stream):
        reconfigure(errors="gpufly-stand-in")


WRITE_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EBADF}
"""Write errors that mean the output's disk or device is full or failing (`gpufly gpus > /dev/full`), or that
standard output is not open for writing."""


FULL = "free space where standard output goes, or send it elsewhere"


class OutputFailed(OSError):
    """Standard output could not be written: the entry point says so in one `error:` line and exits 1 (a failed
    run, not a user's mistake). An OSError with the errno the write raised, so that code that catches OSError (a
    profiled script) sees what Python would have raised."""

    def __init__(self, code: int, reason: str, hint: str = FULL) -> None:
        super().__init__(code, reason)
        self.hint = hint


class GuardedOutput:
    """Standard output that turns a failed write into OutputFailed (a full disk) or OutputClosed (a closed pipe), so
    that the entry point tells them apart from any other OSError whoever wrote (Rich, click, a `print`).
    Everything else passes through to the stream it wraps."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.reader_gone = False
        """Whether a write found the pipe closed: Rich consoles not made here (Typer's help pages) answer that with
        exit 1 on their own, which the entry point then knows to be a closed pipe."""

    @classmethod
    def around(cls, stream: Any) -> GuardedOutput | ClosedOutput:
        """``stream`` guarded; where there is none (`gpufly gpus >&-`), an output that fails at the first write."""
        return ClosedOutput() if stream is None else cls(stream)

    def write(self, text: str) -> int:
        return self._guard(lambda: self._stream.write(text))

    def flush(self) -> None:
        self._guard(self._stream.flush)

    def _guard(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except BrokenPipeError:
            self.reader_gone = True
            raise OutputClosed from None
        except OSError as exc:
            if exc.errno not in WRITE_FAILURES:
                raise
            raise OutputFailed(exc.errno, exc.strerror or str(exc)) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def drop_pending_output() -> None:
    """Point stdout's descriptor at /dev/null, so that the interpreter's last flush of what could not be written
    (a closed pipe, a full disk) prints no second complaint at exit (Python's documented idiom for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no descriptor (a test's StringIO): nothing pending to drop
        pass


class ClosedOutput:
    """Standard output where the shell gave none (`>&-`): the first write is a failed one, said in one line, as
    GNU tools say `write error: Bad file descriptor`."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        raise OutputFailed(errno.EBADF, "standard output is closed",
                           hint="run it with standard output open (a file, a pipe or the terminal)")

    def flush(self) -> None:
        """Nothing was written, so nothing is pending."""

    def isatty(self) -> bool:
        return False


def console() -> Console:
    """Standard-output console; colourless and wide when the output is not a terminal."""
    out = OutputConsole(highlight=False, markup=False, emoji=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPED_WIDTH
    return out


LANG_HELP = "Text in this language: en or zh (default: GPUFLY_LANG, then the locale). JSON stays English."


def choose_language(lang: str | None, json_out: bool = False) -> None:
    """Set the language of this command's text: --lang, else GPUFLY_LANG, else the locale (gettext's order).

    Called before the command produces any message, since messages are translated where they are made. JSON is
    a machine-readable contract and stays English; --lang is still checked, so a mistyped one is an error either
    way.
    """
    from gpufly.i18n import chosen_language, use_language

    language = chosen_language(lang, os.environ)
    use_language("en" if json_out else language)


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_note(text: str) -> None:
    """A `note:` line on stderr: what a person should know (an option the run does not use, a name's assumed
    variant) without it entering stdout, its --json or a pipe."""
    error_console().print(f"note: {text}", markup=False)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout: the stable `--json` contract. A non-finite float (a loss that
    diverged) is written as null: Infinity and NaN are not JSON, and strict parsers refuse them. Where stdout cannot
    encode every character (PYTHONIOENCODING=ascii), they are written as JSON's \\u escapes, which lose nothing."""
    text = json.dumps(finite(data), indent=2, ensure_ascii=not writes_unicode(sys.stdout), allow_nan=False)
    sys.stdout.write(text + "\n")


def writes_unicode(stream: Any) -> bool:
    """Whether ``stream``'s encoding can write any character (UTF-8, or a test's StringIO with no encoding)."""
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")
    return encoding.startswith("utf")


def finite(data: Any) -> Any:
    """``data`` with every NaN or infinite float replaced by None, through dicts, lists and tuples.

    >>> finite({"drift": float("inf"), "losses": [1.0, float("nan")]})
    {'drift': None, 'losses': [1.0, None]}
    """
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite(value) for value in data]
    return data


def number(value: float | int | None, digits: int = 1) -> str:
    """A figure for a table cell: thousands separated, MISSING for None."""
    if value is None:
        return MISSING
    if isinstance(value, int) or abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if abs(value) < 1:
        return f"{value:.3g}"
    return f"{value:,.{digits}f}"


def gib(value_bytes: int | None) -> str:
    return MISSING if value_bytes is None else f"{value_bytes / 2**30:,.1f} GiB"
