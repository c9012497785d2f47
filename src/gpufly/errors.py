"""The one error type that gpufly's logic raises for a user's mistake."""

from __future__ import annotations


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
