"""Host facts through psutil and the platform module: OS, CPU, memory."""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class HostFacts:
    """The machine around the GPUs. Counts and bytes are None where the OS will not say."""

    os: str
    kernel: str
    machine: str
    python: str
    cpu_model: str
    cpu_physical_cores: int | None
    cpu_logical_cores: int | None
    memory_total_bytes: int
    memory_available_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name: /proc/cpuinfo on Linux, the platform module elsewhere."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def os_name() -> str:
    try:
        release = platform.freedesktop_os_release()
        return release.get("PRETTY_NAME") or release.get("NAME") or "Linux"
    except OSError:
        return f"{platform.system()} {platform.release()}".strip() or "unknown OS"


def probe_host() -> HostFacts:
    memory = psutil.virtual_memory()
    return HostFacts(
        os=os_name(),
        kernel=f"{platform.system()} {platform.release()}",
        machine=platform.machine(),
        python=platform.python_version(),
        cpu_model=cpu_model(),
        cpu_physical_cores=psutil.cpu_count(logical=False),
        cpu_logical_cores=psutil.cpu_count(logical=True),
        memory_total_bytes=int(memory.total),
        memory_available_bytes=int(memory.available),
    )
