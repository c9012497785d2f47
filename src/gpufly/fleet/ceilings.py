"""GPUs whose measured ceilings fall behind identical GPUs elsewhere in the fleet (the gpu-fryer and SuperBench
idea: https://github.com/huggingface/gpu-fryer compares each GPU with the best one, 10% tolerance by default;
https://microsoft.github.io/superbenchmark/docs/user-tutorial/data-diagnosis flags nodes against rules).

Each figure is compared with the median of the same benchmark, at the same size, on every other GPU of the same
model: the median of the others, so one slow GPU does not drag its own reference down, and one fast one does not
flag the rest. A GPU is behind when it falls short of that median by more than the tolerance AND its own
interval does not reach the median either (the median's confidence interval the bench recorded, or for a run
saved without one, the rate at its p10 sample time): a figure within its own noise of the fleet's is never called
slow.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpufly.bench import BenchResult, BenchRun
from gpufly.doctor import Facts
from gpufly.fleet.findings import FleetFinding, name_list
from gpufly.fleet.nodes import NodeData
from gpufly.hw.gpu import NOT_SLOWDOWNS

DEFAULT_TOLERANCE = 0.10
"""gpu-fryer's default (--tflops-tolerance 10, against the best GPU; here against the median of the others)."""
SCALES = {"FLOP/s": (1e12, "TFLOP/s"), "OP/s": (1e12, "TOP/s"), "B/s": (1e9, "GB/s"), "s": (1e-6, "µs")}


def shown(value: float, unit: str) -> str:
    """A figure in the unit people read it in.

    >>> shown(8.0e14, "FLOP/s")
    '800.0 TFLOP/s'
    """
    factor, name = SCALES.get(unit, (1.0, unit))
    return f"{value / factor:,.1f} {name}"


@dataclass(frozen=True)
class Measurement:
    """One benchmark figure of one GPU, with its interval and what the run recorded beside it."""

    node: str
    gpu: int | None
    run: BenchRun
    result: BenchResult

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two figures comparable: the GPU model, the benchmark, its size and its unit."""
        return (self.run.device.name, self.result.name, str(self.result.params.get("shape", "")), self.result.unit)

    @property
    def higher_is_better(self) -> bool:
        return self.result.metric != "seconds"

    @property
    def best_case(self) -> tuple[float, str]:
        """The most favourable end of the figure's own interval, and which interval: the median's confidence
        interval where the run recorded one, else the rate at its p10 sample time (or its p10 latency)."""
        result, timing = self.result, self.result.timing
        if result.value_low is not None and result.value_high is not None:
            level = f"{timing.ci_level:.0%} " if timing.ci_level else ""
            return (result.value_high if self.higher_is_better else result.value_low), f"the end of its {level}interval"
        if self.higher_is_better:
            best = result.value * timing.median_s / timing.p10_s if timing.p10_s > 0 else math.inf
        else:
            best = result.value * timing.p10_s / timing.median_s if timing.median_s > 0 else 0.0
        return best, "from its p10 sample time"

    @property
    def label(self) -> str:
        return f"{self.node} GPU {self.gpu if self.gpu is not None else '?'}"


def measurements(nodes: Sequence[NodeData]) -> list[Measurement]:
    """Every GPU figure in the fleet, the newest run's where one GPU was measured more than once."""
    newest: dict[tuple[str, int | None, str, str], Measurement] = {}
    for node in nodes:
        for run in sorted(node.runs, key=lambda r: r.started_at):
            if run.device.kind != "cuda":
                continue
            for result in run.results:
                found = Measurement(node.name, run.device.index, run, result)
                newest[(node.name, run.device.index, result.name, found.key[2])] = found
    return list(newest.values())


@dataclass(frozen=True)
class CeilingCheck:
    """The slow GPUs, and how many figures could be compared with identical GPUs at all."""

    findings: tuple[FleetFinding, ...]
    compared: int
    alone: int
    """Figures with no identical GPU to compare with (the only GPU of its model, or the only run at that size)."""


def slow_gpus(nodes: Sequence[NodeData], tolerance: float = DEFAULT_TOLERANCE) -> CeilingCheck:
    """Each GPU figure against the median of the same figure on the other GPUs of its model."""
    groups: dict[tuple[str, str, str, str], list[Measurement]] = defaultdict(list)
    for found in measurements(nodes):
        groups[found.key].append(found)
    facts = {node.name: node.facts for node in nodes if node.facts is not None}
    findings: list[FleetFinding] = []
    compared = alone = 0
    for members in groups.values():
        if len(members) < 2:
            alone += len(members)
            continue
        compared += len(members)
        for member in members:
            others = [m for m in members if m is not member]
            finding = _behind(member, others, tolerance, facts.get(member.node))
            if finding is not None:
                findings.append(finding)
    return CeilingCheck(tuple(findings), compared, alone)


