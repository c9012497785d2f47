"""Facts: what the probes found, as plain data that can be saved, sent and replayed.

`gpufly doctor --save facts.json` writes a Facts document; `gpufly doctor --facts facts.json`
diagnoses one. Every field a probe could not read is None, with the reason in an ``error`` field
where one applies: probes never raise for "not there".

A saved file is checked field by field when it is read back, against the dataclasses' own
annotations plus a value check where a field has one (``metadata={"check": ...}``: a version, a
compute capability, an architecture list entry), so doctor and install see the same, valid facts.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from gpufly.doctor.compat import PLATFORMS, parse_arch, parse_compute_capability, parse_version
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.jsonfile import read_json

SCHEMA_VERSION = 1
FRAMEWORK_NAMES = ("torch", "tensorflow", "jax")
DRIVER_SOURCES = ("nvml", "nvidia-smi")
OS_NAMES = tuple(name for name in PLATFORMS if name != "wsl")
"""EnvFact.platform: the OS Python reports; WSL is Linux with ``in_wsl`` set."""
SAVE_HINT = "write the facts again with `gpufly doctor --save FILE`, or correct that field"
T = TypeVar("T")
Check = Callable[[Any], object]
"""Raises GpuflyError (with a hint) for a value of the right type that still makes no sense; its result is unused."""

_RELEASE = re.compile(r"^\d+(\.\d+)*[A-Za-z0-9.+!_-]*$")


def _dotted(example: str) -> Check:
    """A version of dotted numbers, read as doctor/compat.py will read it."""
    return lambda value: parse_version(value, "version", example=example)


def _release(value: str) -> None:
    """A package version as pip shows it: dotted numbers, then any pre-release or local tag (2.7.1+cu128)."""
    if not _RELEASE.match(value):
        raise GpuflyError(f"cannot read version {value!r}", hint="expected a package version, e.g. 2.7.1+cu128")


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


def _checked(check: Check) -> dict[str, Check]:
    return {"check": check}


DRIVER_VERSION = _checked(_dotted("570.133.07"))
CUDA_VERSION = _checked(_dotted("12.8"))
LIBRARY_VERSION = _checked(_dotted("9.1.0"))
PYTHON_VERSION = _checked(_dotted("3.12.3"))
COMPUTE_CAPABILITY = _checked(parse_compute_capability)
ARCH = _checked(parse_arch)
RELEASE = _checked(_release)


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
    compute_capability: str | None = field(default=None, metadata=COMPUTE_CAPABILITY)
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
    version: str | None = field(default=None, metadata=DRIVER_VERSION)
    cuda_version: str | None = field(default=None, metadata=CUDA_VERSION)
    source: str | None = field(default=None, metadata=_checked(_choice("driver source", DRIVER_SOURCES)))
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

    name: str = field(metadata=_checked(_choice("framework", FRAMEWORK_NAMES)))
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
    gpu_available: bool | None = None
    device_count: int | None = None
    arch_list: tuple[str, ...] | None = field(default=None, metadata=ARCH)
    """Compiled architectures, e.g. ("sm_75", "sm_80", "compute_90") (torch.cuda.get_arch_list())."""
    backend: str | None = None
    """JAX's default backend ("gpu", "cpu")."""


