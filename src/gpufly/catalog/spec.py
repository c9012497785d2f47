"""GpuSpec: one catalog entry, as the vendor documents it, plus the ratios people rank by."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpufly.errors import GpuflyError

RATE_FIELDS: tuple[str, ...] = (
    "fp32_tflops",
    "fp16_tflops",
    "tf32_tensor_tflops",
    "fp16_tensor_tflops",
    "bf16_tensor_tflops",
    "fp8_tensor_tflops",
    "fp4_tensor_tflops",
    "int8_tensor_tops",
)
"""Compute-rate fields, dense, at boost clock. A missing figure is None: not published."""

TENSOR_FIELDS: tuple[str, ...] = tuple(name for name in RATE_FIELDS if "_tensor_" in name)

PRECISION_FIELDS: dict[str, str] = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_tensor_tflops",
    "fp16": "fp16_tensor_tflops",
    "bf16": "bf16_tensor_tflops",
    "fp8": "fp8_tensor_tflops",
    "fp4": "fp4_tensor_tflops",
    "int8": "int8_tensor_tops",
}
"""Each precision's name and the field holding its dense matmul rate (FP32 on the vector units, the rest on the
tensor cores): the one map `gpus --has`, `--sort fp16` and the bench's percent of peak all read."""


NO_TENSOR_CORE_CHIPS: tuple[str, ...] = ("TU116", "TU117")
"""Turing chips of the GTX 16 series: compute capability 7.5 like the RTX cards, but dedicated FP16 units instead
of tensor cores (NVIDIA's GTX 1660 Ti announcement)."""


def parse_compute_capability(cc: str) -> tuple[int, int]:
    """A CUDA compute capability as (major, minor), the one reader of the "MAJOR.MINOR" form gpufly uses
    everywhere (catalog, NVML, doctor facts), so "12.0" sorts above "9.0".

    >>> parse_compute_capability("8.6"), parse_compute_capability("12.0")
    ((8, 6), (12, 0))
    """
    parts = str(cc).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise GpuflyError(f"cannot read compute capability {cc!r}", hint="expected MAJOR.MINOR, e.g. 8.6")
    return int(parts[0]), int(parts[1])


