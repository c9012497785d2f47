"""Run a plan of benchmarks on one device: each failure becomes a recorded error, and with a save path
the results are written as they come, so an interrupted run keeps what it measured."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gpufly.bench.benchmark import Benchmark, Kernel, Unsupported
from gpufly.bench.conditions import HostProbe, HostWatch
from gpufly.bench.noise import MAX_ATTEMPTS, NOISE_LIMIT, disturbance, measure_until_stable, noise_reason
from gpufly.bench.peaks import peak_for, percent_of_peak
from gpufly.bench.results import BenchError, BenchResult, BenchRun, DeviceFacts
from gpufly.bench.sweep import SweepPoint, sweep_sizes
from gpufly.bench.timing import Timing
from gpufly.catalog import GpuSpec
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.extras import require

GROUPS = ("gemm", "llm", "memory", "transfer", "launch", "attention", "threads")
"""Every benchmark group, on some device; a device runs those in its own ``groups``."""

SWEEP_AGREEMENT = 1.5
"""How far (a factor, either way) the final figure may lie from what the sweep measured at the same size before
it is measured again and, if that persists, marked noisy: a sweep's few repeats are rougher than the final
measurement, but not by this much; a larger gap means the machine changed between the two (other work started
or stopped) and neither figure can be trusted as the ceiling."""

WORK_FIELDS = {"flops_per_s": "flop_per_call", "ops_per_s": "op_per_call", "bytes_per_s": "bytes_per_call"}


class Device(Protocol):
    """What the runner needs from a device (bench/cpu.py, bench/cuda.py, or a fake in tests)."""

    kind: str
    label: str
    groups: tuple[str, ...]
    spec: GpuSpec | None

    def facts(self) -> DeviceFacts: ...
    def plan(self, quick: bool = False) -> list[Benchmark]: ...
    def time(self, benchmark: Benchmark, kernel: Kernel) -> Timing: ...
    def conditions(self) -> dict[str, Any]: ...
    def recover(self) -> None: ...
    def environment(self) -> dict[str, str]: ...


def parse_device(name: str | None, *, cuda_count: int) -> tuple[str, int]:
    """("cpu", 0) or ("cuda", index) from --device; no name means the first GPU when there is one.

    >>> parse_device("cuda:1", cuda_count=2)
    ('cuda', 1)
    >>> parse_device(None, cuda_count=0)
    ('cpu', 0)
    """
    if name is None:
        return ("cuda", 0) if cuda_count else ("cpu", 0)
    text = name.strip().lower()
    if text == "cpu":
        return "cpu", 0
    found = re.fullmatch(r"(?:cuda|gpu)(?::(\d+))?", text)
    if not found:
        raise unknown_choice("device", name, ["cpu", *(f"cuda:{i}" for i in range(max(cuda_count, 1)))])
    index = int(found.group(1) or 0)
    if not cuda_count:
        raise GpuflyError(f"--device {name}: PyTorch sees no CUDA GPU here",
                          hint="use --device cpu, or install a CUDA build of PyTorch (gpufly install torch)")
    if index >= cuda_count:
        raise GpuflyError(f"--device {name}: there is no GPU {index}; PyTorch sees {cuda_count}",
                          hint=f"one of: {', '.join(f'cuda:{i}' for i in range(cuda_count))}")
    return "cuda", index


def open_device(name: str | None) -> Device:
    """The CPU or CUDA device that --device names."""
    torch = require("torch", "gpufly bench")
    kind, index = parse_device(name, cuda_count=torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if kind == "cpu":
        from gpufly.bench.cpu import CpuDevice

        return CpuDevice()
    from gpufly.bench.cuda import CudaDevice

    return CudaDevice(index)


def parse_only(only: str | None) -> list[str]:
    """The group or benchmark names in --only ("gemm,memory", "gemm.bf16"); unknown groups are an error."""
    if only is None:
        return []
    names = [part.strip().lower() for part in only.split(",") if part.strip()]
    if not names:
        raise GpuflyError("--only names nothing", hint=f"groups: {', '.join(GROUPS)}")
    for name in names:
        if name.split(".")[0] not in GROUPS:
            raise unknown_choice("benchmark group", name, GROUPS)
    return names


def check_names(plan: Sequence[Benchmark], device_groups: Sequence[str], only: Sequence[str]) -> None:
    """Refuse, before anything is measured, a dotted --only name (gemm.fp33) of a group this device runs that
    names none of its benchmarks: one error with the closest names as the hint. A whole group, or a name of a
    group this device does not run, is left to ``select`` (recorded as not measured, with why)."""
    names = sorted({b.name for b in plan} | {".".join(b.name.split(".")[:depth]) for b in plan
                                             for depth in range(2, b.name.count(".") + 1)})
    for name in only:
        if "." not in name or name.split(".")[0] not in device_groups:
            continue
        if any(b.name == name or b.name.startswith(name + ".") for b in plan):
            continue
        group = name.split(".")[0]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        in_group = [n for n in names if n.split(".")[0] == group]
        hint = (f"did you mean {', '.join(close)}?" if close
                else f"the {group} benchmarks here: {', '.join(in_group[:8])}" if in_group
                else f"groups: {', '.join(device_groups)}")
        raise GpuflyError(f"--only {name}: no such benchmark on this device", hint=hint)


def _matches(benchmark: Benchmark, name: str) -> bool:
    return benchmark.group == name or benchmark.name == name or benchmark.name.startswith(name + ".")


def check_runnable(plan: Sequence[Benchmark], device_groups: Sequence[str], only: Sequence[str]) -> None:
    """Refuse, before anything is measured or written, an --only selection this device cannot measure: a name all
    of whose benchmarks the device cannot run (gemm.fp8 on a CPU, with the reason the plan gives), or a selection
    that leaves nothing to measure (--only transfer on a CPU). One error with a hint, as for an unknown name, so a
    --save file is never replaced by a run that measured nothing."""
    if not only:
        return
    for name in only:
        picked = [b for b in plan if _matches(b, name)]
        if picked and all(b.unsupported for b in picked):
            reasons = list(dict.fromkeys(b.unsupported or "" for b in picked))
            group = name.split(".")[0]
            runnable = [b.name for b in plan if b.group == group and not b.unsupported]
            hint = (f"the {group} benchmarks this device runs: {', '.join(runnable[:8])}" if runnable
                    else f"groups this device runs: {', '.join(device_groups)}")
            raise GpuflyError(f"--only {name}: not measurable on this device: {'; '.join(reasons)}", hint=hint)
    if not any(not b.unsupported and any(_matches(b, name) for name in only) for b in plan):
        _, missing = select(plan, device_groups, only)
        why = "; ".join(f"{error.name}: {error.error}" for error in missing) or "no benchmark selected"
        raise GpuflyError(f"--only {','.join(only)}: nothing this device can measure ({why})",
                          hint=f"groups this device runs: {', '.join(device_groups)}")


def select(plan: Sequence[Benchmark], device_groups: Sequence[str], only: Sequence[str]) -> tuple[
        list[Benchmark], list[BenchError]]:
    """The benchmarks --only asks for, and an error entry for each name this device cannot run."""
    if not only:
        return list(plan), []
    chosen = [b for b in plan if any(b.group == n or b.name == n or b.name.startswith(n + ".") for n in only)]
    missing = []
    for name in only:
        if any(b.group == name or b.name == name or b.name.startswith(name + ".") for b in chosen):
            continue
        group = name.split(".")[0]
        why = (f"no '{name}' benchmark here" if group in device_groups
               else f"the {group} benchmarks need a CUDA GPU" if group == "transfer"
               else f"the {group} benchmarks run on CPUs only")
        missing.append(BenchError(name, group, why))
    return chosen, missing


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _kernel(device: Device, benchmark: Benchmark) -> tuple[Kernel, SweepPoint | None]:
    """The kernel to measure: built once, or the best size of a sweep (bench/sweep.py) with the sweep recorded,
    and the sweep's point at that size."""
    if not benchmark.sizes:
        return benchmark.build(), None
    probe = dataclasses.replace(benchmark, repeats=benchmark.sweep_repeats, warmup=min(benchmark.warmup, 2))
    kernel, points = sweep_sizes(benchmark.build, benchmark.sizes, lambda k: device.time(probe, k),
                                 max_call_s=benchmark.max_call_s)
    kernel.params["sweep"] = [point.to_dict() for point in points]
    kernel.params["sizing"] = (f"best median of {len(points)} sizes ({points[0].size}-{points[-1].size}, "
                               f"{benchmark.sweep_repeats} repeats each), measured again at that size")
    return kernel, max(points, key=lambda point: point.value)


