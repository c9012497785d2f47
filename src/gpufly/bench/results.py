"""Results of a bench run and the file they are saved in: a versioned schema, checked on load.

A saved run is read back through ``gpufly.records.from_dict``, strictly: a value that is not a number, a
timing without its seconds, a field this version does not know is one error naming the field
("run.json: results[0].value must be a number, got "fast"").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gpufly.bench.timing import Timing
from gpufly.errors import GpuflyError
from gpufly.jsonfile import read_json, write_json_atomic
from gpufly.records import checked, finite_number, from_dict

SCHEMA_VERSION = 2
"""2 added each figure's interval, its noisy mark and reason, its attempts, and its timing's interval; version 1
files still read (without them)."""
KIND = "gpufly.bench"
READ_HINT = "pass a file written by `gpufly bench --save`"
WRITE_HINT = "save to a file in a folder you can write, e.g. --save bench.json"


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
    """One measured figure beside its datasheet peak; value, its interval and peak are in ``unit`` (FLOP/s, B/s, s).

    ``value_low``..``value_high`` is the interval of the median (``timing.ci_level``, about 95%); ``noisy`` says it
    stayed wider than the run's noise limit after ``attempts`` measurements, and ``noise`` says why.
    ``conditions`` holds what the machine was doing at the start and at the end (load, busy processes, clocks).
    """

    name: str
    group: str
    metric: str
    value: float = field(metadata=checked(finite_number))
    unit: str
    params: dict[str, Any]
    timing: Timing
    peak: float | None = None
    peak_source: str | None = None
    percent_of_peak: float | None = None
    conditions: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    value_low: float | None = None
    value_high: float | None = None
    noisy: bool = False
    noise: str | None = None
    attempts: int = 1

    @property
    def busy_processes(self) -> list[dict[str, Any]]:
        """The other processes busy just before or during the measurement (bench/conditions.py), once each."""
        seen: dict[int, dict[str, Any]] = {}
        for moment in ("end", "start"):
            for process in self.conditions.get(moment, {}).get("busy_processes", []):
                seen.setdefault(process["pid"], process)
        return list(seen.values())

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["timing"] = self.timing.to_dict()
        return data


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
        """Write the run to ``path`` atomically (creating its folder), so an interrupted run leaves a whole file
        behind; a folder or a device node (/dev/full) is refused, not replaced."""
        write_json_atomic(Path(path), self.to_dict(), hint=WRITE_HINT, parents=True)

    @classmethod
    def from_dict(cls, data: Any, source: str = "bench results") -> BenchRun:
        """Check and read a saved run; anything malformed is a GpuflyError naming what is wrong."""
        if not isinstance(data, dict) or data.get("kind", KIND) != KIND:
            raise GpuflyError(f"{source} is not a gpufly bench result", hint=READ_HINT)
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise GpuflyError(f"{source} has no schema_version", hint=READ_HINT)
        if version > SCHEMA_VERSION:
            raise GpuflyError(f"{source} has schema_version {version}; this gpufly reads up to {SCHEMA_VERSION}",
                              hint="upgrade gpufly to read it")
        if version < 1:
            raise GpuflyError(f"{source} has an invalid schema_version {version}", hint=READ_HINT)
        if "results" not in data:
            raise GpuflyError(f"{source}: results is missing (a required field)",
                              hint="a saved run always lists its results, even none; " + READ_HINT)
        body = {key: value for key, value in data.items() if key != "kind"}
        return from_dict(cls, body, source, hint=READ_HINT, unknown="error")


def load_run(path: Path) -> BenchRun:
    """Read a run saved by `gpufly bench --save`."""
    path = Path(path)
    data = read_json(path, missing=f"cannot read {path}: no such file", hint=READ_HINT)
    return BenchRun.from_dict(data, source=str(path))
