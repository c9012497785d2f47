"""A GPU's place on the ladder: where it stands among the catalog's cards of its vendor by the figures that set AI
speed (the dense 16-bit tensor rate for compute-bound work, memory bandwidth for decoding, VRAM for what fits)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.i18n import gettext as _

DENSE_16BIT_FIELDS = ("bf16_tensor_tflops", "fp16_tensor_tflops")
"""The 16-bit training and inference rate, BF16 first (what current training runs in), FP16 where BF16 is absent."""
WINDOW = 3
"""Peers shown on each side of this GPU: enough to see the step up and the step down, few enough to read."""


@dataclass(frozen=True)
class Peer:
    """One card on the ladder, with the figures the report compares and the datasheets they come from; ``derived``
    when its 16-bit rate is derived from the architecture's per-SM rate rather than published."""

    id: str
    name: str
    architecture: str
    dense_16bit_tflops: float | None
    derived: bool
    memory_bandwidth_gbps: float
    vram_gib: float
    this: bool
    sources: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "sources": list(self.sources)}


@dataclass(frozen=True)
class LadderPlace:
    """This GPU's rank by dense 16-bit rate among ``of`` cards of its vendor that have one, and its neighbours
    (best first, this GPU included)."""

    gpu: str
    rank: int | None
    of: int
    peers: tuple[Peer, ...]

    @property
    def summary(self) -> str:
        if self.rank is None:
            return _("{gpu}: no published or derived 16-bit tensor rate, so no rank by it").format(gpu=self.gpu)
        return _("{gpu}: #{rank} of {count} by dense 16-bit tensor rate").format(gpu=self.gpu, rank=self.rank,
                                                                                 count=self.of)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "rank": self.rank, "of": self.of, "summary": self.summary,
                "peers": [peer.to_dict() for peer in self.peers]}


def dense_16bit(spec: GpuSpec) -> tuple[float | None, bool]:
    """The card's dense 16-bit tensor rate in TFLOPS and whether it is derived."""
    for name in DENSE_16BIT_FIELDS:
        value = getattr(spec, name)
        if value is not None:
            return value, spec.is_derived(name)
    return None, False


def _peer(spec: GpuSpec, this: GpuSpec) -> Peer:
    rate, derived = dense_16bit(spec)
    return Peer(spec.id, spec.name, spec.architecture, rate, derived, spec.memory_bandwidth_gbps, spec.vram_gib,
                spec.id == this.id, tuple(spec.sources))


def ladder_place(this: GpuSpec, catalog: Iterable[GpuSpec], window: int = WINDOW) -> LadderPlace:
    """Rank ``this`` among the catalog's cards of its vendor by dense 16-bit rate (ties by bandwidth) and keep
    ``window`` neighbours each side; a card without the rate is shown alone, unranked."""
    ranked = sorted((spec for spec in catalog if spec.vendor == this.vendor and dense_16bit(spec)[0] is not None),
                    key=lambda s: (-(dense_16bit(s)[0] or 0.0), -s.memory_bandwidth_gbps, s.name))
    index = next((i for i, spec in enumerate(ranked) if spec.id == this.id), None)
    if index is None:
        return LadderPlace(this.name, None, len(ranked), (_peer(this, this),))
    shown = ranked[max(0, index - window): index + window + 1]
    return LadderPlace(this.name, index + 1, len(ranked), tuple(_peer(spec, this) for spec in shown))