@dataclass(frozen=True)
class EnvFact:
    cuda_visible_devices: str | None = None
    ld_library_path: str | None = None
    in_container: bool = False
    in_wsl: bool = False
    python_version: str | None = field(default=None, metadata=PYTHON_VERSION)
    platform: str | None = field(default=None, metadata=_checked(_choice("platform", OS_NAMES)))
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
    collected_at: str | None = field(default=None, metadata=_checked(_timestamp))

    def framework(self, name: str) -> FrameworkFact | None:
        return next((f for f in self.frameworks if f.name == name and f.installed), None)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **asdict(self)}

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def _shown(value: Any) -> str:
    """A value as the JSON file spells it: null, "yes", 570."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(hint: Any) -> str:
    """What a type annotation asks for, in the words of a JSON file."""
    if is_dataclass(hint):
        return "an object"
    if get_origin(hint) is tuple:
        return "a list"
    return {bool: "true or false", int: "a whole number", str: "a string"}.get(hint, getattr(hint, "__name__", "?"))


class _Bad(Exception):
    """Internal: a value that does not fit the field at ``path`` ("gpus[0].name"); ``message`` says how."""

    def __init__(self, path: str, message: str, hint: str | None = None) -> None:
        super().__init__(f"{path} {message}")
        self.path, self.message, self.hint = path, message, hint


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _convert(hint: Any, value: Any, path: str, check: Check | None) -> Any:
    """``value`` as the annotation ``hint`` wants it (tuples for lists, dataclasses for objects), or _Bad."""
    if get_origin(hint) in (Union, types.UnionType):
        options = [arg for arg in get_args(hint) if arg is not type(None)]
        if value is None and len(options) < len(get_args(hint)):
            return None
        hint = options[0]
    if value is None:
        raise _Bad(path, f"must be {_kind(hint)}, got null")
    if is_dataclass(hint):
        return _object(hint, value, path)
    if get_origin(hint) is tuple:
        if not isinstance(value, list | tuple):
            raise _Bad(path, f"must be a list, got {_shown(value)}")
        item = get_args(hint)[0]
        return tuple(_convert(item, entry, f"{path}[{i}]", check) for i, entry in enumerate(value))
    wrong_type = not isinstance(value, hint) or (hint is int and isinstance(value, bool))
    if wrong_type:
        raise _Bad(path, f"must be {_kind(hint)}, got {_shown(value)}")
    if hint is int and value < 0:
        raise _Bad(path, f"must not be negative, got {value}", hint="counts, sizes, indexes and ids are never "
                   "negative; the probe writes null for a figure it could not read")
    if check is not None:
        try:
            check(value)
        except GpuflyError as exc:
            raise _Bad(path, f"is not valid: {exc.message}", hint=exc.hint) from exc
    return value


def _object(cls: type[T], data: Any, path: str) -> T:
    if not isinstance(data, dict):
        raise _Bad(path, f"must be an object, got {_shown(data)}")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _Bad(path, f"has unknown field(s) {', '.join(unknown)}", hint=f"its fields: {', '.join(known)}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for name, spec in known.items():
        where = f"{path}.{name}" if path else name
        if name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise _Bad(where, "is missing (a required field)")
            continue
        values[name] = _convert(hints[name], data[name], where, spec.metadata.get("check"))
    return cls(**values)


def build_fact(cls: type[T], data: Any, where: str) -> T:
    """A dataclass from a JSON object, every value checked against its field's annotation and check.

    A wrong type, a null where an object or a required value belongs, a negative count, or a value
    that cannot be read (a version, a compute capability, an architecture) is a GpuflyError naming
    the field: "facts.json: env.cuda_visible_devices must be a string, got 0".
    """
    try:
        return _object(cls, data, "")
    except _Bad as bad:
        message = f"{where}: {bad.path} {bad.message}" if bad.path else f"{where} {bad.message}"
        raise GpuflyError(message, hint=bad.hint or SAVE_HINT) from None


def facts_from_dict(data: Any, where: str = "facts") -> Facts:
    if not isinstance(data, dict):
        raise GpuflyError(f"{where} is not a facts document (expected a JSON object)",
                          hint="write one with `gpufly doctor --save FILE`")
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise GpuflyError(f"{where} has schema_version {_shown(version)}; this gpufly reads {SCHEMA_VERSION}",
                          hint="write the facts again with `gpufly doctor --save FILE`")
    body = {k: v for k, v in data.items() if k != "schema_version"}
    return build_fact(Facts, body, where)


def load_facts(path: Path) -> Facts:
    """Read a saved facts file; a broken or foreign file is a GpuflyError naming the problem."""
    data = read_json(path, missing=f"no such facts file: {path}", hint="write one with `gpufly doctor --save FILE`")
    return facts_from_dict(data, where=str(path))
