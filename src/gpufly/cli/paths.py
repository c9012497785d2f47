"""Output paths checked before a long run, so that no measurement is lost to a typo in one."""

from __future__ import annotations

import os
from pathlib import Path

from gpufly.errors import GpuflyError
from gpufly.jsonfile import check_regular


def check_writable(option: str, path: Path, example: str) -> None:
    """Fail before the run, not after it: a whole training run or tuning search lost to a typo in an output path
    is the worst case. ``example`` is a file name for the hint when ``path`` is a folder.

    Opening the file is the only honest test (permission bits lie to root, /proc refuses new files); a file
    made only for the test is removed again, and an existing one is opened for appending, so left as it was.
    """
    if path.is_dir():
        raise GpuflyError(f"{option} {path} is a folder", f"give a file name, for example {option} {path / example}")
    if not path.parent.is_dir():
        raise GpuflyError(f"cannot write {option} {path}: {path.parent} is not a folder",
                          f"give {option} a path in an existing folder")
    check_regular(path, hint=f"give {option} a regular file, for example {option} {example}")
    existed = path.exists()
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise GpuflyError(f"cannot write {option} {path}: {exc.strerror}",
                          "choose a file in a folder that exists and that you can write to") from None
    if not existed:
        os.unlink(path)
