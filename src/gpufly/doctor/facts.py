"""Facts: what the probes found, as plain data that can be saved, sent and replayed.

`gpufly doctor --save facts.json` writes a Facts document; `gpufly doctor --facts facts.json`
diagnoses one. Every field a probe could not read is None, with the reason in an ``error`` field
where one applies: probes never raise for "not there".
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from gpufly.errors import GpuflyError
from gpufly.jsonfile import read_json

SCHEMA_VERSION = 1
T = TypeVar("T")


@dataclass(frozen=True)
class ProcessFact:
    pid: int
    name: str | None = None
    used_memory_bytes: int | None = None


@dataclass(frozen=True)
class GpuFact:
    """One GPU as NVML or nvidia-smi reports it."""

    index: int
    name: str
    compute_capability: str | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    mig_mode: bool | None = None
    persistence_mode: bool | None = None
    processes: tuple[ProcessFact, ...] = ()


@dataclass(frozen=True)
class DriverFact:
    """The NVIDIA driver: its version and the newest CUDA it supports ("CUDA Version" in nvidia-smi)."""

    found: bool
    version: str | None = None
    cuda_version: str | None = None
    source: str | None = None
    """"nvml" or "nvidia-smi": where the facts came from."""
    error: str | None = None
    """Why no driver was found or it did not answer (library missing, driver not loaded...)."""


@dataclass(frozen=True)
class ToolkitFact:
    """A system CUDA toolkit and libraries, which matter only for building extensions."""

    nvcc_version: str | None = None
    cudnn_version: str | None = None
    nccl_version: str | None = None


@dataclass(frozen=True)
class FrameworkFact:
    """One framework as a subprocess that imported it saw it."""

    name: str
    """"torch", "tensorflow" or "jax"."""
    installed: bool
    version: str | None = None
    distribution: str | None = None
    """The pip package it came from (tensorflow, tensorflow-gpu, tensorflow-cpu, jax, jaxlib...)."""
    import_error: str | None = None
    timed_out: bool = False
    cuda_version: str | None = None
    """The CUDA version the build targets (torch.version.cuda; TF's build info); None for a CPU build."""
    cudnn_version: str | None = None
    gpu_available: bool | None = None
    device_count: int | None = None
    arch_list: tuple[str, ...] | None = None
    """Compiled architectures, e.g. ("sm_75", "sm_80", "compute_90") (torch.cuda.get_arch_list())."""
    backend: str | None = None
    """JAX's default backend ("gpu", "cpu")."""


@dataclass(frozen=True)
class EnvFact:
    cuda_visible_devices: str | None = None
    ld_library_path: str | None = None
    in_container: bool = False
    in_wsl: bool = False
    python_version: str | None = None
    platform: str | None = None
    """"linux", "windows" or "darwin"."""
    machine: str | None = None


@dataclass(frozen=True)
class Facts:
    """Everything the doctor knows about one machine."""

    driver: DriverFact
    gpus: tuple[GpuFact, ...] = ()
    toolkit: ToolkitFact = field(default_factory=ToolkitFact)
    frameworks: tuple[FrameworkFact, ...] = ()
    env: EnvFact = field(default_factory=EnvFact)
    collected_at: str | None = None

    def framework(self, name: str) -> FrameworkFact | None:
        return next((f for f in self.frameworks if f.name == name and f.installed), None)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def _build(cls: type[T], data: Any, where: str) -> T:
    """A dataclass from a dict, with tuples for lists and nested facts, naming what is wrong."""
    if not isinstance(data, dict):
        raise GpuflyError(f"{where} should be an object, got {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise GpuflyError(f"{where} has unknown field(s) {', '.join(unknown)}")
    nested = {"driver": DriverFact, "toolkit": ToolkitFact, "env": EnvFact}
    lists = {"gpus": GpuFact, "frameworks": FrameworkFact, "processes": ProcessFact}
    values: dict[str, Any] = {}
    for name, value in data.items():
        if name in nested and value is not None:
            values[name] = _build(nested[name], value, f"{where}.{name}")
        elif name in lists:
            if not isinstance(value, list):
                raise GpuflyError(f"{where}.{name} should be a list")
            values[name] = tuple(_build(lists[name], item, f"{where}.{name}[{i}]") for i, item in enumerate(value))
        elif name == "arch_list" and value is not None:
            values[name] = tuple(value)
        else:
            values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise GpuflyError(f"{where} is missing a field: {exc}") from exc


def facts_from_dict(data: Any, where: str = "facts") -> Facts:
    if not isinstance(data, dict):
        raise GpuflyError(f"{where} is not a facts document (expected a JSON object)")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise GpuflyError(f"{where} has schema_version {version!r}; this gpufly reads {SCHEMA_VERSION}",
                          hint="write the facts again with `gpufly doctor --save FILE`")
    body = {k: v for k, v in data.items() if k != "schema_version"}
    return _build(Facts, body, where)


def load_facts(path: Path) -> Facts:
    """Read a saved facts file; a broken or foreign file is a GpuflyError naming the problem."""
    data = read_json(path, missing=f"no such facts file: {path}", hint="write one with `gpufly doctor --save FILE`")
    return facts_from_dict(data, where=str(path))
