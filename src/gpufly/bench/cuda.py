"""The bench on an NVIDIA GPU: matmul per precision, LLM layer shapes, memory and PCIe bandwidth,
launch latency and what CUDA graphs save, attention; timed with CUDA events.

Needs a GPU to run; tested under the `gpu` pytest marker. NVML adds the driver, clocks and power
limit to the facts, and the clocks and temperature seen right after each benchmark to its result.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import platform
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from gpufly.bench import kernels
from gpufly.bench.benchmark import Benchmark, Kernel, Unsupported
from gpufly.bench.results import DeviceFacts
from gpufly.bench.timing import Timing, calls_per_sample, measure, summarize
from gpufly.catalog import GpuSpec, default_catalog
from gpufly.hw import GpuDevice, GpuReader, GpuSample, Nvml

GROUPS = ("gemm", "llm", "memory", "transfer", "launch", "attention")
GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
GEMM_SIZES = (1024, 2048, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 16384)
"""The square sizes a GEMM ceiling is swept over (bench/sweep.py), as mamf-finder's coarse scans do."""
QUICK_GEMM_SIZES = (2048, 4096, 6144, 8192)
MIN_SAMPLE_S = 2e-3
"""A timed sample covers at least this long: microsecond kernels run back to back until it does."""
KERNELS_PER_STEP = 64
"""Tiny kernels in one step of the CUDA-graph benchmark, about one transformer layer's worth."""


def measure_events(torch: Any, fn: Callable[[], object], *, warmup: int, repeats: int, inner: int = 1) -> Timing:
    """Time ``fn`` on the GPU's own timeline: a pair of CUDA events around each sample of ``inner`` calls.

    The samples are queued back to back and read after one synchronization, so the host's clock and
    its launch gaps stay out of the figure.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return summarize([start.elapsed_time(end) / 1000 / inner for start, end in pairs], warmup=warmup, inner=inner)


def measure_graph(torch: Any, fn: Callable[[], object], *, warmup: int, repeats: int, inner: int) -> Timing:
    """Time ``inner`` calls of ``fn`` captured once as a CUDA graph and replayed, a pair of events around each replay.

    For kernels shorter than the host's launch cost (a decode-sized matmul reads 32 MiB in about 8 us on an H200,
    while one eager launch from Python costs 5-10 us), queued eager calls leave gaps on the GPU and measure the
    host; a replayed graph launches them back to back. Warm-up runs eagerly, then on a side stream, as capture asks.
    """
    for _ in range(warmup):
        fn()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return summarize([start.elapsed_time(end) / 1000 / inner for start, end in pairs], warmup=warmup, inner=inner)


def measure_graph_or_events(torch: Any, kernel: Kernel, *, warmup: int, repeats: int) -> Timing:
    """A CUDA graph where it can be captured, else queued eager calls; the kernel's params say which timed it."""
    try:
        timing = measure_graph(torch, kernel.fn, warmup=warmup, repeats=repeats, inner=kernel.inner)
    except Exception as error:  # capture is refused for reasons torch reports only as they happen
        torch.cuda.synchronize()
        kernel.params["timing"] = f"events (CUDA graph capture failed: {type(error).__name__}: {error})"[:200]
        return measure_events(torch, kernel.fn, warmup=warmup, repeats=repeats, inner=kernel.inner)
    kernel.params["timing"] = "cuda_graph"
    return timing


@contextlib.contextmanager
def fp32_matmul(torch: Any, tf32: bool) -> Iterator[None]:
    """fp32 matmuls in full precision ("ieee") or as TF32, whichever torch API this version has."""
    matmul = torch.backends.cuda.matmul
    value: str | bool
    try:
        before, name, value = matmul.fp32_precision, "fp32_precision", "tf32" if tf32 else "ieee"
    except (AttributeError, RuntimeError):
        before, name, value = matmul.allow_tf32, "allow_tf32", tf32
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, before)


def _same_uuid(nvml_uuid: str | None, torch_uuid: str | None) -> bool:
    def norm(uuid: str) -> str:
        return uuid.lower().removeprefix("gpu-")

    if not nvml_uuid or not torch_uuid:
        return False
    return norm(nvml_uuid) == norm(torch_uuid)


