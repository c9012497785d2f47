"""Shared rendering: consoles, JSON output, and number formatting for tables."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from rich.console import Console

MISSING = "—"


PIPED_WIDTH = 160
"""Width for output into a file or pipe, where Rich would otherwise assume 80 columns."""


def console() -> Console:
    """Standard-output console; colourless and wide when the output is not a terminal."""
    out = Console(highlight=False, markup=False, emoji=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPED_WIDTH
    return out


def error_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout: the stable `--json` contract. A non-finite float (a loss that
    diverged) is written as null: Infinity and NaN are not JSON, and strict parsers refuse them."""
    sys.stdout.write(json.dumps(finite(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n")


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
