"""One moment of the machine: every GPU, its processes and the host, as plain data.

A ``Snapshot`` is what every backend produces (NVML live, or a replayed file) and what every view
consumes (the terminal UI, ``top --once``, the CSV/JSONL logger, the Prometheus exporter, the web
page). Its parts are the hardware layer's samples (``gpufly.hw``). A field the card does not report is
None and is rendered "N/A"; nothing here guesses.

The JSONL form (``Snapshot.to_dict`` / ``Snapshot.from_dict``) is the recording format: `gpufly
watch` writes one snapshot per line and ``--replay`` reads them back, so the two cannot drift.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpufly.hw import GpuSample, HostSample
from gpufly.records import from_dict

SCHEMA_VERSION = 1
"""Version of one JSONL line; bumped when a field changes meaning, never when one is added."""


@dataclass
class JobSample:
    """A scheduler job with processes on the GPUs (``gpufly serve --attribute``): a Slurm job or a Kubernetes pod.

    ``pids`` are its GPU processes in this snapshot (their ``ProcessSample``s give the GPUs and memory); a job
    whose processes are all gone is in no snapshot, so the exporter forgets it. Empty strings where a source
    does not say (``gpufly.monitor.attribution`` tells what each source gives).
    """

    scheduler: str
    """``slurm`` or ``k8s``."""
    key: str
    """The Slurm job id or the pod UID: the ``job`` label."""
    user: str = ""
    name: str = ""
    partition: str = ""
    namespace: str = ""
    container: str = ""
    pids: list[int] = field(default_factory=list)


@dataclass
class Snapshot:
    """Everything one sample saw. ``gpu_status`` says in words why there are no GPUs, when there are none."""

    time: float
    hostname: str = "unknown"
    gpus: list[GpuSample] = field(default_factory=list)
    host: HostSample = field(default_factory=HostSample)
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpu_status: str | None = None
    jobs: list[JobSample] = field(default_factory=list)
    """Jobs the GPU processes belong to, when attribution was asked for (empty otherwise)."""

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any, where: str = "recording") -> Snapshot:
        """Rebuild a snapshot from its JSONL form; a GpuflyError naming the field when one is wrong.

        Keys this version does not know (written by a newer gpufly) are ignored, so old readers play new files.
        """
        return from_dict(cls, data, where, unknown="ignore")