def nvml_index(devices: list[GpuDevice], torch_uuid: str | None, torch_index: int) -> int | None:
    """The NVML index of the GPU torch calls ``cuda:torch_index``: by UUID, since CUDA_VISIBLE_DEVICES
    and CUDA's fastest-first order can renumber GPUs; by index when no UUID is readable."""
    for device in devices:
        if _same_uuid(device.uuid, torch_uuid):
            return device.index
    if torch_uuid and any(device.uuid for device in devices):
        return None
    return torch_index if torch_index < len(devices) else None


def _clock(sample: GpuSample | None, which: str, maximum: bool = False) -> int | None:
    """A sample's SM ("sm") or memory ("mem") clock in whole MHz, as the bench's facts keep it."""
    field = f"{'memory' if which == 'mem' else 'sm'}_clock{'_max' if maximum else ''}_mhz"
    value = getattr(sample, field) if sample else None
    return None if value is None else int(value)


class GpuState:
    """Clocks, power limit, temperature and slowdown reasons of one GPU, through the shared GPU reader;
    None for anything unreadable (no NVML, no driver, a field the card lacks)."""

    def __init__(self, nvml: Nvml, torch_uuid: str | None, torch_index: int) -> None:
        self._nvml, self._reader, self._index = nvml, None, None
        if not nvml.open().available:
            return
        self._reader = GpuReader(nvml)
        self._index = nvml_index(self._reader.devices(), torch_uuid, torch_index)

    def _sample(self) -> GpuSample | None:
        if self._reader is None or self._index is None:
            return None
        sample = self._reader.sample(self._index)
        return None if sample.lost else sample

    def driver_version(self) -> str | None:
        return self._nvml.driver_version() if self._reader else None

    def clock_mhz(self, which: str, maximum: bool = False) -> int | None:
        """Current (or maximum) SM or memory clock; ``which`` is "sm" or "mem"."""
        return _clock(self._sample(), which, maximum)

    def power_limit_w(self) -> float | None:
        sample = self._sample()
        return sample.power_limit_w if sample else None

    def conditions(self) -> dict[str, Any]:
        """What the GPU runs at now: read right after a benchmark, it shows throttling (reasons by name)."""
        sample = self._sample()
        if sample is None:
            return {}
        values = {"sm_clock_mhz": _clock(sample, "sm"), "memory_clock_mhz": _clock(sample, "mem"),
                  "power_w": sample.power_w, "temperature_c": sample.temperature_c,
                  "clocks_event_reasons": sample.throttle_reasons,
                  "slowdown_reasons": sample.slowdown_reasons if sample.throttle_reasons is not None else None}
        return {key: value for key, value in values.items() if value is not None}

    def close(self) -> None:
        self._nvml.close()