def _si(value: float, unit: str) -> str:
    """A figure with an SI prefix, for a reason's text: '398 GFLOP/s', '1.2 TOP/s'."""
    for prefix, factor in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def sweep_check(benchmark: Benchmark, kernel: Kernel, point: SweepPoint | None,
                factor: float = SWEEP_AGREEMENT) -> Callable[[Timing], str | None] | None:
    """Why a final timing disagrees with the sweep's own measurement at the same size (more than ``factor``
    either way), or None where it agrees; no check without a sweep.

    >>> from gpufly.bench.sweep import SweepPoint
    >>> bench = Benchmark("gemm.fp32", "gemm", "flops_per_s", lambda n: None)
    >>> check = sweep_check(bench, Kernel(lambda: None, 2e9), SweepPoint(512, 2e9 / 398e9, 398e9))
    >>> from gpufly.bench.timing import summarize
    >>> check(summarize([2e9 / 33.6e9] * 5, warmup=0))
    'the sweep measured 398 GFLOP/s at this size, 11.8x this figure'
    >>> check(summarize([2e9 / 380e9] * 5, warmup=0)) is None
    True
    """
    if point is None or point.value <= 0:
        return None

    def check(timing: Timing) -> str | None:
        if timing.median_s <= 0:
            return None
        value = benchmark.value(kernel.work, timing.median_s)
        ratio = point.value / value
        if 1 / factor <= ratio <= factor:
            return None
        return f"the sweep measured {_si(point.value, benchmark.unit)} at this size, {ratio:.3g}x this figure"

    return check


