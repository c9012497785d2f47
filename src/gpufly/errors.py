"""The one error type that gpufly's logic raises for a user's mistake."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpuflyError(Exception):
    """A problem the user can fix: a bad name, a bad value, an unreadable file.

    The CLI prints ``error: <message>`` and, when given, ``hint: <hint>``, and exits with
    ``exit_code`` (2 for bad input, 1 for a failed check). No traceback is shown.
    """

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code


def unknown_choice(kind: str, name: str, choices: Iterable[str], hint: str | None = None,
                   cutoff: float = 0.5) -> GpuflyError:
    """The error for a name that is not one of ``choices``, with the closest ones suggested.

    >>> unknown_choice("engine", "vlm", ["vllm", "transformers"]).message
    "unknown engine 'vlm'; did you mean vllm?"
    """
    options = sorted(set(choices))
    close = difflib.get_close_matches(name, options, n=3, cutoff=cutoff)
    did_you_mean = f"; did you mean {', '.join(close)}?" if close else ""
    return GpuflyError(f"unknown {kind} '{name}'{did_you_mean}", hint=hint or f"one of: {', '.join(options)}")