NO_CAUSE = ("no recorded cause: its clocks, power limit, temperature, versions and link match its siblings'; "
            "measure it again, then check its cooling and `nvidia-smi -q -d PERFORMANCE` on the node")


def _behind(member: Measurement, others: list[Measurement], tolerance: float,
            facts: Facts | None) -> FleetFinding | None:
    reference = statistics.median(m.result.value for m in others)
    value = member.result.value
    if reference <= 0:
        return None
    shortfall = 1 - value / reference if member.higher_is_better else value / reference - 1
    if shortfall <= tolerance:
        return None
    best, which = member.best_case
    if (best >= reference) if member.higher_is_better else (best <= reference):
        return None
    model, name, shape, unit = member.key
    size = f" ({shape})" if shape else ""
    message = (f"{member.label} ({model}): {name}{size} {shown(value, unit)}, {shortfall:.0%} behind the median of "
               f"{len(others)} identical GPU{'s' if len(others) > 1 else ''} ({shown(reference, unit)}); even its "
               f"best case ({shown(best, unit)}, {which}) falls short")
    causes = tuple(likely_causes(member, others, facts)) or (NO_CAUSE,)
    if member.result.noisy:
        causes += (f"its figure is marked noisy ({member.result.noise or 'interval too wide'}): measure it again "
                   "on an idle node",)
    return FleetFinding("slow-gpu", name, message, node=member.node, gpu=member.gpu, reasons=causes)


def after_run(result: BenchResult) -> dict[str, Any]:
    """The GPU's state read right after the figure was timed: the "end" of a run's conditions (bench files of
    schema 2), or the conditions themselves (schema 1, read once after each benchmark)."""
    end = result.conditions.get("end")
    return end if isinstance(end, dict) else result.conditions


def _usual(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def likely_causes(member: Measurement, others: Sequence[Measurement], facts: Facts | None) -> Iterator[str]:
    """What the slow GPU's own records show that its siblings' do not: clock events during the run, lower clocks,
    a hotter die, a lower power limit, other versions, and for a host-device copy a narrower link."""
    conditions, device = after_run(member.result), member.run.device
    theirs = [after_run(m.result) for m in others]
    slowdowns = [r for r in conditions.get("clocks_event_reasons") or [] if r not in NOT_SLOWDOWNS]
    if slowdowns:
        yield f"clock events during the run: {', '.join(slowdowns)}"
    for key, label, unit, worse in (("sm_clock_mhz", "SM clock during the run", "MHz", 0.95),
                                    ("temperature_c", "temperature during the run", "°C", None)):
        mine = conditions.get(key)
        usual = _usual([other[key] for other in theirs if other.get(key) is not None])
        if mine is None or usual is None:
            continue
        if (worse is not None and mine < usual * worse) or (worse is None and mine > usual + 10):
            yield f"{label} {mine:g} {unit}, {usual:g} {unit} on its siblings"
    for attribute, label, unit in (("power_limit_w", "power limit", "W"), ("sm_clock_max_mhz", "max SM clock", "MHz"),
                                   ("memory_clock_max_mhz", "max memory clock", "MHz")):
        mine = getattr(device, attribute)
        usual = _usual([getattr(m.run.device, attribute) for m in others
                        if getattr(m.run.device, attribute) is not None])
        if mine is not None and usual is not None and mine < usual * 0.98:
            yield f"{label} {mine:g} {unit}, {usual:g} {unit} on its siblings"
    for attribute, label in (("driver_version", "driver"), ("torch_version", "torch"), ("cuda_version", "CUDA")):
        mine = getattr(device, attribute)
        versions = Counter(getattr(m.run.device, attribute) for m in others)
        usual_version, _ = versions.most_common(1)[0]
        if mine != usual_version and usual_version is not None:
            yield f"{label} {mine or 'unknown'}, {usual_version} on {name_list(sorted({m.label for m in others}), 2)}"
    if member.result.group != "transfer" or facts is None:
        return  # a narrow link slows host-device copies, not what runs on the GPU
    gpu = next((g for g in facts.gpus if g.index == member.gpu), None)
    current, widest = (gpu.pcie_width_current, gpu.pcie_width_max) if gpu is not None else (None, None)
    if gpu is not None and current and widest and current < widest:
        yield (f"PCIe link x{current} of x{widest} on the node's GPU {gpu.index} "
               "(NVML's numbering, which torch's follows under CUDA_DEVICE_ORDER=PCI_BUS_ID)")