class CudaDevice:
    """One CUDA GPU through PyTorch: plan, time and describe the GPU benchmarks."""

    kind = "cuda"
    groups: tuple[str, ...] = GROUPS
    spec: GpuSpec | None

    def __init__(self, index: int = 0, nvml_lib: ModuleType | None = None) -> None:
        import torch

        self._torch = torch
        self.index = index
        self.label = f"cuda:{index}"
        self.device = torch.device("cuda", index)
        torch.cuda.set_device(self.device)
        self.props = torch.cuda.get_device_properties(index)
        self.capability = (self.props.major, self.props.minor)
        self.spec = default_catalog().match_device(self.props.name, self.props.total_memory)
        self._uuid = str(getattr(self.props, "uuid", "") or "") or None
        self.state = GpuState(Nvml(nvml_lib), self._uuid, index)

    def facts(self) -> DeviceFacts:
        torch, props = self._torch, self.props
        return DeviceFacts(
            kind="cuda", name=props.name, index=self.index, catalog_id=self.spec.id if self.spec else None,
            memory_total_bytes=int(props.total_memory), compute_capability=f"{props.major}.{props.minor}",
            driver_version=self.state.driver_version(), cuda_version=torch.version.cuda,
            cudnn_version=torch.backends.cudnn.version(), torch_version=torch.__version__,
            python_version=platform.python_version(), sm_clock_mhz=self.state.clock_mhz("sm"),
            sm_clock_max_mhz=self.state.clock_mhz("sm", maximum=True),
            memory_clock_max_mhz=self.state.clock_mhz("mem", maximum=True), power_limit_w=self.state.power_limit_w(),
        )

    def environment(self) -> dict[str, str]:
        import os

        return {name: os.environ[name] for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                                                    "PYTORCH_CUDA_ALLOC_CONF") if name in os.environ}

    def conditions(self) -> dict[str, Any]:
        return self.state.conditions()

    def _sync(self) -> None:
        self._torch.cuda.synchronize(self.device)

    def time(self, benchmark: Benchmark, kernel: Kernel) -> Timing:
        torch = self._torch
        if benchmark.timer == "host":
            return measure(kernel.fn, warmup=benchmark.warmup, repeats=benchmark.repeats, inner=kernel.inner,
                           sync=self._sync)
        if kernel.inner == 1:
            kernel.inner = calls_per_sample(kernel.fn, target_s=MIN_SAMPLE_S, limit=10_000, sync=self._sync)
        if benchmark.timer == "graph":
            return measure_graph_or_events(torch, kernel, warmup=benchmark.warmup, repeats=benchmark.repeats)
        return measure_events(torch, kernel.fn, warmup=benchmark.warmup, repeats=benchmark.repeats,
                              inner=kernel.inner)

    def recover(self) -> None:
        """Free what a failed benchmark left, so an out-of-memory error does not spread to the next one."""
        gc.collect()
        with contextlib.suppress(Exception):
            self._torch.cuda.synchronize(self.device)
        self._torch.cuda.empty_cache()

    @property
    def half(self) -> str:
        """The 16-bit float this GPU runs LLMs in: bf16 where supported, else fp16."""
        return "bf16" if self._torch.cuda.is_bf16_supported() else "fp16"

    def plan(self, quick: bool = False) -> list[Benchmark]:
        """Every GPU benchmark; the whole plan runs in well under a minute on a data-center GPU."""
        torch, gpu = self._torch, self.device
        warmup, repeats = (3, 10) if quick else (5, 20)
        sizes = QUICK_GEMM_SIZES if quick else GEMM_SIZES
        plan = []
        for dtype in GEMM_DTYPES:
            settings = functools.partial(fp32_matmul, torch, dtype == "tf32")
            plan.append(Benchmark(f"gemm.{dtype}", "gemm", "ops_per_s" if dtype == "int8" else "flops_per_s",
                                  functools.partial(self._square, dtype), peak=dtype, warmup=warmup,
                                  repeats=repeats, settings=settings, sizes=sizes, sweep_repeats=5,
                                  unsupported=self._unsupported(dtype)))
        rotate = max(256 * 2**20, 4 * int(getattr(self.props, "L2_cache_size", 0) or 0))
        half = self.half
        for m in ((1, 16) if quick else (1, 4, 16)) + (2048,):
            for n_out in (4096, 14336):
                decode = m <= 16
                build = functools.partial(_llm, torch, gpu, half, m, n_out, rotate if decode else 0, decode)
                plan.append(Benchmark(f"llm.{half}.{'decode' if decode else 'prefill'}.m{m}.k4096.n{n_out}", "llm",
                                      "bytes_per_s" if decode else "flops_per_s", build,
                                      peak="memory" if decode else half, warmup=warmup, repeats=repeats,
                                      timer="graph" if decode else "device"))
        copy_bytes = (512 if quick else 2048) * 2**20
        plan.append(Benchmark("memory.copy", "memory", "bytes_per_s",
                              functools.partial(kernels.copy, torch, gpu, copy_bytes), peak="memory",
                              warmup=warmup, repeats=repeats))
        moved = (256 if quick else 1024) * 2**20
        for to_device in (True, False):
            for pinned in (True, False):
                name = f"transfer.{'h2d' if to_device else 'd2h'}.{'pinned' if pinned else 'pageable'}"
                plan.append(Benchmark(name, "transfer", "bytes_per_s",
                                      functools.partial(kernels.transfer, torch, gpu, moved, to_device=to_device,
                                                        pinned=pinned),
                                      peak="pcie", warmup=2, repeats=5 if quick else 10))
        plan += self._launch_plan(repeats)
        tokens = 16384
        for seq_len in (1024, 4096) if quick else (1024, 4096, 16384):
            plan.append(Benchmark(f"attention.{half}.s{seq_len}", "attention", "flops_per_s",
                                  functools.partial(kernels.attention, torch, gpu, half, batch=tokens // seq_len,
                                                    heads=32, seq_len=seq_len, head_dim=128),
                                  peak=half, warmup=warmup, repeats=repeats))
        return plan

    def _launch_plan(self, repeats: int) -> list[Benchmark]:
        torch, gpu = self._torch, self.device
        return [
            Benchmark("launch.eager", "launch", "seconds", functools.partial(self._tiny, 0.02), warmup=100,
                      repeats=repeats, timer="host"),
            Benchmark("launch.sync_roundtrip", "launch", "seconds", functools.partial(self._roundtrip), warmup=100,
                      repeats=repeats, timer="host"),
            Benchmark("launch.step_eager", "launch", "seconds", functools.partial(_step, torch, gpu, graph=False),
                      {"kernels_per_step": KERNELS_PER_STEP}, warmup=10, repeats=repeats, timer="host"),
            Benchmark("launch.step_graph", "launch", "seconds", functools.partial(_step, torch, gpu, graph=True),
                      {"kernels_per_step": KERNELS_PER_STEP}, warmup=10, repeats=repeats, timer="host"),
        ]

    def _unsupported(self, dtype: str) -> str | None:
        """Why this GPU cannot run a GEMM at ``dtype``, known before building one; None where it can."""
        if dtype == "fp8" and self.capability < (8, 9):
            return (f"fp8 matmul needs compute capability 8.9 or newer (Ada, Hopper, Blackwell); "
                    f"this GPU is {self.capability[0]}.{self.capability[1]}")
        if dtype == "bf16" and not self._torch.cuda.is_bf16_supported():
            return "bf16 needs compute capability 8.0 or newer (Ampere)"
        return None

    def _square(self, dtype: str, n: int) -> Kernel:
        why = self._unsupported(dtype)
        if why is not None:
            raise Unsupported(why)
        return kernels.gemm(self._torch, self.device, dtype, n, n, n)

    def _tiny(self, target_s: float) -> Kernel:
        """Back-to-back launches of a one-element kernel: the host's cost per launch."""
        kernel = kernels.tiny_op(self._torch, self.device)
        kernel.inner = calls_per_sample(kernel.fn, target_s=target_s, sync=self._sync)
        return kernel

    def _roundtrip(self) -> Kernel:
        """One launch and a wait for it: the latency a step pays each time it synchronizes."""
        tiny = kernels.tiny_op(self._torch, self.device)

        def fn() -> None:
            tiny.fn()
            self._sync()

        kernel = Kernel(fn, 1, tiny.params)
        kernel.inner = calls_per_sample(fn, target_s=0.02)
        return kernel


