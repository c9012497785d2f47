"""A fleet finding: one thing that differs, fell behind or could not be read, and on which node and GPU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("file", "node", "setup", "link", "slow-gpu")
"""file: a file that could not be used; node: a node that failed, timed out or could not bench; setup: software or
hardware that differs from the other nodes; link: a PCIe link narrower than it can be or than its siblings';
slow-gpu: a measured ceiling behind identical GPUs beyond the tolerance and beyond the measurement's own noise."""


@dataclass(frozen=True)
class FleetFinding:
    kind: str
    subject: str
    """What differs or failed: "driver", "PCIe width", "gemm.bf16", a file's path."""
    message: str
    node: str | None = None
    gpu: int | None = None
    reasons: tuple[str, ...] = ()
    """For a slow GPU: what its records show beside its siblings (throttling, a lower power limit...)."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": list(self.reasons)}


def name_list(names: Sequence[str], limit: int = 4) -> str:
    """Names for a sentence, the long tail counted.

    >>> name_list(["n1", "n2", "n3", "n4", "n5", "n6"])
    'n1, n2, n3, n4 and 2 more'
    """
    if len(names) <= limit:
        return ", ".join(names)
    return f"{', '.join(names[:limit])} and {len(names) - limit} more"
