"""Probes: what this machine has, read from NVML, nvidia-smi, nvcc, headers, /proc and child imports.

Each probe returns facts (doctor/facts.py) and never raises for "not there": a missing driver,
tool or framework is a fact with the reason. The outside world is injected (``run``, ``environ``,
``proc_root``, the NVML module), so tests replay recorded answers. Every command runs with a timeout.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import platform
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from functools import cache
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

from gpufly.doctor import framework_probe
from gpufly.doctor.extension_probe import probe_extensions
from gpufly.doctor.facts import (
    FRAMEWORK_NAMES,
    CpuFact,
    DriverFact,
    EnvFact,
    Facts,
    FrameworkFact,
    GpuFact,
    ProcessFact,
    SystemFact,
    ToolkitFact,
    build_fact,
)
from gpufly.errors import GpuflyError
from gpufly.hw import GpuReader, GpuSample, Nvml, load_pynvml
from gpufly.loading import exit_text

Run = Callable[..., subprocess.CompletedProcess[str]]
Spawn = Callable[[list[str]], "subprocess.Popen[str]"]
"""Starts a child with its stdout and stderr as text pipes (``spawn_child``, or a fake child in tests)."""
FindSpec = Callable[[str], ModuleSpec | None]
ReadText = Callable[[Path], str]

TOOL_TIMEOUT_S = 5.0
FRAMEWORKS = FRAMEWORK_NAMES
CPU_FLAGS = ("avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
             "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm")
"""The CPU extensions a bug report asks about (PyTorch's CPU kernels dispatch on them), as Linux names them in
/proc/cpuinfo: x86's AVX, AVX-512 and AMX families, Arm's NEON (asimd), SVE and BF16/I8MM."""
SYSTEM_INCLUDE_DIRS = (Path("/usr/include"), Path("/usr/local/cuda/include"))
SMI_GPU_FIELDS = ("index", "uuid", "name", "driver_version", "compute_cap", "memory.total", "memory.free",
                  "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current", "pcie.link.width.max",
                  "mig.mode.current", "persistence_mode")
SMI_OPTIONAL_FIELDS = ("compute_cap",)
"""Drivers before about R510 reject these ("is not a valid field to query"); the query is retried without."""
SMI_APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")
SMI_MESSAGES = (
    ("couldn't communicate with the NVIDIA driver", "NVIDIA driver not loaded"),
    ("Driver/library version mismatch", "driver/library version mismatch (driver upgraded without a reboot?)"),
    ("No devices were found", "no NVIDIA GPU found"),
)
"""What nvidia-smi prints when it has no GPU to talk to, and the reason gpufly gives for it."""
CONTAINER_CGROUP_WORDS = ("docker", "kubepods", "containerd", "libpod")
_NOT_AVAILABLE = {"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "[Unknown Error]"}
_MIB = 1024 * 1024
_ENABLED = 1
"""NVML_FEATURE_ENABLED and NVML_DEVICE_MIG_ENABLE."""


class _ProbeFailed(Exception):
    """Internal: a source gave no facts; the message is the reason a fact's error field shows."""


def _first_line(text: str, containing: str = "") -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if containing.lower() in line.lower()), "")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _run_tool(run: Run, args: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command with the tool timeout; _ProbeFailed when it cannot be started or hangs."""
    tool = Path(args[0]).name
    try:
        return run(list(args), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False,
                   env=None if env is None else dict(env))
    except FileNotFoundError as exc:
        raise _ProbeFailed(f"{tool} not on PATH") from exc
    except subprocess.TimeoutExpired as exc:
        raise _ProbeFailed(f"{tool} did not answer within {TOOL_TIMEOUT_S:g} s") from exc
    except (OSError, ValueError) as exc:
        raise _ProbeFailed(f"{tool} could not be run ({exc})") from exc


# NVML ------------------------------------------------------------------------------------------


def _nvml_processes(session: Nvml, gpu: GpuSample) -> tuple[ProcessFact, ...]:
    """The GPU's compute processes, named by NVML (the doctor runs no psutil join)."""
    return tuple(ProcessFact(pid=p.pid, name=session.query("nvmlSystemGetProcessName", p.pid),
                             used_memory_bytes=p.gpu_memory_bytes) for p in gpu.processes if "compute" in p.kind)


def _nvml_gpu(session: Nvml, reader: GpuReader, index: int) -> GpuFact:
    """The doctor's view of one GPU, from the shared reader: static facts, free memory and processes."""
    device = reader.device(index)
    if device.lost:
        return GpuFact(index=index, name=device.name)
    gpu = reader.sample(index)
    return GpuFact(
        index=index,
        name=device.name,
        compute_capability=device.compute_capability,
        memory_total_bytes=device.memory_total_bytes,
        memory_free_bytes=gpu.memory_free_bytes,
        pcie_gen_current=device.pcie_gen_current,
        pcie_gen_max=device.pcie_gen_max,
        pcie_width_current=device.pcie_width_current,
        pcie_width_max=device.pcie_width_max,
        mig_mode=device.mig_mode,
        ecc_enabled=device.ecc_mode,
        persistence_mode=device.persistence_mode,
        processes=_nvml_processes(session, gpu),
    )


def _probe_nvml(lib: ModuleType | None) -> tuple[DriverFact, list[GpuFact]]:
    session = Nvml(lib)
    status = session.open()
    if not status.available:
        raise _ProbeFailed(status.reason or "NVML could not be opened")
    with session:
        driver = DriverFact(found=True, version=session.driver_version(), cuda_version=session.cuda_driver_version(),
                            source="nvml")
        count, why_not = session.count_devices()
        if why_not:
            raise _ProbeFailed(why_not)
        reader = GpuReader(session)
        return driver, [_nvml_gpu(session, reader, index) for index in range(count)]


# nvidia-smi ------------------------------------------------------------------------------------


def _smi(run: Run, *args: str) -> str:
    """nvidia-smi's stdout; _ProbeFailed with the reason when it failed or said it has no driver."""
    done = _run_tool(run, ("nvidia-smi", *args))
    text = f"{done.stdout or ''}\n{done.stderr or ''}"
    for needle, reason in SMI_MESSAGES:
        if needle.lower() in text.lower():
            raise _ProbeFailed(f"{reason} (nvidia-smi: {_first_line(text, needle)})")
    if done.returncode != 0:
        raise _ProbeFailed(f"nvidia-smi failed (exit {done.returncode}): {_first_line(text) or 'no message'}")
    return done.stdout or ""


def _csv_rows(text: str, names: Sequence[str]) -> list[dict[str, str]]:
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        parsed = list(csv.reader(lines, skipinitialspace=True))
    except csv.Error as exc:
        raise _ProbeFailed(f"nvidia-smi gave output gpufly cannot read ({exc})") from exc
    rows = []
    for number, row in enumerate(parsed, start=1):
        if len(row) != len(names):
            raise _ProbeFailed(f"nvidia-smi gave output gpufly cannot read: line {number} has {len(row)} field(s), "
                               f"expected {len(names)} ({', '.join(row)[:120]!r})")
        rows.append({name: value.strip() for name, value in zip(names, row, strict=True)})
    return rows


def _text(row: Mapping[str, str], key: str) -> str | None:
    value = row.get(key)
    return None if value is None or value in _NOT_AVAILABLE else value


def _number(row: Mapping[str, str], key: str, scale: int = 1) -> int | None:
    value = _text(row, key)
    if value is None:
        return None
    if not value.isdigit():
        raise _ProbeFailed(f"nvidia-smi gave output gpufly cannot read: {key} is {value[:60]!r}, not a number")
    return int(value) * scale


def _switch(row: Mapping[str, str], key: str) -> bool | None:
    return {"enabled": True, "disabled": False}.get((_text(row, key) or "").lower())


def _capability(row: Mapping[str, str]) -> str | None:
    value = _text(row, "compute_cap")
    if value is not None and not re.fullmatch(r"\d+\.\d+", value):
        raise _ProbeFailed(f"nvidia-smi gave output gpufly cannot read: compute_cap is {value[:60]!r}")
    return value


def _smi_gpu(row: Mapping[str, str], processes: Mapping[str, tuple[ProcessFact, ...]]) -> GpuFact:
    index = _number(row, "index")
    if index is None:
        raise _ProbeFailed("nvidia-smi gave output gpufly cannot read: a GPU without an index")
    return GpuFact(
        index=index,
        name=_text(row, "name") or "unknown",
        compute_capability=_capability(row),
        memory_total_bytes=_number(row, "memory.total", _MIB),
        memory_free_bytes=_number(row, "memory.free", _MIB),
        pcie_gen_current=_number(row, "pcie.link.gen.current"),
        pcie_gen_max=_number(row, "pcie.link.gen.max"),
        pcie_width_current=_number(row, "pcie.link.width.current"),
        pcie_width_max=_number(row, "pcie.link.width.max"),
        mig_mode=_switch(row, "mig.mode.current"),
        persistence_mode=_switch(row, "persistence_mode"),
        processes=processes.get(row.get("uuid", ""), ()),
    )


def _smi_query(run: Run, query: str, names: Sequence[str]) -> list[dict[str, str]]:
    return _csv_rows(_smi(run, f"--query-{query}={','.join(names)}", "--format=csv,noheader,nounits"), names)


def _smi_gpu_rows(run: Run) -> list[dict[str, str]]:
    try:
        return _smi_query(run, "gpu", SMI_GPU_FIELDS)
    except _ProbeFailed as exc:
        if not any(name in str(exc) for name in SMI_OPTIONAL_FIELDS):
            raise
    return _smi_query(run, "gpu", [name for name in SMI_GPU_FIELDS if name not in SMI_OPTIONAL_FIELDS])


def _smi_processes(run: Run) -> dict[str, tuple[ProcessFact, ...]]:
    """Compute processes by GPU UUID; none when nvidia-smi will not list them (they are a detail)."""
    by_gpu: dict[str, tuple[ProcessFact, ...]] = {}
    try:
        for row in _smi_query(run, "compute-apps", SMI_APP_FIELDS):
            pid = _number(row, "pid")
            if pid is not None:
                process = ProcessFact(pid, _text(row, "process_name"), _number(row, "used_memory", _MIB))
                by_gpu[row["gpu_uuid"]] = (*by_gpu.get(row["gpu_uuid"], ()), process)
    except _ProbeFailed:
        return {}
    return by_gpu


def _smi_cuda_version(run: Run) -> str | None:
    """The "CUDA Version: 12.4" in the plain nvidia-smi table's header."""
    try:
        match = re.search(r"CUDA Version:\s*(\d+\.\d+)", _smi(run))
    except _ProbeFailed:
        return None
    return match.group(1) if match else None


def _probe_smi(run: Run) -> tuple[DriverFact, list[GpuFact]]:
    rows = _smi_gpu_rows(run)
    if not rows:
        raise _ProbeFailed("nvidia-smi listed no GPUs")
    processes = _smi_processes(run)
    gpus = [_smi_gpu(row, processes) for row in rows]
    driver = DriverFact(found=True, version=_text(rows[0], "driver_version"), cuda_version=_smi_cuda_version(run),
                        source="nvidia-smi")
    return driver, gpus


def probe_driver_and_gpus(nvml: ModuleType | None = None,
                          run: Run = subprocess.run) -> tuple[DriverFact, list[GpuFact]]:
    """The driver and its GPUs from NVML, else from nvidia-smi, else a DriverFact saying why neither answered.

    Args:
        nvml: the pynvml module, or a fake of it; None loads it (``gpufly.hw.load_pynvml``, which honours
            ``GPUFLY_NVML_FIXTURE``).
        run: runs nvidia-smi (``subprocess.run`` or a fake with its signature).
    """
    try:
        return _probe_nvml(nvml if nvml is not None else load_pynvml())
    except _ProbeFailed as exc:
        nvml_reason = str(exc)
    try:
        return _probe_smi(run)
    except _ProbeFailed as exc:
        return DriverFact(found=False, error=f"{nvml_reason}; {exc}"), []


# Toolkit ---------------------------------------------------------------------------------------


def _nvcc_version(run: Run, environ: Mapping[str, str], homes: Sequence[Path]) -> str | None:
    """The first nvcc that answers, in the order torch's extension builder looks: CUDA_HOME, PATH, /usr/local/cuda."""
    candidates = dict.fromkeys([*(str(home / "bin" / "nvcc") for home in homes), "nvcc", "/usr/local/cuda/bin/nvcc"])
    for nvcc in candidates:
        try:
            done = _run_tool(run, (nvcc, "--version"), env=environ)
        except _ProbeFailed:
            continue
        match = re.search(r"release (\d+\.\d+)", done.stdout or "")
        if done.returncode == 0 and match:
            return match.group(1)
    return None


def _header_version(include_dirs: Iterable[Path], headers: Sequence[str], prefix: str, patch: str) -> str | None:
    """'9.1.0' from ``#define CUDNN_MAJOR 9`` ... in the first header that has them."""
    for directory in include_dirs:
        for header in headers:
            try:
                text = (directory / header).read_text(errors="replace")
            except OSError:
                continue
            parts = [re.search(rf"#define\s+{prefix}_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR", patch)]
            numbers = [m.group(1) for m in parts if m]
            if parts[0] and len(numbers) == len(parts):
                return ".".join(numbers)
    return None


def probe_toolkit(run: Run = subprocess.run, environ: Mapping[str, str] = os.environ,
                  system_include_dirs: Sequence[Path] = SYSTEM_INCLUDE_DIRS) -> ToolkitFact:
    """The system CUDA toolkit (nvcc), cuDNN and NCCL headers; None for each one not found."""
    homes = [Path(environ[name]) for name in ("CUDA_HOME", "CUDA_PATH") if environ.get(name)]
    include_dirs = [*(home / "include" for home in homes), *system_include_dirs]
    return ToolkitFact(
        nvcc_version=_nvcc_version(run, environ, homes),
        cudnn_version=_header_version(include_dirs, ("cudnn_version.h", "cudnn.h"), "CUDNN", "PATCHLEVEL"),
        nccl_version=_header_version(include_dirs, ("nccl.h",), "NCCL", "PATCH"),
    )


# Environment -----------------------------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _platform(name: str) -> str:
    if name.startswith("linux"):
        return "linux"
    return {"win32": "windows", "cygwin": "windows"}.get(name, name)


def _in_container(environ: Mapping[str, str], proc_root: Path, root: Path) -> bool:
    if (root / ".dockerenv").exists() or (root / "run" / ".containerenv").exists():
        return True
    cgroup = _read(proc_root / "1" / "cgroup")
    return any(word in cgroup for word in CONTAINER_CGROUP_WORDS) or "KUBERNETES_SERVICE_HOST" in environ


def probe_env(environ: Mapping[str, str] = os.environ, proc_root: Path = Path("/proc"),
              platform_name: str | None = None, root: Path = Path("/")) -> EnvFact:
    """Environment variables that steer CUDA, container and WSL markers, Python and the OS."""
    return EnvFact(
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
        ld_library_path=environ.get("LD_LIBRARY_PATH"),
        in_container=_in_container(environ, proc_root, root),
        in_wsl="microsoft" in _read(proc_root / "version").lower() or "WSL_DISTRO_NAME" in environ,
        python_version=".".join(str(part) for part in sys.version_info[:3]),
        platform=_platform(platform_name or sys.platform),
        machine=platform.machine() or None,
    )


# The system, for bug reports --------------------------------------------------------------------


def _os_name(read: ReadText, system: str, release: str) -> str | None:
    """PRETTY_NAME from /etc/os-release ("Ubuntu 22.04.4 LTS"), else the OS and its release."""
    match = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', read(Path("/etc/os-release")), re.M)
    if match:
        return match.group(1).strip()
    return f"{system} {release}".strip() or None


def _gcc_version(run: Run) -> str | None:
    """The version at the end of `gcc --version`'s first line ("gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0")."""
    try:
        done = _run_tool(run, ("gcc", "--version"))
    except _ProbeFailed:
        return None
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)\s*$", _first_line(done.stdout or ""))
    return match.group(1) if done.returncode == 0 and match else None


