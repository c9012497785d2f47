"""The bench on a CPU: GEMM per precision, LLM layer shapes, memory bandwidth, attention, op dispatch
overhead, and how GEMM and copy scale with threads.

There is no catalog entry for CPUs, so no CPU figure has a peak; the table says so.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Iterator
from typing import Any

from gpufly.bench import kernels
from gpufly.bench.benchmark import Benchmark, Kernel, Unsupported
from gpufly.bench.results import DeviceFacts
from gpufly.bench.timing import Timing, calls_per_sample, measure
from gpufly.catalog import GpuSpec

GROUPS = ("gemm", "llm", "memory", "attention", "launch", "threads")
GEMM_DTYPES = ("fp32", "bf16", "fp16", "fp8", "int8")
GEMM_SIZES = (512, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
"""The square sizes a GEMM ceiling is swept over (bench/sweep.py); the sweep stops before a size whose call would
take over the plan's limit, so a slow precision stops early."""
QUICK_GEMM_SIZES = (512, 1024, 1536, 2048, 3072, 4096)
FP8_UNSUPPORTED = ("fp8 matmul needs fp8 tensor cores (a GPU of compute capability 8.9 or newer); a CPU emulates "
                   "it, so its time is no ceiling")
ROTATE_BYTES = 256 * 2**20
"""Weights cycled per LLM-shape matmul spill this much, more than any CPU's last-level cache."""


@contextlib.contextmanager
def threads(count: int) -> Iterator[None]:
    """Run with ``count`` intra-op threads, then restore the thread count torch had."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def thread_counts(available: int) -> list[int]:
    """1, 2, 4, ... up to ``available``, and ``available`` itself.

    >>> thread_counts(6)
    [1, 2, 4, 6]
    """
    counts, count = [], 1
    while count < available:
        counts.append(count)
        count *= 2
    return [*counts, available]


class CpuDevice:
    """The host CPU through PyTorch: plan, time and describe the CPU benchmarks."""

    kind = "cpu"
    label = "cpu"
    spec: GpuSpec | None = None
    groups: tuple[str, ...] = GROUPS

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self.device = torch.device("cpu")

    def facts(self) -> DeviceFacts:
        import psutil

        from gpufly.hw.host import cpu_model, os_name

        model = cpu_model()
        return DeviceFacts(
            kind="cpu", name=model, torch_version=self._torch.__version__, python_version=platform.python_version(),
            cpu_model=model, cpu_threads=self._torch.get_num_threads(),
            cpu_logical_cores=psutil.cpu_count(logical=True), cpu_physical_cores=psutil.cpu_count(logical=False),
            os=os_name(),
        )

    def conditions(self) -> dict[str, Any]:
        """Nothing beyond the host's own conditions (load, busy processes, CPU clock: bench/conditions.py)."""
        return {}

    def time(self, benchmark: Benchmark, kernel: Kernel) -> Timing:
        return measure(kernel.fn, warmup=benchmark.warmup, repeats=benchmark.repeats, inner=kernel.inner)

    def environment(self) -> dict[str, str]:
        """The thread-count variables set in the environment, recorded with the run."""
        return {name: os.environ[name] for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if name in os.environ}

    def recover(self) -> None:
        import gc

        gc.collect()

    def plan(self, quick: bool = False) -> list[Benchmark]:
        """Every CPU benchmark, sized so that --quick takes about a minute on two quiet cores (longer where figures
        must be re-measured). 9 repeats give the median's interval between the 2nd and 8th samples (96%); 15, the
        4th and 12th."""
        torch, cpu = self._torch, self.device
        warmup, repeats = (1, 9) if quick else (2, 15)
        sizes, max_call_s = (QUICK_GEMM_SIZES, 0.3) if quick else (GEMM_SIZES, 2.0)
        plan = [
            Benchmark(f"gemm.{dtype}", "gemm", "ops_per_s" if dtype == "int8" else "flops_per_s",
                      functools.partial(_square, torch, cpu, dtype), peak=dtype, warmup=warmup, repeats=repeats,
                      sizes=sizes, max_call_s=max_call_s, unsupported=FP8_UNSUPPORTED if dtype == "fp8" else None)
            for dtype in GEMM_DTYPES
        ]
        prefill = () if quick else (2048,)
        for m in (1, 16, *prefill):
            for n in (4096, 14336):
                decode = m <= 16
                plan.append(Benchmark(
                    f"llm.fp32.{'decode' if decode else 'prefill'}.m{m}.k4096.n{n}", "llm",
                    "bytes_per_s" if decode else "flops_per_s", functools.partial(_llm, torch, cpu, m, n, decode),
                    peak="memory" if decode else "fp32", warmup=warmup if decode else 1,
                    repeats=repeats if decode else 5))
        plan.append(Benchmark("memory.copy", "memory", "bytes_per_s",
                              functools.partial(kernels.copy, torch, cpu, (128 if quick else 512) * 2**20),
                              warmup=warmup + 1, repeats=repeats))
        for seq_len in (512, 2048) if quick else (512, 2048, 4096):
            plan.append(Benchmark(f"attention.fp32.s{seq_len}", "attention", "flops_per_s",
                                  functools.partial(kernels.attention, torch, cpu, "fp32", batch=1, heads=8,
                                                    seq_len=seq_len, head_dim=64),
                                  warmup=warmup, repeats=repeats))
        plan.append(Benchmark("launch.op_dispatch", "launch", "seconds", functools.partial(_dispatch, torch, cpu),
                              warmup=100, repeats=repeats, timer="host"))
        plan += self._thread_plan(quick, warmup, repeats)
        return plan

    def _thread_plan(self, quick: bool, warmup: int, repeats: int) -> list[Benchmark]:
        torch, cpu = self._torch, self.device
        size = 1024 if quick else 2048
        plan = []
        for count in thread_counts(torch.get_num_threads()):
            setting = functools.partial(threads, count)
            plan.append(Benchmark(f"threads.gemm.fp32.t{count}", "threads", "flops_per_s",
                                  functools.partial(kernels.gemm, torch, cpu, "fp32", size, size, size),
                                  {"threads": count}, warmup=warmup, repeats=repeats, settings=setting))
            plan.append(Benchmark(f"threads.copy.t{count}", "threads", "bytes_per_s",
                                  functools.partial(kernels.copy, torch, cpu, 128 * 2**20),
                                  {"threads": count}, warmup=warmup + 1, repeats=repeats, settings=setting))
        return plan


def _square(torch: Any, device: Any, dtype: str, n: int) -> Kernel:
    if dtype == "fp8":
        raise Unsupported(FP8_UNSUPPORTED)
    return kernels.gemm(torch, device, dtype, n, n, n)


def _llm(torch: Any, device: Any, m: int, n: int, decode: bool) -> Kernel:
    """A linear layer of an 8B-class LLM: hidden 4096 to 4096 (attention) or 14336 (MLP).

    Decode-like skinny matmuls (M <= 16 tokens) are bound by reading the weight, so they report
    bytes/s; prefill-like fat ones (M = 2048) are bound by arithmetic and report FLOP/s.
    """
    kernel = kernels.gemm(torch, device, "fp32", m, n, 4096, rotate_bytes=ROTATE_BYTES if decode else 0)
    if decode:
        kernel.params["flop_per_call"] = kernel.work
        kernel.work = kernel.params["bytes_per_call"]
    return kernel


def _dispatch(torch: Any, device: Any) -> Kernel:
    kernel = kernels.tiny_op(torch, device)
    kernel.inner = calls_per_sample(kernel.fn, target_s=0.01)
    return kernel

