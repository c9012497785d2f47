"""The fleet report: every node in one line, and every finding (files, failed nodes, setup, links, slow GPUs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.fleet.ceilings import DEFAULT_TOLERANCE, slow_gpus
from gpufly.fleet.findings import FleetFinding
from gpufly.fleet.nodes import FleetInput, NodeData
from gpufly.fleet.setup import link_findings, trait_findings

SCHEMA_VERSION = 1
"""Of `gpufly fleet report --json`."""


@dataclass(frozen=True)
class NodeSummary:
    name: str
    gpus: tuple[str, ...] | None
    """Each GPU's model, in index order; None without doctor facts."""
    driver: str | None
    torch: str | None
    bench_runs: int
    failed: bool
    sources: tuple[str, ...]

    @classmethod
    def of(cls, node: NodeData) -> NodeSummary:
        facts = node.facts
        torch = facts.framework("torch") if facts is not None else None
        return cls(name=node.name, gpus=tuple(g.name for g in facts.gpus) if facts is not None else None,
                   driver=facts.driver.version if facts is not None else None,
                   torch=torch.version if torch is not None else None, bench_runs=len(node.runs),
                   failed=bool(node.problems) and facts is None and not node.runs, sources=node.sources)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": list(self.gpus) if self.gpus is not None else None, "driver": self.driver,
                "torch": self.torch, "bench_runs": self.bench_runs, "failed": self.failed,
                "sources": list(self.sources)}


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[NodeSummary, ...]
    findings: tuple[FleetFinding, ...]
    tolerance: float
    compared: int
    """GPU bench figures compared with identical GPUs."""
    alone: int
    """GPU bench figures with no identical GPU to compare with."""
    skipped_files: int = 0

    @property
    def uniform(self) -> bool:
        """Nothing differs, failed or fell behind."""
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "uniform": self.uniform, "tolerance": self.tolerance,
                "compared": self.compared, "alone": self.alone, "skipped_files": self.skipped_files,
                "nodes": [node.to_dict() for node in self.nodes],
                "findings": [finding.to_dict() for finding in self.findings]}


def check_tolerance(tolerance: float) -> float:
    if not 0 < tolerance < 1:
        raise GpuflyError(f"--tolerance {tolerance:g} is not a fraction between 0 and 1",
                          hint="e.g. --tolerance 0.1 flags a GPU more than 10% behind identical ones")
    return tolerance


def build_report(fleet: FleetInput, tolerance: float = DEFAULT_TOLERANCE,
                 expected: Sequence[str] = ()) -> FleetReport:
    """Compare the nodes: file and node problems first (an ``expected`` node with no file at all among them, since
    a node whose job never ran writes nothing), then setup, links and slow GPUs."""
    check_tolerance(tolerance)
    present = {node.name for node in fleet.nodes}
    findings = [FleetFinding("node", "missing", f"{name}: no file from this node (its job did not run, or did not "
                             "save)", node=name) for name in dict.fromkeys(expected) if name not in present]
    findings += [FleetFinding("file", problem.path, problem.reason) for problem in fleet.problems]
    findings += [FleetFinding("node", "failed", f"{node.name}: {problem}", node=node.name)
                 for node in fleet.nodes for problem in node.problems]
    findings += trait_findings(fleet.nodes)
    findings += link_findings(fleet.nodes)
    ceilings = slow_gpus(fleet.nodes, tolerance)
    findings += ceilings.findings
    return FleetReport(tuple(NodeSummary.of(node) for node in fleet.nodes), tuple(findings), tolerance,
                       ceilings.compared, ceilings.alone, fleet.skipped)
