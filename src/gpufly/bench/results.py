"""Results of a bench run and the file they are saved in: a versioned schema, checked on load."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gpufly.bench.timing import Timing
from gpufly.errors import GpuflyError
from gpufly.jsonfile import read_json

SCHEMA_VERSION = 1
KIND = "gpufly.bench"


@dataclass(frozen=True)
class DeviceFacts:
    """The device a run measured and the software around it; a field that cannot be read is None."""

    kind: str
    name: str
    index: int | None = None
    catalog_id: str | None = None
    memory_total_bytes: int | None = None
    compute_capability: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    cudnn_version: int | None = None
    torch_version: str | None = None
    python_version: str | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_max_mhz: int | None = None
    power_limit_w: float | None = None
    cpu_model: str | None = None
    cpu_threads: int | None = None
    cpu_logical_cores: int | None = None
    cpu_physical_cores: int | None = None
    os: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def summary(self) -> str:
        """One line: what was measured, with which software."""
        if self.kind == "cpu":
            threads = f"{self.cpu_threads} thread" + ("" if self.cpu_threads == 1 else "s")
            what = f"CPU {self.cpu_model or self.name}, {threads}"
        else:
            clocks = f", SM {self.sm_clock_max_mhz} MHz max" if self.sm_clock_max_mhz else ""
            power = f", {self.power_limit_w:.0f} W limit" if self.power_limit_w else ""
            what = f"{self.name} (driver {self.driver_version or '?'}, CUDA {self.cuda_version or '?'}{clocks}{power})"
        return f"{what}; torch {self.torch_version or '?'}"


@dataclass(frozen=True)
class BenchResult:
    """One measured figure beside its datasheet peak; value and peak are in ``unit`` (FLOP/s, B/s, s)."""

    name: str
    group: str
    metric: str
    value: float
    unit: str
    params: dict[str, Any]
    timing: Timing
    peak: float | None = None
    peak_source: str | None = None
    percent_of_peak: float | None = None
    conditions: dict[str, Any] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["timing"] = self.timing.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        return cls(**{**data, "timing": Timing.from_dict(data["timing"])})


@dataclass(frozen=True)
class BenchError:
    """A benchmark that could not run here (unsupported precision, out of memory), and why."""

    name: str
    group: str
    error: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BenchRun:
    """Everything one `gpufly bench` run measured, with the device and settings beside the numbers."""

    device: DeviceFacts
    started_at: str
    settings: dict[str, Any] = field(default_factory=dict)
    results: list[BenchResult] = field(default_factory=list)
    errors: list[BenchError] = field(default_factory=list)
    finished_at: str | None = None
    schema_version: int = SCHEMA_VERSION

    def result(self, name: str) -> BenchResult | None:
        return next((r for r in self.results if r.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "kind": KIND,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "settings": self.settings,
            "device": self.device.to_dict(),
            "results": [r.to_dict() for r in self.results],
            "errors": [e.to_dict() for e in self.errors],
        }

    def save(self, path: Path) -> None:
        """Write the run to ``path`` atomically, so an interrupted run leaves a whole file behind."""
        path = Path(path)
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            with os.fdopen(handle, "w") as out:
                out.write(text)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except OSError as exc:
            raise GpuflyError(f"cannot write {path}: {exc.strerror or exc}",
                              "save to a file in a folder you can write, e.g. --save bench.json") from exc

    @classmethod
    def from_dict(cls, data: Any, source: str = "bench results") -> BenchRun:
        """Check and read a saved run; anything malformed is a GpuflyError naming what is wrong."""
        hint = "pass a file written by `gpufly bench --save`"
        if not isinstance(data, dict) or data.get("kind", KIND) != KIND:
            raise GpuflyError(f"{source} is not a gpufly bench result", hint=hint)
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise GpuflyError(f"{source} has no schema_version", hint=hint)
        if version > SCHEMA_VERSION:
            raise GpuflyError(f"{source} has schema_version {version}; this gpufly reads up to {SCHEMA_VERSION}",
                              hint="upgrade gpufly to read it")
        if version < 1:
            raise GpuflyError(f"{source} has an invalid schema_version {version}", hint=hint)
        try:
            return cls(
                device=DeviceFacts(**data["device"]),
                started_at=str(data["started_at"]),
                finished_at=data.get("finished_at"),
                settings=dict(data.get("settings") or {}),
                results=[_checked(BenchResult.from_dict(r)) for r in data["results"]],
                errors=[BenchError(**e) for e in data.get("errors", [])],
                schema_version=version,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise GpuflyError(f"{source} is malformed ({type(exc).__name__}: {exc})", hint=hint) from exc


def _checked(result: BenchResult) -> BenchResult:
    if not isinstance(result.value, int | float) or isinstance(result.value, bool):
        raise ValueError(f"result {result.name!r} has a non-numeric value")
    if not all(isinstance(t, int | float) for t in (result.timing.median_s, result.timing.min_s, result.timing.max_s)):
        raise ValueError(f"result {result.name!r} has a timing without seconds")
    if not isinstance(result.params, dict):
        raise ValueError(f"result {result.name!r} has params that are not an object")
    return result


def load_run(path: Path) -> BenchRun:
    """Read a run saved by `gpufly bench --save`."""
    path = Path(path)
    data = read_json(path, missing=f"cannot read {path}: no such file",
                     hint="pass a file written by `gpufly bench --save`")
    return BenchRun.from_dict(data, source=str(path))
