"""Prove each GPU computes: allocate, multiply in fp32 and fp16/bf16, compare with the CPU, time it.

Runs in a subprocess (`python -m gpufly.doctor.smoke`) so that a broken driver or a hung kernel
cannot take gpufly down; prints one JSON line per GPU.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

SIZE = 4096
"""Square matrices large enough to fill a data-center GPU for a few milliseconds."""
REPEATS = 10
TOLERANCE = {"float32": 2e-3, "float16": 2e-2, "bfloat16": 5e-2}
"""Largest relative error (Frobenius norm) accepted against an fp64 CPU reference; TF32, which
PyTorch may use for fp32 matmuls, stays near 1e-3 at this size."""


@dataclass(frozen=True)
class SmokeResult:
    index: int
    name: str
    dtype: str
    relative_error: float | None
    ok: bool
    tflops: float | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(torch: Any, index: int, dtype_name: str) -> SmokeResult:
    device = torch.device("cuda", index)
    name = torch.cuda.get_device_name(index)
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(index)
    a_cpu = torch.randn(SIZE, SIZE, generator=generator, dtype=torch.float64) / SIZE**0.5
    b_cpu = torch.randn(SIZE, SIZE, generator=generator, dtype=torch.float64)
    a, b = a_cpu.to(device=device, dtype=dtype), b_cpu.to(device=device, dtype=dtype)
    reference = a.double().cpu() @ b.double().cpu()
    result = (a @ b).double().cpu()
    error = float(torch.linalg.norm(result - reference) / torch.linalg.norm(reference))
    for _ in range(3):
        a @ b
    torch.cuda.synchronize(device)
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(end) / 1000)
    tflops = 2 * SIZE**3 / statistics.median(times) / 1e12
    return SmokeResult(index, name, dtype_name, error, error <= TOLERANCE[dtype_name], tflops)


def run() -> list[SmokeResult]:
    import torch

    if not torch.cuda.is_available():
        return []
    results = []
    for index in range(torch.cuda.device_count()):
        half = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        for dtype_name in ("float32", half):
            try:
                results.append(_check(torch, index, dtype_name))
            except Exception as exc:  # a failing GPU is the finding, whatever the error type
                results.append(SmokeResult(index, f"GPU {index}", dtype_name, None, False, None, str(exc)[:300]))
    return results


def run_isolated(timeout: float = 120.0, python: str = sys.executable) -> tuple[list[SmokeResult], str | None]:
    """The smoke test in a child process: its results, or why there are none."""
    import subprocess

    try:
        done = subprocess.run([python, "-m", "gpufly.doctor.smoke"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"the GPU smoke test did not finish within {timeout:.0f} s"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"the GPU smoke test failed (exit {done.returncode}): {tail}"
    results = []
    for line in done.stdout.splitlines():
        try:
            results.append(SmokeResult(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            return [], f"the GPU smoke test printed something unexpected: {line[:120]}"
    return results, None


def main() -> None:
    started = time.perf_counter()
    results = run()
    for result in results:
        print(json.dumps(result.to_dict()))
    print(json.dumps({"done": True, "seconds": time.perf_counter() - started}), file=sys.stderr)


if __name__ == "__main__":
    main()