def _cpu(read: ReadText, processor: str) -> CpuFact:
    """The CPU's model and the extensions that matter, from /proc/cpuinfo (Linux); the model alone elsewhere."""
    text = read(Path("/proc/cpuinfo"))
    model = re.search(r"^(?:model name|Hardware|cpu model)\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.M)
    present = set(flags.group(1).split()) if flags else set()
    cores = len(re.findall(r"^processor\s*:", text, re.M)) or os.cpu_count()
    return CpuFact(model=model.group(1).strip() if model else (processor or None), logical_cores=cores,
                   flags=tuple(flag for flag in CPU_FLAGS if flag in present))


def probe_system(run: Run = subprocess.run, read: ReadText = _read, system: str | None = None,
                 release: str | None = None, libc: tuple[str, str] | None = None,
                 processor: str | None = None) -> SystemFact:
    """The OS, C library, GCC and CPU, as a bug report wants them; each None where not found. ``read`` reads
    /etc/os-release and /proc/cpuinfo, ``run`` runs gcc; the rest default to Python's ``platform`` answers."""
    system = platform.system() if system is None else system
    release = platform.release() if release is None else release
    lib, version = platform.libc_ver() if libc is None else libc
    return SystemFact(
        os=_os_name(read, system, release),
        kernel=release or None,
        libc=f"{lib} {version}" if lib and version else None,
        gcc_version=_gcc_version(run),
        cpu=_cpu(read, platform.processor() if processor is None else processor),
    )


# Frameworks ------------------------------------------------------------------------------------


@cache
def _probe_source() -> str:
    return Path(framework_probe.__file__).read_text()


def _findable(name: str, find_spec: FindSpec) -> bool:
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):
        return True


