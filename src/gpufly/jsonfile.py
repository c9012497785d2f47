"""Read a user's JSON file, turning every way it can be wrong into one GpuflyError line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError


def read_json(path: Path, missing: str, hint: str) -> Any:
    """The parsed document at ``path``. ``missing`` is the message for a file that is not there;
    ``hint`` says how to get a good file, for a missing or unparsable one."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise GpuflyError(missing, hint=hint) from exc
    except IsADirectoryError as exc:
        raise GpuflyError(f"{path} is a folder, not a JSON file", hint=hint) from exc
    except UnicodeDecodeError as exc:
        raise GpuflyError(f"{path} is not a text file (byte {exc.start} is not UTF-8)", hint=hint) from exc
    except OSError as exc:
        raise GpuflyError(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from exc
    except json.JSONDecodeError as exc:
        raise GpuflyError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})", hint=hint) from exc
