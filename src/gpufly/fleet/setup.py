"""What is set up differently across nodes: driver, CUDA, torch and its NCCL, GPU count and models, MIG, and PCIe
links narrower than they can be or than the same GPU's elsewhere in the fleet.

Pure logic over doctor facts. The value most nodes share is the fleet's; each node that differs is a finding.
Where no value is shared by more nodes than any other, the split itself is the finding, since nothing says which
side is right.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from gpufly.doctor import Facts, GpuFact
from gpufly.fleet.findings import FleetFinding, name_list
from gpufly.fleet.nodes import NodeData


def _torch_field(facts: Facts, read: Callable[[str | None], str], field: str) -> str:
    torch = facts.framework("torch")
    if torch is None:
        return "not installed"
    return read(getattr(torch, field))


def _driver(facts: Facts) -> str:
    if not facts.driver.found:
        return "none"
    return facts.driver.version or "version not read"


def _gpus(facts: Facts) -> str:
    if not facts.gpus:
        return "none"
    counts = Counter(gpu.name for gpu in facts.gpus)
    return ", ".join(f"{count} x {name}" for name, count in sorted(counts.items()))


def _mig(facts: Facts) -> str:
    enabled = [str(gpu.index) for gpu in facts.gpus if gpu.mig_mode]
    if enabled:
        return f"on for GPU {', '.join(enabled)}"
    return "off" if any(gpu.mig_mode is False for gpu in facts.gpus) else "not read"


@dataclass(frozen=True)
class Trait:
    """One thing every node should share, read from its facts as text."""

    name: str
    read: Callable[[Facts], str]


TRAITS: tuple[Trait, ...] = (
    Trait("driver", _driver),
    Trait("driver's CUDA", lambda f: (f.driver.cuda_version or "not read") if f.driver.found else "no driver"),
    Trait("torch", lambda f: _torch_field(f, lambda v: v or "version not read", "version")),
    Trait("torch's CUDA build", lambda f: _torch_field(f, lambda v: v or "CPU build", "cuda_version")),
    Trait("torch's cuDNN", lambda f: _torch_field(f, lambda v: v or "none loaded", "cudnn_version")),
    Trait("torch's NCCL", lambda f: _torch_field(f, lambda v: v or "none", "nccl_version")),
    Trait("GPUs", _gpus),
    Trait("MIG", _mig),
    Trait("ECC", lambda f: ", ".join(
        f"GPU {g.index} {'on' if g.ecc_enabled else 'off' if g.ecc_enabled is False else 'not reported'}"
        for g in f.gpus) or "no GPU"),
)
"""What each node's doctor facts say, compared across the fleet: a value most nodes share is the norm."""


def _odd_ones(subject: str, values: dict[str, str], kind: str = "setup") -> Iterator[FleetFinding]:
    """A finding for each node whose value differs from the one most nodes share, or one for a split fleet."""
    counts = Counter(values.values())
    if len(counts) < 2:
        return
    (common, most), (_, next_most) = counts.most_common(2)
    if most == next_most:
        split = "; ".join(f"{value} on {name_list([n for n, v in values.items() if v == value])}"
                          for value, _ in counts.most_common())
        yield FleetFinding(kind, subject, f"{subject} differs with no majority: {split}")
        return
    for node, value in values.items():
        if value != common:
            yield FleetFinding(kind, subject, f"{node}: {subject} {value}; {most} of {len(values)} nodes have "
                                              f"{common}", node=node)


def trait_findings(nodes: Sequence[NodeData], traits: Iterable[Trait] = TRAITS) -> Iterator[FleetFinding]:
    """Each trait compared across the nodes that have doctor facts."""
    described = {node.name: node.facts for node in nodes if node.facts is not None}
    if len(described) < 2:
        return
    for trait in traits:
        yield from _odd_ones(trait.name, {name: trait.read(facts) for name, facts in described.items()})


def _narrow_links(node: str, gpu: GpuFact) -> Iterator[FleetFinding]:
    if gpu.pcie_width_current and gpu.pcie_width_max and gpu.pcie_width_current < gpu.pcie_width_max:
        yield FleetFinding("link", "PCIe width", f"{node} GPU {gpu.index} ({gpu.name}): PCIe link x"
                           f"{gpu.pcie_width_current} of x{gpu.pcie_width_max}: it trained narrower than it can "
                           "(a card not fully seated, a riser, a dirty or damaged slot)", node=node, gpu=gpu.index)


LINK_LIMITS = (("pcie_width_max", "PCIe width", "x{}"), ("pcie_gen_max", "PCIe generation", "Gen {}"))
"""The most a GPU's link can do, which NVML reads for the GPU and the slot together: identical GPUs in identical
nodes should agree. The current generation is left out: an idle GPU lowers it to save power."""


def link_findings(nodes: Sequence[NodeData]) -> Iterator[FleetFinding]:
    """Links narrower than they can train to, and link limits that differ from identical GPUs' in the fleet."""
    by_model: dict[str, list[tuple[str, GpuFact]]] = defaultdict(list)
    for node in nodes:
        for gpu in node.facts.gpus if node.facts is not None else ():
            yield from _narrow_links(node.name, gpu)
            by_model[gpu.name].append((node.name, gpu))
    for model, members in sorted(by_model.items()):
        for field, label, shown in LINK_LIMITS:
            values = {(name, gpu.index): getattr(gpu, field) for name, gpu in members
                      if getattr(gpu, field) is not None}
            counts = Counter(values.values())
            if len(counts) < 2:
                continue
            (common, most), (_, next_most) = counts.most_common(2)
            for (name, index), value in sorted(values.items()):
                if most > next_most and value != common:
                    yield FleetFinding("link", label, f"{name} GPU {index} ({model}): {label} at most "
                                       f"{shown.format(value)} where {most} of {len(values)} {model} reach "
                                       f"{shown.format(common)} (the slot, a riser or a BIOS setting limits it)",
                                       node=name, gpu=index)
            if most == next_most:
                split = "; ".join(f"{shown.format(value)} on {count}" for value, count in counts.most_common())
                yield FleetFinding("link", label, f"{model}: {label} at most differs with no majority: {split}")