def measure_one(device: Device, benchmark: Benchmark, host: HostProbe | None = None, *,
                noise_limit: float = NOISE_LIMIT, max_attempts: int = MAX_ATTEMPTS) -> BenchResult:
    """Build, time and describe one benchmark, re-measured while its interval is too wide (bench/noise.py), with
    the conditions at its start and end; exceptions propagate to the caller."""
    with benchmark.settings():
        start = {**(host.start() if host else {}), **device.conditions()}
        kernel, point = _kernel(device, benchmark)
        measured = measure_until_stable(lambda: device.time(benchmark, kernel), limit=noise_limit,
                                        attempts=max_attempts, check=sweep_check(benchmark, kernel, point))
        end = {**(host.end() if host else {}), **device.conditions()}
    timing = measured.timing
    value = benchmark.value(kernel.work, timing.median_s)
    low, high = benchmark.interval(kernel.work, timing.ci_low_s, timing.ci_high_s)
    params = {**benchmark.params, **kernel.params}
    if benchmark.metric in WORK_FIELDS:
        params[WORK_FIELDS[benchmark.metric]] = kernel.work
    peak, source = peak_for(device.spec, benchmark.peak)
    return BenchResult(name=benchmark.name, group=benchmark.group, metric=benchmark.metric, value=value,
                       unit=benchmark.unit, params=params, timing=timing, peak=peak, peak_source=source,
                       percent_of_peak=percent_of_peak(value, peak), conditions={"start": start, "end": end},
                       note=kernel.note, value_low=low, value_high=high, noisy=measured.noisy,
                       noise=noise_reason(measured, start, end, noise_limit) if measured.noisy else None,
                       attempts=len(measured.attempts))


def describe_failure(exc: BaseException) -> str:
    """An error as one line: out-of-memory named as such, long messages cut."""
    lines = str(exc).strip().splitlines()
    text = lines[0][:300] if lines else ""
    if isinstance(exc, Unsupported):
        return text
    if "out of memory" in str(exc).lower():
        return f"out of memory: {text}"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_benchmarks(device: Device, benchmarks: Sequence[Benchmark], *, settings: dict[str, Any] | None = None,
                   save: Path | None = None, errors: Sequence[BenchError] = (),
                   on_start: Callable[[int, Benchmark], None] | None = None,
                   on_done: Callable[[BenchResult | BenchError], None] | None = None,
                   host: HostProbe | None = None, noise_limit: float = NOISE_LIMIT,
                   max_attempts: int = MAX_ATTEMPTS) -> BenchRun:
    """Run each benchmark in turn; a failure is recorded and the run goes on. ``host`` reads the machine's load
    around each figure (psutil's ``HostWatch`` unless given)."""
    host = host if host is not None else HostWatch()
    run = BenchRun(device=device.facts(), started_at=_now(),
                   settings={**(settings or {}), "environment": device.environment(), "noise_limit": noise_limit,
                             "max_attempts": max_attempts}, errors=list(errors))
    for position, benchmark in enumerate(benchmarks):
        if on_start is not None:
            on_start(position, benchmark)
        entry: BenchResult | BenchError
        if benchmark.unsupported:
            entry = BenchError(benchmark.name, benchmark.group, benchmark.unsupported, dict(benchmark.params))
            run.errors.append(entry)
        else:
            try:
                entry = measure_one(device, benchmark, host, noise_limit=noise_limit, max_attempts=max_attempts)
                run.results.append(entry)
            except Exception as exc:  # an unsupported precision or an OOM is the finding, whatever its type
                entry = BenchError(benchmark.name, benchmark.group, describe_failure(exc), dict(benchmark.params))
                run.errors.append(entry)
                device.recover()
        if save is not None and run.results:  # a run that measured nothing never replaces what the file holds
            run.save(save)
        if on_done is not None:
            on_done(entry)
    run.results = annotate(run.results, run.device.cpu_threads)
    run.finished_at = _now()
    if save is not None and run.results:
        run.save(save)
    return run