def _llm(torch: Any, device: Any, dtype: str, m: int, n: int, rotate_bytes: int, decode: bool) -> Kernel:
    """A linear layer of an 8B-class LLM: hidden 4096 to 4096 (attention) or 14336 (MLP).

    Decode-like skinny matmuls (M <= 16 tokens) are bound by reading the weight and report bytes/s
    against memory bandwidth; prefill-like fat ones (M = 2048) report FLOP/s against the matmul peak.
    """
    kernel = kernels.gemm(torch, device, dtype, m, n, 4096, rotate_bytes=rotate_bytes)
    if decode:
        kernel.params["flop_per_call"] = kernel.work
        kernel.work = kernel.params["bytes_per_call"]
    return kernel


def _step(torch: Any, device: Any, *, graph: bool) -> Kernel:
    """A step of KERNELS_PER_STEP tiny kernels, launched one by one or replayed as one CUDA graph."""
    x = kernels.tiny_op(torch, device)

    def step() -> None:
        for _ in range(KERNELS_PER_STEP):
            x.fn()

    fn: Callable[[], object] = step
    if graph:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream(device).wait_stream(side)
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            step()
        fn = captured.replay
    kernel = Kernel(fn, 1, {"kernels_per_step": KERNELS_PER_STEP, "cuda_graph": graph,
                            "shape": f"{KERNELS_PER_STEP} kernels"})
    kernel.inner = calls_per_sample(fn, target_s=0.02, sync=functools.partial(torch.cuda.synchronize, device))
    return kernel
