"""Facts: what the probes found, as plain data that can be saved, sent and replayed.

`gpufly doctor --save facts.json` writes a Facts document; `gpufly doctor --facts facts.json`
diagnoses one. Every field a probe could not read is None, with the reason in an ``error`` field
where one applies: probes never raise for "not there".

A saved file is read back through ``gpufly.records.from_dict``: strictly typed against the dataclasses'
own annotations, counts never negative (``Count``), plus a value check where a field has one (a version,
a compute capability, an architecture list entry), so doctor and install see the same, valid facts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec

from gpufly.doctor.compat import PLATFORMS, parse_arch, parse_compute_capability, parse_version
from gpufly.doctor.extensions import ExtensionFact
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext
from gpufly.jsonfile import read_json, write_json_atomic
from gpufly.records import Check, checked, from_dict, shown

SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, SCHEMA_VERSION)
"""Version 2 added the system facts (OS, libc, GCC, CPU), the libraries torch loaded and the import progress;
a version 1 file reads as one without them."""
FRAMEWORK_NAMES = ("torch", "tensorflow", "jax")
DRIVER_SOURCES = ("nvml", "nvidia-smi")
OS_NAMES = tuple(name for name in PLATFORMS if name != "wsl")
"""EnvFact.platform: the OS Python reports; WSL is Linux with ``in_wsl`` set."""
SAVE_HINT = "write the facts again with `gpufly doctor --save FILE`, or correct that field"
WRITE_HINT = "save to a file in a folder you can write, e.g. --save facts.json"
T = TypeVar("T")

Count = Annotated[int, msgspec.Meta(ge=0)]
"""A count, size, index or id: never negative; a figure a probe could not read is None instead."""


def _dotted(example: str) -> Check:
    """A version as doctor/compat.py will read it; ``example`` is what the hint shows."""
    return lambda value: parse_version(value, "version", example=example)


def _choice(kind: str, options: tuple[str, ...]) -> Check:
    def check(value: str) -> None:
        if value not in options:
            raise unknown_choice(kind, value, options)
    return check


def _timestamp(value: str) -> None:
    try:
        datetime.fromisoformat(value)
    except ValueError as exc:
        raise GpuflyError(f"cannot read time {value!r}", hint="expected ISO 8601, e.g. 2025-01-31T12:00:00+00:00"
                          ) from exc


DRIVER_VERSION = checked(_dotted("570.133.07"))
CUDA_VERSION = checked(_dotted("12.8"))
LIBRARY_VERSION = checked(_dotted("9.1.0"))
PYTHON_VERSION = checked(_dotted("3.12.3"))
RELEASE = checked(_dotted("2.7.1+cu128"))
"""A package version as pip shows it, local tag included (2.7.1+cu128, 2.13.0+cpu)."""
COMPUTE_CAPABILITY = checked(parse_compute_capability)
ARCH = checked(parse_arch)


@dataclass(frozen=True)
class ProcessFact:
    pid: Count
    name: str | None = None
    used_memory_bytes: Count | None = None


@dataclass(frozen=True)
class GpuFact:
    """One GPU as NVML or nvidia-smi reports it."""

    index: Count
    name: str
    compute_capability: str | None = field(default=None, metadata=COMPUTE_CAPABILITY)
    memory_total_bytes: Count | None = None
    memory_free_bytes: Count | None = None
    pcie_gen_current: Count | None = None
    pcie_gen_max: Count | None = None
    pcie_width_current: Count | None = None
    pcie_width_max: Count | None = None
    mig_mode: bool | None = None
    ecc_enabled: bool | None = None
    persistence_mode: bool | None = None
    processes: tuple[ProcessFact, ...] = ()


@dataclass(frozen=True)
class DriverFact:
    """The NVIDIA driver: its version and the newest CUDA it supports ("CUDA Version" in nvidia-smi)."""

    found: bool
    version: str | None = field(default=None, metadata=DRIVER_VERSION)
    cuda_version: str | None = field(default=None, metadata=CUDA_VERSION)
    source: str | None = field(default=None, metadata=checked(_choice("driver source", DRIVER_SOURCES)))
    """"nvml" or "nvidia-smi": where the facts came from."""
    error: str | None = None
    """Why no driver was found or it did not answer (library missing, driver not loaded...)."""


@dataclass(frozen=True)
class ToolkitFact:
    """A system CUDA toolkit and libraries, which matter only for building extensions."""

    nvcc_version: str | None = field(default=None, metadata=CUDA_VERSION)
    cudnn_version: str | None = field(default=None, metadata=LIBRARY_VERSION)
    nccl_version: str | None = field(default=None, metadata=LIBRARY_VERSION)


@dataclass(frozen=True)
class FrameworkFact:
    """One framework as a subprocess that imported it saw it."""

    name: str = field(metadata=checked(_choice("framework", FRAMEWORK_NAMES)))
    """"torch", "tensorflow" or "jax"."""
    installed: bool
    version: str | None = field(default=None, metadata=RELEASE)
    distribution: str | None = None
    """The pip package it came from (tensorflow, tensorflow-gpu, tensorflow-cpu, jax, jaxlib...)."""
    import_error: str | None = None
    timed_out: bool = False
    cuda_version: str | None = field(default=None, metadata=CUDA_VERSION)
    """The CUDA version the build targets (torch.version.cuda; TF's build info); None for a CPU build."""
    cudnn_version: str | None = field(default=None, metadata=LIBRARY_VERSION)
    """The cuDNN the framework loaded (torch.backends.cudnn.version()), not a system copy's headers."""
    nccl_version: str | None = field(default=None, metadata=LIBRARY_VERSION)
    """The NCCL torch uses (torch.cuda.nccl.version())."""
    libraries: tuple[str, ...] | None = None
    """The CUDA libraries the import loaded, by path: the wheel's own or a system copy found first."""
    gpu_available: bool | None = None
    device_count: Count | None = None
    arch_list: tuple[str, ...] | None = field(default=None, metadata=ARCH)
    """Compiled architectures, e.g. ("sm_75", "sm_80", "compute_90") (torch.cuda.get_arch_list())."""
    backend: str | None = None
    """JAX's default backend ("gpu", "cpu")."""
    stalled: bool = False
    """With ``timed_out``: the import had stopped making progress, rather than still moving when stopped."""
    last_stage: str | None = None
    """The last stage the import probe reported ("import torch._dynamo", "torch.cuda.is_available()")."""


@dataclass(frozen=True)
class EnvFact:
    cuda_visible_devices: str | None = None
    ld_library_path: str | None = None
    in_container: bool = False
    in_wsl: bool = False
    python_version: str | None = field(default=None, metadata=PYTHON_VERSION)
    platform: str | None = field(default=None, metadata=checked(_choice("platform", OS_NAMES)))
    """"linux", "windows" or "darwin"."""
    machine: str | None = None


@dataclass(frozen=True)
class CpuFact:
    model: str | None = None
    logical_cores: Count | None = None
    flags: tuple[str, ...] = ()
    """The vector and matrix extensions a bug report asks about (avx2, avx512f, amx_tile, sve...), as the OS
    names them; the rest of the CPU's flags are left out."""


@dataclass(frozen=True)
class SystemFact:
    """What ``torch.utils.collect_env`` puts in a bug report about the machine itself."""

    os: str | None = None
    """The distribution's name ("Ubuntu 22.04.4 LTS"), else the OS and its release."""
    kernel: str | None = None
    libc: str | None = None
    """ "glibc 2.35"; None where there is none to report (Windows, macOS)."""
    gcc_version: str | None = None
    cpu: CpuFact = field(default_factory=CpuFact)


@dataclass(frozen=True)
class Facts:
    """Everything the doctor knows about one machine."""

    driver: DriverFact
    gpus: tuple[GpuFact, ...] = ()
    toolkit: ToolkitFact = field(default_factory=ToolkitFact)
    frameworks: tuple[FrameworkFact, ...] = ()
    extensions: tuple[ExtensionFact, ...] = ()
    """GPU extension packages beside torch (flash-attn, xformers...): doctor/extensions.py."""
    env: EnvFact = field(default_factory=EnvFact)
    system: SystemFact = field(default_factory=SystemFact)
    collected_at: str | None = field(default=None, metadata=checked(_timestamp))

    def framework(self, name: str) -> FrameworkFact | None:
        return next((f for f in self.frameworks if f.name == name and f.installed), None)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def save(self, path: Path) -> None:
        """Write the facts atomically; a folder or a device node (/dev/full) is refused, not replaced."""
        write_json_atomic(path, self.to_dict(), hint=WRITE_HINT)


X86_GROUPS = (("AVX2", ("avx2",)), ("AVX-512", ("avx512",)), ("AMX", ("amx_",)), ("SVE", ("sve",)))


def _cpu_line(cpu: CpuFact) -> str | None:
    """ "Intel Xeon, 2 logical cores; AVX2 yes, AVX-512 yes (avx512f avx512_bf16), AMX no": each family said
    present or absent (on x86; SVE on Arm), so a missing AVX-512 is as visible as a present one. Where the
    flags were not read (not Linux), only the model."""
    if cpu.model is None and not cpu.flags:
        return None
    cores = ngettext("{count} logical core", "{count} logical cores", cpu.logical_cores or 0).format(
        count=cpu.logical_cores) if cpu.logical_cores else None
    head = ", ".join(part for part in (cpu.model, cores) if part)
    if not cpu.flags:
        return head or None
    arm = any(flag in cpu.flags for flag in ("asimd", "sve"))
    groups = X86_GROUPS[3:] if arm else X86_GROUPS[:3]
    said = []
    for label, prefixes in groups:
        found = [flag for flag in cpu.flags if flag.startswith(prefixes)]
        detail = f" ({' '.join(found)})" if len(found) > 1 else ""
        said.append(f"{label} {_('yes') if found else _('no')}{detail}")
    return f"{head}; {', '.join(said)}"


def _torch_line(torch: FrameworkFact) -> str:
    if torch.timed_out or torch.import_error:
        return _("{version}: not imported ({reason})").format(version=torch.version or _("installed"),
                                                                reason=torch.import_error or _("timed out"))
    if torch.cuda_version is None:
        return _("{version} (CPU build)").format(version=torch.version)
    loaded = [f"{name} {version}" for name, version in (("cuDNN", torch.cudnn_version),
                                                         ("NCCL", torch.nccl_version)) if version]
    line = _("{version}: CUDA runtime {cuda} (in the wheel)").format(version=torch.version, cuda=torch.cuda_version)
    line += _(", {libraries} loaded").format(libraries=_(" and ").join(loaded)) if loaded else ""
    system = [path for path in torch.libraries or () if not _from_a_package(path)]
    return line + (_("; loaded from outside the Python packages: {paths}").format(paths=", ".join(system))
                   if system else "")


def _from_a_package(path: str) -> bool:
    """Whether a loaded library came with a Python package (the wheel's own), or is the driver's libcuda, which
    always comes from the system."""
    name = path.rsplit("/", 1)[-1]
    return "-packages/" in path or name.startswith("libcuda.so")


def summary_lines(facts: Facts) -> list[tuple[str, str]]:
    """The facts a bug report needs, as (label, text) lines, each only where it was found: what
    ``torch.utils.collect_env`` prints, plus the driver and the CUDA toolkit on the system."""
    system, env, toolkit = facts.system, facts.env, facts.toolkit
    os_parts = [system.os, _("kernel {version}").format(version=system.kernel) if system.kernel else None,
                system.libc, "WSL" if env.in_wsl else None, _("container") if env.in_container else None]
    lines = [(_("OS"), ", ".join(part for part in os_parts if part)),
             (_("compiler"), f"GCC {system.gcc_version}" if system.gcc_version else ""),
             ("CPU", _cpu_line(system.cpu) or ""),
             ("Python", " ".join(part for part in (env.python_version, env.platform, env.machine) if part))]
    if facts.driver.found:
        cuda = f" (CUDA {facts.driver.cuda_version})" if facts.driver.cuda_version else ""
        lines.append((_("driver"), f"{facts.driver.version or _('version unknown')}{cuda}"))
    torch = facts.framework("torch")
    if torch is not None:
        lines.append(("torch", _torch_line(torch)))
    system_libs = [f"{name} {version}" for name, version in (("nvcc", toolkit.nvcc_version),
                                                             ("cuDNN", toolkit.cudnn_version),
                                                             ("NCCL", toolkit.nccl_version)) if version]
    if system_libs:
        lines.append((_("toolkit"), _("{libraries} on the system (used to build extensions, not by the wheels)")
                      .format(libraries=", ".join(system_libs))))
    return [(label, text) for label, text in lines if text]


def build_fact(cls: type[T], data: Any, where: str) -> T:
    """A fact dataclass from a JSON object, strictly: the doctor's use of ``gpufly.records.from_dict``.

    A wrong type, a null where an object or a required value belongs, a negative count, an unknown field
    (a facts file may be edited by hand), or a value that cannot be read (a version, a compute capability,
    an architecture) is a GpuflyError naming the field: "facts.json: env.cuda_visible_devices must be a
    string, got 0".
    """
    return from_dict(cls, data, where, hint=SAVE_HINT, unknown="error")


def facts_from_dict(data: Any, where: str = "facts") -> Facts:
    if not isinstance(data, dict):
        raise GpuflyError(f"{where} is not a facts document (expected a JSON object)",
                          hint="write one with `gpufly doctor --save FILE`")
    version = data.get("schema_version")
    if type(version) is not int or version not in READABLE_SCHEMA_VERSIONS:
        readable = " and ".join(str(v) for v in READABLE_SCHEMA_VERSIONS)
        raise GpuflyError(f"{where} has schema_version {shown(version)}; this gpufly reads {readable}",
                          hint="write the facts again with `gpufly doctor --save FILE`")
    body = {k: v for k, v in data.items() if k != "schema_version"}
    return build_fact(Facts, body, where)


def load_facts(path: Path) -> Facts:
    """Read a saved facts file; a broken or foreign file is a GpuflyError naming the problem."""
    data = read_json(path, missing=f"no such facts file: {path}", hint="write one with `gpufly doctor --save FILE`")
    return facts_from_dict(data, where=str(path))