def _gemm_kernel(result: BenchResult, threads: int | None) -> tuple[str, str, int | None] | None:
    """What makes two square-GEMM figures measurements of the same kernel: the metric, the dtype and the thread
    count (a figure without its own, such as gemm.fp32, ran at the run's default ``threads``); None for any other
    figure."""
    params = result.params
    size = params.get("m")
    if result.group not in ("gemm", "threads") or not isinstance(size, int) or not params.get("dtype"):
        return None
    if params.get("n") != size or params.get("k") != size:
        return None
    count = params.get("threads", threads)
    return result.metric, str(params["dtype"]), count if isinstance(count, int) else None


def consistency(results: Sequence[BenchResult], threads: int | None = None,
                factor: float = SWEEP_AGREEMENT) -> dict[str, str]:
    """Why a figure is far below another measurement of the same kernel in the same run (more than ``factor``),
    by name; figures already noisy are neither judged nor used as the reference.

    A GEMM ceiling (the best of a sweep, params.sweep) must be at least what the same dtype at the same thread
    count reached at any size (threads.gemm.fp32.t2 is gemm.fp32 at n=1024 with 2 threads); a figure at one size,
    at least what the same kernel reached at that size. A ceiling at 120.8 GFLOP/s beside 269.8 at n=1024 means
    other work held the cores through the ceiling's measurement without widening its interval.
    """
    found: dict[str, str] = {}
    kernels = {id(r): _gemm_kernel(r, threads) for r in results}
    for figure in results:
        kernel = kernels[id(figure)]
        if kernel is None or figure.noisy or figure.value <= 0:
            continue
        ceiling = bool(figure.params.get("sweep"))
        higher = [other for other in results if other is not figure and not other.noisy
                  and kernels[id(other)] == kernel and other.value > factor * figure.value
                  and (ceiling or other.params.get("m") == figure.params.get("m"))]
        if not higher:
            continue
        best = max(higher, key=lambda other: other.value)
        where = ", ".join(part for part in (kernel[1], f"n={best.params.get('m')}",
                                            f"{kernel[2]} thread{'s' if kernel[2] != 1 else ''}"
                                            if kernel[2] is not None else "") if part)
        what = "ceiling" if ceiling else "figure"
        found[figure.name] = (f"{best.name} measured {_si(best.value, best.unit)} for the same kernel ({where}) in "
                              f"this run, {best.value / figure.value:.3g}x this {what}")
    return found


def annotate(results: list[BenchResult], threads: int | None = None) -> list[BenchResult]:
    """Notes that need two results: thread scaling against one thread, and what CUDA graphs save; and a figure far
    below another measurement of the same kernel in the run (``consistency``) marked noisy, with why and what the
    machine was doing. ``threads`` is the run's default thread count (a CPU run's), None where it does not apply."""
    disagree = consistency(results, threads)
    results = [dataclasses.replace(r, noisy=True, noise="; ".join(
        [disagree[r.name], *disturbance(r.conditions.get("start", {}), r.conditions.get("end", {}))]))
        if r.name in disagree else r for r in results]
    by_name = {r.name: r for r in results}
    annotated = []
    for result in results:
        note = result.note
        one = re.fullmatch(r"(threads\..+)\.t\d+", result.name)
        base = by_name.get(f"{one.group(1)}.t1") if one else None
        if base is not None and base is not result and base.value:
            note = f"{result.value / base.value:.2f}x of 1 thread"
        eager = by_name.get("launch.step_eager")
        if result.name == "launch.step_graph" and eager is not None:
            saved = eager.value - result.value
            per_kernel = saved / int(result.params.get("kernels_per_step", 1))
            note = f"saves {saved * 1e6:,.1f} us per step ({per_kernel * 1e6:.2f} us per kernel)"
        annotated.append(dataclasses.replace(result, note=note) if note != result.note else result)
    return annotated