@dataclass(frozen=True)
class GpuSpec:
    """A GPU as its vendor's datasheet or whitepaper describes it.

    Units are in the field names: GiB, GB/s (10^9 B/s), TFLOPS (10^12), W, USD. A field the
    vendor does not publish is None, never a guess. Rates are dense (no 2:4 sparsity). A tensor rate the vendor
    does not publish may be derived at load from the architecture's per-SM rate (``catalog/derive.py``); each
    such field is named in ``derivations`` with its formula and inputs, so it is always shown as derived.
    ``dies`` counts the devices software sees per card (an MI250X is two); the other figures are per card.
    """

    id: str
    name: str
    full_name: str
    vendor: str
    segment: str
    architecture: str
    vram_gib: float
    memory_type: str
    memory_bandwidth_gbps: float
    launch_year: int
    sources: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    chip: str | None = None
    compute_capability: str | None = None
    memory_bus_bits: int | None = None
    sm_count: int | None = None
    boost_clock_mhz: float | None = None
    fp32_tflops: float | None = None
    fp16_tflops: float | None = None
    tf32_tensor_tflops: float | None = None
    fp16_tensor_tflops: float | None = None
    bf16_tensor_tflops: float | None = None
    fp8_tensor_tflops: float | None = None
    fp4_tensor_tflops: float | None = None
    int8_tensor_tops: float | None = None
    tdp_w: float | None = None
    form_factor: str | None = None
    pcie_gen: int | None = None
    pcie_lanes: int | None = None
    nvlink: str | None = None
    interconnect_gbps: float | None = None
    dies: int = 1
    launch_price_usd: float | None = None
    notes: str | None = None
    default_for: tuple[str, ...] = ()
    derivations: dict[str, str] = field(default_factory=dict, compare=False)
    derived: dict[str, float | None] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", _derive(self))

    @property
    def lacks_bf16_tensor_cores(self) -> bool:
        """An NVIDIA GPU older than Ampere (compute capability under 8.0: Volta, Turing) with no bf16 rate given: bf16
        tensor cores arrived with Ampere (A100 whitepaper), so its bf16 matmuls run on the CUDA cores."""
        cc = self.compute_capability_tuple
        return self.vendor == "nvidia" and self.bf16_tensor_tflops is None and cc is not None and cc < (8, 0)

    @property
    def has_tensor_cores(self) -> bool:
        """True where the vendor gives a tensor (matrix-core) rate, or the GPU is NVIDIA Volta or
        newer (compute capability 7.0+), which all have tensor cores but the GTX 16 series (TU116/TU117)."""
        if any(getattr(self, name) is not None for name in TENSOR_FIELDS):
            return True
        if self.chip is not None and self.chip.startswith(NO_TENSOR_CORE_CHIPS):
            return False
        cc = self.compute_capability_tuple
        return cc is not None and cc >= (7, 0)

    @property
    def compute_capability_tuple(self) -> tuple[int, int] | None:
        return None if self.compute_capability is None else parse_compute_capability(self.compute_capability)

    @property
    def interface(self) -> str | None:
        """PCIe link and any faster interconnect, in one line for display."""
        parts = []
        if self.pcie_gen is not None:
            lanes = f" x{self.pcie_lanes}" if self.pcie_lanes else ""
            parts.append(f"PCIe {self.pcie_gen}.0{lanes}")
        if self.nvlink:
            parts.append(self.nvlink)
        return ", ".join(parts) or None

    def is_derived(self, key: str) -> bool:
        """Whether the figure ``key`` (a field, or a ratio in ``derived``) rests on a derived tensor rate rather
        than a published one, so a view can mark it."""
        if key in PEAK_RATIOS:
            source = peak_field(self)
            return source is not None and source in self.derivations
        return key in self.derivations

    def to_dict(self) -> dict[str, Any]:
        """Every field, None included, plus the derived ratios: the `--json` shape of a GPU."""
        data = asdict(self)
        data["sources"] = list(self.sources)
        data["aliases"] = list(self.aliases)
        data["default_for"] = list(self.default_for)
        data["derivations"] = dict(self.derivations)
        data["derived"] = dict(self.derived)
        return data


PEAK_RATIOS = frozenset({"peak_tflops", "tflops_per_usd", "tflops_per_watt"})
"""The ratios in ``GpuSpec.derived`` computed from the peak matmul rate."""


def peak_field(spec: GpuSpec) -> str | None:
    """The field the peak matmul rate comes from (see ``peak_matmul_tflops``), or None where there is none."""
    tensor = [name for name in ("fp16_tensor_tflops", "bf16_tensor_tflops") if getattr(spec, name) is not None]
    if tensor:
        return max(tensor, key=lambda name: getattr(spec, name))
    if spec.has_tensor_cores:
        return None
    plain = [name for name in ("fp16_tflops", "fp32_tflops") if getattr(spec, name) is not None]
    return max(plain, key=lambda name: getattr(spec, name)) if plain else None


def peak_matmul_tflops(spec: GpuSpec) -> float | None:
    """The best dense rate for 16-bit matrix math, for ranking GPUs.

    The larger of the FP16 and BF16 tensor rates (published, or derived from the architecture's per-SM rate):
    the figure that bounds mixed-precision training and 16-bit inference. A GPU without tensor cores (NVIDIA
    before Volta) falls back to its FP16 or FP32 rate, which is what it really runs matmuls at. A GPU with
    tensor cores and no 16-bit tensor rate gets None, so that an FP32 figure is never ranked against tensor
    figures.
    """
    source = peak_field(spec)
    return None if source is None else getattr(spec, source)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _derive(spec: GpuSpec) -> dict[str, float | None]:
    peak = peak_matmul_tflops(spec)
    price = spec.launch_price_usd
    return {
        "peak_tflops": peak,
        "tflops_per_usd": _ratio(peak, price),
        "tflops_per_watt": _ratio(peak, spec.tdp_w),
        "gbps_per_usd": _ratio(spec.memory_bandwidth_gbps, price),
        "vram_gib_per_usd": _ratio(spec.vram_gib, price),
    }