def _child_failure(name: str, done: subprocess.CompletedProcess[str]) -> str:
    if done.returncode == 0:
        what = f"the import probe for {name} printed no result (stdout began {_first_line(done.stdout or '')[:80]!r})"
    else:
        what = f"{exit_text(done.returncode)} while importing {name}"
    detail = _last_line(done.stderr or "")
    return f"{what}: {detail[:300]}" if detail else what


def _fact_from_json(name: str, text: str) -> FrameworkFact:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        return FrameworkFact(name, installed=True, import_error=f"the import probe for {name} printed a result "
                             f"gpufly cannot read ({text[:80]!r})")
    known = {f.name for f in fields(FrameworkFact)} - {"name", "installed"}
    values = {key: value for key, value in data.items() if key in known}
    try:
        return build_fact(FrameworkFact, {"name": name, "installed": bool(data.get("installed", True)), **values},
                          f"the import probe for {name}")
    except GpuflyError as exc:
        return FrameworkFact(name, installed=True, import_error=f"{exc.message} (gpufly could not use its answer)")


def _framework_fact(name: str, done: subprocess.CompletedProcess[str]) -> FrameworkFact:
    marker = framework_probe.MARKER
    line = next((line for line in reversed((done.stdout or "").splitlines()) if line.startswith(marker)), None)
    if line is None:
        return FrameworkFact(name, installed=True, import_error=_child_failure(name, done))
    return _fact_from_json(name, line[len(marker):])


