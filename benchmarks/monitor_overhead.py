"""What one monitor sample costs as the machine grows, beside the floor: a minimal prometheus_client exporter.

For 1, 8 and 32 GPUs with 8 processes each (the fake NVML's GeForce-like cards, so some fields raise
NotSupported on every sample, as on a real consumer card), it times ``LiveBackend.snapshot()``: every NVML
read, each process joined (/proc/PID/stat, psutil and /proc/PID/cgroup), and the host figures. Beside it, the floor: a
minimal exporter written here (a prometheus_client Gauge per field, set from the same fake NVML calls, with no
process join and no host figures), the least any NVML exporter can do. The target (issue 22, class 15) is at
most 0.3 ms of CPU per GPU per sample at 32 GPUs x 8 processes.

The processes are real: ``sleep`` children of this script (with users, command lines and cgroups to read)
plus a few pids that do not exist (processes that exited between NVML listing them and the join reading
them). In the first rows 64 pids fill the 8 slots of each GPU, so at 32 GPUs each process is listed on 4 GPUs,
as one process driving several GPUs is; the last row gives every slot its own process (256 at 32 GPUs), the
most a join can cost. On a machine with a driver, a last row samples its real GPUs and processes through the
real NVML (the floor reading the same pynvml). CPU time of this thread (``time.thread_time``), warm-up samples
dropped, median and p90.

Run: ``python benchmarks/monitor_overhead.py`` (``--profile`` prints cProfile's top functions at 32 x 8).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry, Gauge  # noqa: E402
from tests.fakes.nvml import GONE_PID_BASE  # noqa: E402

from gpufly.hw import Nvml, load_pynvml  # noqa: E402
from gpufly.hw.fake_nvml import FakePynvml  # noqa: E402
from gpufly.monitor.backends.live import LiveBackend  # noqa: E402

GPU_COUNTS = (1, 8, 32)
PROCESSES_PER_GPU = 8
SHARED_PIDS = 64
GONE_PIDS = 8
MOST_GPUS = GPU_COUNTS[-1]
CHILDREN = MOST_GPUS * PROCESSES_PER_GPU - 1
TARGET_MS_PER_GPU = 0.3


@contextmanager
def sleeping_children(count: int) -> Iterator[list[int]]:
    """``count`` real processes to list as GPU processes; ended when the benchmark is done."""
    children = [subprocess.Popen(["sleep", "3600"]) for _ in range(count)]
    try:
        yield [child.pid for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()


class MinimalExporter:
    """The floor: what a bare NVML exporter does per sample. A Gauge per field, labelled by GPU, set from the
    NVML calls gpufly makes; a field the card does not support is skipped; no psutil, no host figures."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib
        registry = CollectorRegistry()
        pynvml = lib

        def gauge(name: str) -> Gauge:
            return Gauge(f"floor_{name}", name, ["gpu"], registry=registry)

        self.reads: list[tuple[Gauge, Callable[[Any], Any]]] = [
            (gauge("utilization_gpu"), lambda h: lib.nvmlDeviceGetUtilizationRates(h).gpu),
            (gauge("utilization_memory"), lambda h: lib.nvmlDeviceGetUtilizationRates(h).memory),
            (gauge("memory_used"), lambda h: lib.nvmlDeviceGetMemoryInfo(h).used),
            (gauge("memory_total"), lambda h: lib.nvmlDeviceGetMemoryInfo(h).total),
            (gauge("memory_free"), lambda h: lib.nvmlDeviceGetMemoryInfo(h).free),
            (gauge("power"), lambda h: lib.nvmlDeviceGetPowerUsage(h)),
            (gauge("power_limit"), lambda h: lib.nvmlDeviceGetEnforcedPowerLimit(h)),
            (gauge("energy"), lambda h: lib.nvmlDeviceGetTotalEnergyConsumption(h)),
            (gauge("temperature"), lambda h: lib.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            (gauge("fan"), lambda h: lib.nvmlDeviceGetFanSpeed(h)),
            (gauge("sm_clock"), lambda h: lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            (gauge("memory_clock"), lambda h: lib.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            (gauge("pcie_tx"), lambda h: lib.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES)),
            (gauge("pcie_rx"), lambda h: lib.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES)),
            (gauge("clocks_event_reasons"), lambda h: lib.nvmlDeviceGetCurrentClocksEventReasons(h)),
            (gauge("ecc_corrected"), lambda h: lib.nvmlDeviceGetTotalEccErrors(
                h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)),
            (gauge("ecc_uncorrected"), lambda h: lib.nvmlDeviceGetTotalEccErrors(
                h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)),
            (gauge("mig_mode"), lambda h: lib.nvmlDeviceGetMigMode(h)[0]),
            (gauge("processes"), lambda h: len(lib.nvmlDeviceGetComputeRunningProcesses(h))
             + len(lib.nvmlDeviceGetGraphicsRunningProcesses(h))),
        ]

    def snapshot(self) -> None:
        for index in range(self.lib.nvmlDeviceGetCount()):
            handle = self.lib.nvmlDeviceGetHandleByIndex(index)
            label = str(index)
            for gauge, read in self.reads:
                try:
                    gauge.labels(label).set(read(handle))
                except self.lib.NVMLError:
                    continue


def measure(snapshot: Callable[[], object], samples: int, warmup: int) -> dict[str, float]:
    cpu = []
    for i in range(warmup + samples):
        started = time.thread_time()
        snapshot()
        if i >= warmup:
            cpu.append(time.thread_time() - started)
    cpu.sort()
    return {"cpu_ms_median": 1e3 * statistics.median(cpu), "cpu_ms_p90": 1e3 * cpu[int(0.9 * (len(cpu) - 1))]}


def cases(children: list[int]) -> dict[str, tuple[int, list[int]]]:
    """Row label -> (GPUs, the pids their slots are filled from, in turn)."""
    shared = [os.getpid(), *children[:SHARED_PIDS - 1 - GONE_PIDS], *(GONE_PID_BASE + n for n in range(GONE_PIDS))]
    rows = {f"{gpus} x {PROCESSES_PER_GPU}": (gpus, shared) for gpus in GPU_COUNTS}
    rows[f"{MOST_GPUS} x {PROCESSES_PER_GPU}, all distinct"] = (MOST_GPUS, [os.getpid(), *children])
    return rows


def node(gpus: int, pids: list[int]) -> FakePynvml:
    return FakePynvml.node(gpus, pids, PROCESSES_PER_GPU)


def run_cases(rows: dict[str, tuple[int, list[int]]], samples: int, warmup: int) -> dict[str, dict[str, Any]]:
    results = {}
    for label, (gpus, pids) in rows.items():
        results[label] = {"gpus": gpus, "gpufly": measure(LiveBackend(node(gpus, pids)).snapshot, samples, warmup),
                          "floor": measure(MinimalExporter(node(gpus, pids)).snapshot, samples, warmup)}
    return results


def this_machine(samples: int, warmup: int) -> dict[str, dict[str, Any]]:
    """The row for this machine's real GPUs through the real NVML; none without a driver."""
    pynvml = load_pynvml()
    nvml = Nvml(pynvml)
    if not nvml.open().available or not nvml.device_count():
        return {}
    live = LiveBackend(pynvml)
    gpus = len(live.snapshot().gpus)
    return {f"this machine: {gpus} GPUs, its NVML": {
        "gpus": gpus, "gpufly": measure(live.snapshot, samples, warmup),
        "floor": measure(MinimalExporter(pynvml).snapshot, samples, warmup)}}


def profile(pids: list[int], samples: int) -> None:
    live = LiveBackend(node(MOST_GPUS, pids))
    live.snapshot()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(samples):
        live.snapshot()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def print_table(results: dict[str, dict[str, Any]]) -> None:
    print(f"{'GPUs x processes':<26} {'gpufly ms/sample':>17} {'p90':>7} {'ms/GPU':>7} {'core % at 1 Hz':>15}"
          f" {'floor ms/sample':>16} {'ms/GPU':>7}")
    for label, row in results.items():
        ours, floor, gpus = row["gpufly"], row["floor"], row["gpus"]
        print(f"{label:<26} {ours['cpu_ms_median']:>17.3f} {ours['cpu_ms_p90']:>7.3f}"
              f" {ours['cpu_ms_median'] / gpus:>7.3f} {ours['cpu_ms_median'] / 10:>14.3f}%"
              f" {floor['cpu_ms_median']:>16.3f} {floor['cpu_ms_median'] / gpus:>7.3f}")
    for label, row in results.items():
        if label in (f"{MOST_GPUS} x {PROCESSES_PER_GPU}", f"{MOST_GPUS} x {PROCESSES_PER_GPU}, all distinct"):
            per_gpu = row["gpufly"]["cpu_ms_median"] / MOST_GPUS
            verdict = "met" if per_gpu <= TARGET_MS_PER_GPU else "NOT met"
            print(f"target: at most {TARGET_MS_PER_GPU} ms per GPU per sample at {label}: {per_gpu:.3f} ms, {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile the 32-GPU case with every process distinct instead of timing")
    args = parser.parse_args()
    with sleeping_children(CHILDREN) as children:
        rows = cases(children)
        if args.profile:
            profile(rows[f"{MOST_GPUS} x {PROCESSES_PER_GPU}, all distinct"][1], args.samples)
            return
        results = run_cases(rows, args.samples, args.warmup) | this_machine(args.samples, args.warmup)
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs, "
               f"load {os.getloadavg()[0]:.2f}, Python {platform.python_version()}")
    if args.json:
        print(json.dumps({"machine": machine, "samples": args.samples, "results": results}, indent=2))
        return
    print(f"monitor sample cost (CPU time of the sampling thread) on {machine}; {args.samples} samples after "
          f"{args.warmup} warm-up; {PROCESSES_PER_GPU} processes per GPU from {SHARED_PIDS} pids ({GONE_PIDS} gone)"
          f", or each its own")
    print_table(results)


if __name__ == "__main__":
    main()
