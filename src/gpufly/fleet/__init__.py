"""Many nodes: their doctor facts and bench runs side by side, what differs, and which GPU falls behind its
identical siblings.

``read_fleet(paths)`` reads the files any scheduler wrote (`srun gpufly doctor --save ...`), ``run_on_ray``
collects them from every node of a Ray cluster, and ``build_report`` compares the nodes. Importing this package
imports neither Ray nor torch.
"""

from gpufly.fleet.ceilings import DEFAULT_TOLERANCE, CeilingCheck, Measurement, slow_gpus
from gpufly.fleet.findings import KINDS, FleetFinding
from gpufly.fleet.node_job import QUICK_BENCH, NodeJob, quick_bench, run_node_job
from gpufly.fleet.nodes import FileProblem, FleetInput, NodeData, node_name, read_fleet, save_node
from gpufly.fleet.ray_run import DEFAULT_TIMEOUT_S, RayNode, cluster_nodes, run_on_ray
from gpufly.fleet.report import FleetReport, NodeSummary, build_report, check_tolerance
from gpufly.fleet.setup import TRAITS, Trait, link_findings, trait_findings

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_TOLERANCE",
    "KINDS",
    "QUICK_BENCH",
    "TRAITS",
    "CeilingCheck",
    "FileProblem",
    "FleetFinding",
    "FleetInput",
    "FleetReport",
    "Measurement",
    "NodeData",
    "NodeJob",
    "NodeSummary",
    "RayNode",
    "Trait",
    "build_report",
    "check_tolerance",
    "cluster_nodes",
    "link_findings",
    "node_name",
    "quick_bench",
    "read_fleet",
    "run_node_job",
    "run_on_ray",
    "save_node",
    "slow_gpus",
    "trait_findings",
]