@dataclass(frozen=True)
class ImportLimits:
    """How long a framework's import probe may take. It always gets ``patience_s``; past that it keeps going
    while it still reports progress (a line at most ``stall_s`` old), up to ``cap_s`` in all. A child stopped
    either way is tried once more (``retries``): a busy machine's second import reads a warm disk cache."""

    patience_s: float = 20.0
    stall_s: float = 30.0
    cap_s: float = 180.0
    retries: int = 1

    def with_cap(self, cap_s: float) -> ImportLimits:
        """The limits for ``--import-timeout``: that many seconds at most, the patience no longer than that."""
        if not cap_s > 0:
            raise GpuflyError(f"--import-timeout must be a positive number of seconds, got {cap_s:g}",
                              hint="e.g. --import-timeout 300")
        return ImportLimits(min(self.patience_s, cap_s), self.stall_s, cap_s, self.retries)


@dataclass(frozen=True)
class _Watched:
    """One run of an import probe child as the parent watched it."""

    stdout: str
    stderr: str
    returncode: int | None
    """None when the child was stopped."""
    last_stage: str | None
    stalled: bool
    elapsed_s: float


def spawn_child(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace")


def _drain(stream: Iterable[str] | None, into: queue.Queue[str | None]) -> None:
    for line in stream or ():
        into.put(line)
    into.put(None)


def _stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=TOOL_TIMEOUT_S)


