"""What `gpufly fleet run` does on each node: the doctor's probes, then a bench function, returned as plain data.

This runs inside a Ray worker on the node (a worker of its own, which exits after the job, so the GPUs are left
as the job found them). The bench is a ``module:function`` (or ``file.py:function``) reference resolved on the
node, so a test, or a team with its own acceptance check, can run another one; the default is the quick bench
on every GPU, one after the other (GPUs measured at once would share the host's PCIe and CPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpufly.bench import BenchRun

QUICK_BENCH = "gpufly.fleet.node_job:quick_bench"


@dataclass(frozen=True)
class NodeJob:
    """The work each node does; it travels to the nodes, so it holds only names and flags."""

    bench: str | None = QUICK_BENCH
    """The function that measures this node's GPUs and returns its bench runs; None: no bench."""
    import_frameworks: bool = True
    """Import each framework in a child process, as `gpufly doctor` does (False reads their files instead)."""


def quick_bench() -> list[BenchRun]:
    """`gpufly bench --quick` on each GPU this node's job was given, in turn; none without a CUDA GPU."""
    from gpufly.bench import open_device, run_benchmarks
    from gpufly.extras import require

    torch = require("torch", "the fleet's quick bench")
    if not torch.cuda.is_available():
        return []
    runs = []
    for index in range(torch.cuda.device_count()):
        device = open_device(f"cuda:{index}")
        runs.append(run_benchmarks(device, device.plan(quick=True),
                                   settings={"device": device.label, "quick": True, "only": []}))
    return runs


def run_node_job(job: NodeJob) -> dict[str, Any]:
    """The doctor's facts and the bench runs, as JSON-ready dicts (the saved files' shapes), and what failed.

    A doctor that raises fails the node (the caller records why); a bench that raises is a problem beside the
    facts, which still count.
    """
    from gpufly.doctor import probe_all
    from gpufly.loading import load_function, one_line

    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # torch's cuda:N is then NVML's (and the doctor's) N
    facts = probe_all(import_frameworks=job.import_frameworks)
    payload: dict[str, Any] = {"facts": facts.to_dict(), "runs": [], "problems": []}
    if job.bench is not None:
        try:
            payload["runs"] = [run.to_dict() for run in load_function(job.bench, example="bench")()]
        except Exception as exc:  # whatever the bench raises, this node's facts still count
            payload["problems"].append(f"the bench did not run: {one_line(exc)}")
    return payload
