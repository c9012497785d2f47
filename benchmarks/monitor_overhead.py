"""What one monitor sample costs, and what that is as a share of one core at 1 Hz.

Times ``backend.snapshot()`` (CPU time of the sampling thread and wall time) for: this machine's live
backend (real NVML when a driver is present, psutil for the host), the live backend over the fake NVML
(two GPUs with processes joined through psutil, as on a busy node), and the replay backend. Warm-up
samples are dropped; medians and p90 over the rest. Run: ``python benchmarks/monitor_overhead.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.nvml import fake_nvml  # noqa: E402

from gpufly.hw import read_host  # noqa: E402
from gpufly.monitor.backends.live import LiveBackend  # noqa: E402
from gpufly.monitor.backends.replay import ReplayBackend  # noqa: E402
from gpufly.monitor.sampler import Backend  # noqa: E402


def measure(backend: Backend, samples: int, warmup: int) -> dict[str, float]:
    cpu, wall = [], []
    for i in range(warmup + samples):
        c0, w0 = time.thread_time(), time.perf_counter()
        backend.snapshot()
        c1, w1 = time.thread_time(), time.perf_counter()
        if i >= warmup:
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
    cpu.sort()
    return {"cpu_ms_median": 1e3 * statistics.median(cpu), "cpu_ms_p90": 1e3 * cpu[int(0.9 * (len(cpu) - 1))],
            "wall_ms_median": 1e3 * statistics.median(wall)}


def fake_busy_node() -> LiveBackend:
    fake = fake_nvml("monitor/nvml_live.json")
    me = os.getpid()
    fake.set_processes(0, [{"pid": me, "used_memory": 2**30}, {"pid": os.getppid(), "used_memory": 2**29}])
    fake.set_processes(1, [{"pid": me, "used_memory": 2**30}])
    return LiveBackend(fake)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    live = LiveBackend()
    what = f"NVML, {len(live.snapshot().gpus)} GPUs" if live.gpu_status is None else "no GPU: host only"
    cases = {
        f"live ({what})": live,
        "live over fake NVML (2 GPUs, 3 processes)": fake_busy_node(),
        "replay (two_gpus.jsonl)": ReplayBackend(ROOT / "tests/fixtures/monitor/two_gpus.jsonl"),
    }
    read_host()
    rows = {name: measure(backend, args.samples, args.warmup) for name, backend in cases.items()}
    cpu = platform.processor() or platform.machine()
    machine = f"{cpu}, {os.cpu_count()} logical CPUs, Python {platform.python_version()}"
    if args.json:
        print(json.dumps({"machine": machine, "samples": args.samples, "results": rows}, indent=2))
        return
    print(f"monitor sample cost on {machine}; {args.samples} samples after {args.warmup} warm-up, per backend")
    print(f"{'backend':<46} {'CPU ms median':>14} {'CPU ms p90':>11} {'wall ms':>8} {'core % at 1 Hz':>15}")
    for name, r in rows.items():
        percent = r["cpu_ms_median"] / 1000 * 100
        print(f"{name:<46} {r['cpu_ms_median']:>14.3f} {r['cpu_ms_p90']:>11.3f} {r['wall_ms_median']:>8.3f}"
              f" {percent:>14.3f}%")


if __name__ == "__main__":
    main()