def _watch(child: subprocess.Popen[str], limits: ImportLimits, clock: Callable[[], float]) -> _Watched:
    """Read the child's lines as they come; stop it when its time is up: past the patience with no progress for
    ``stall_s`` (stalled), or at the cap (slow, still moving)."""
    lines: queue.Queue[str | None] = queue.Queue()
    errors: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_drain, args=(child.stdout, lines), daemon=True).start()
    threading.Thread(target=_drain, args=(child.stderr, errors), daemon=True).start()
    start = last = clock()
    stage: str | None = None
    out: list[str] = []
    while True:
        deadline = min(start + limits.cap_s, max(start + limits.patience_s, last + limits.stall_s))
        try:
            line = lines.get(timeout=max(deadline - clock(), 0.0))
        except queue.Empty:
            stalled = clock() - last >= limits.stall_s
            _stop(child)
            return _Watched("".join(out), _collected(errors), None, stage, stalled, clock() - start)
        if line is None:
            break
        if line.startswith(framework_probe.PROGRESS):
            stage, last = line[len(framework_probe.PROGRESS):].strip(), clock()
        else:
            out.append(line)
    try:
        returncode = child.wait(timeout=max(start + limits.cap_s - clock(), 0.0))
    except subprocess.TimeoutExpired:
        _stop(child)
        return _Watched("".join(out), _collected(errors), None, stage, False, clock() - start)
    return _Watched("".join(out), _collected(errors), returncode, stage, False, clock() - start)


