"""Output paths checked before a long run, so that no measurement is lost to a typo in one."""

from __future__ import annotations

from gpufly.jsonfile import check_writable

__all__ = ["check_writable"]