def _collected(errors: queue.Queue[str | None]) -> str:
    """What the child wrote to stderr, waiting briefly for the reader to reach its end."""
    parts: list[str] = []
    while True:
        try:
            part = errors.get(timeout=1.0)
        except queue.Empty:
            return "".join(parts)
        if part is None:
            return "".join(parts)
        parts.append(part)


def _timed_out(name: str, watched: _Watched, limits: ImportLimits, tries: int) -> FrameworkFact:
    """A child stopped for time: said as slow or stalled, with the stage it reached, never as broken."""
    at = f" at {watched.last_stage}" if watched.last_stage else ""
    again = f" ({tries} tries)" if tries > 1 else ""
    if watched.stalled:
        what = (f"importing {name} made no progress for {limits.stall_s:g} s{at} and was stopped after "
                f"{watched.elapsed_s:.0f} s{again}")
    else:
        what = f"importing {name} was still making progress{at} when stopped at the {limits.cap_s:g} s limit{again}"
    return FrameworkFact(name, installed=True, timed_out=True, stalled=watched.stalled,
                         last_stage=watched.last_stage, import_error=what)


def _probe_framework(name: str, spawn: Spawn, python: str, limits: ImportLimits, find_spec: FindSpec,
                     clock: Callable[[], float]) -> FrameworkFact:
    if python == sys.executable and not _findable(name, find_spec):
        return FrameworkFact(name, installed=False)
    tries = 0
    while True:
        tries += 1
        try:
            child = spawn([python, "-c", _probe_source(), name])
        except OSError as exc:
            return FrameworkFact(name, installed=False, import_error=f"could not start {python} ({exc})")
        watched = _watch(child, limits, clock)
        if watched.returncode is not None or framework_probe.MARKER in watched.stdout:
            # an answer counts even from a child stopped after giving it (stuck tearing CUDA down at exit)
            return _framework_fact(name, subprocess.CompletedProcess([], watched.returncode or 0, watched.stdout,
                                                                     watched.stderr))
        if tries > limits.retries:
            return _timed_out(name, watched, limits, tries)


def probe_frameworks(spawn: Spawn = spawn_child, python: str = sys.executable,
                     limits: ImportLimits = ImportLimits(), names: Sequence[str] = FRAMEWORKS,
                     find_spec: FindSpec = importlib.util.find_spec,
                     clock: Callable[[], float] = time.monotonic) -> list[FrameworkFact]:
    """Each framework as a child ``python`` that imported it saw it, all at once, each watched for progress.

    A framework this interpreter cannot find is reported missing without starting a child (the check
    is skipped when ``python`` is another interpreter). A crash or import error is a fact; so is a child
    stopped for time, as slow or stalled with the stage it reached (``ImportLimits``).
    """
    with ThreadPoolExecutor(max_workers=max(len(names), 1)) as pool:
        return list(pool.map(lambda name: _probe_framework(name, spawn, python, limits, find_spec, clock), names))


# All -------------------------------------------------------------------------------------------


_TORCH_VERSION_LINE = re.compile(r"^(__version__|cuda)\s*(?::[^=]*)?=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", re.M)


def _torch_from_files(find_spec: FindSpec) -> FrameworkFact:
    """torch's version and CUDA from torch/version.py, without importing torch (seconds saved)."""
    spec = find_spec("torch")
    folder = Path(next(iter(spec.submodule_search_locations or []), "")) if spec else None
    text = _read(folder / "version.py") if folder else ""
    values = {m.group(1): m.group(2) or m.group(3) for m in _TORCH_VERSION_LINE.finditer(text)}
    if "__version__" not in values:
        return FrameworkFact("torch", installed=spec is not None, import_error=None if spec is None else
                             "torch/version.py not readable")
    return FrameworkFact("torch", installed=True, version=values["__version__"], distribution="torch",
                         cuda_version=values.get("cuda"), gpu_available=False, device_count=0)


def _from_metadata(name: str, distributions: Sequence[str]) -> FrameworkFact:
    from importlib import metadata

    for distribution in distributions:
        try:
            return FrameworkFact(name, installed=True, version=metadata.version(distribution),
                                 distribution=distribution, gpu_available=False, device_count=0,
                                 backend="cpu" if name == "jax" else None)
        except metadata.PackageNotFoundError:
            continue
    return FrameworkFact(name, installed=False)


def probe_frameworks_from_files(find_spec: FindSpec = importlib.util.find_spec) -> list[FrameworkFact]:
    """Framework facts read from installed files, without importing anything: the version and build, not
    whether the import works. For `gpufly report`, which must stay fast (importing torch takes seconds);
    `gpufly doctor` imports each framework (probe_frameworks)."""
    facts = [_torch_from_files(find_spec) if _findable("torch", find_spec) else FrameworkFact("torch", False)]
    facts.append(_from_metadata("tensorflow", ("tensorflow-gpu", "tensorflow", "tensorflow-cpu", "tf-nightly"))
                 if _findable("tensorflow", find_spec) else FrameworkFact("tensorflow", False))
    facts.append(_from_metadata("jax", ("jax",)) if _findable("jax", find_spec) else FrameworkFact("jax", False))
    return facts


def probe_all(nvml: ModuleType | None = None, run: Run = subprocess.run, environ: Mapping[str, str] = os.environ,
              python: str = sys.executable, proc_root: Path = Path("/proc"), root: Path = Path("/"),
              import_frameworks: bool = True, spawn: Spawn = spawn_child,
              import_limits: ImportLimits = ImportLimits()) -> Facts:
    """Everything the doctor needs. Each installed framework is imported in a child process (all at once,
    each watched for progress, while the other probes run), GPU or not: an import that crashes or hangs is
    what the doctor must see. ``import_frameworks=False`` reads their installed files instead (fast, but
    blind to a broken import)."""
    collected_at = datetime.now(UTC).isoformat(timespec="seconds")
    with ThreadPoolExecutor(max_workers=1) as pool:
        frameworks = (pool.submit(probe_frameworks, spawn=spawn, python=python, limits=import_limits)
                      if import_frameworks else None)
        extensions = pool.submit(probe_extensions, run=run, python=python, import_packages=import_frameworks)
        driver, gpus = probe_driver_and_gpus(nvml=nvml, run=run)
        toolkit = probe_toolkit(run=run, environ=environ)
        env = probe_env(environ=environ, proc_root=proc_root, root=root)
        system = probe_system(run=run, read=lambda path: _read(proc_root / path.relative_to("/proc"))
                              if path.is_relative_to("/proc") else _read(root / path.relative_to("/")))
        found = frameworks.result() if frameworks else probe_frameworks_from_files()
    return Facts(driver=driver, gpus=tuple(gpus), toolkit=toolkit, frameworks=tuple(found),
                 extensions=extensions.result(), env=env, system=system,
                 collected_at=collected_at)
