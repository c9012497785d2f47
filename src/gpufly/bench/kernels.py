"""The kernels the benchmarks time, built on random inputs (never zeros) for any torch device.

Each builder takes the torch module and a device, allocates its inputs once, and returns a Kernel:
the call to time and the work that call does (bench/work.py counts it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from gpufly.bench.benchmark import Kernel
from gpufly.bench.timing import measure
from gpufly.bench.work import DTYPE_BYTES, attention_flops, copy_bytes, gemm_bytes, gemm_flops, transfer_bytes

FLOAT_DTYPES = {"fp64": "float64", "fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
MATMUL_DTYPES = (*FLOAT_DTYPES, "fp8", "int8")
MIB = 2**20


def random_tensor(torch: Any, shape: tuple[int, ...], dtype: str, device: Any, generator: Any) -> Any:
    """Random values of ``dtype``, drawn on ``device`` by ``generator`` (which lives there too):
    standard normal floats, int8 uniform in [-64, 64)."""
    if dtype == "int8":
        return torch.randint(-64, 64, shape, generator=generator, dtype=torch.int8, device=device)
    values = torch.randn(shape, generator=generator, dtype=torch.float32, device=device)
    if dtype == "fp8":
        return values.to(torch.float8_e4m3fn)
    return values.to(getattr(torch, FLOAT_DTYPES[dtype]))


def _generator(torch: Any, device: Any, seed: int = 0) -> Any:
    return torch.Generator(device=device).manual_seed(seed)


def copies_to_exceed(nbytes: int, cache_bytes: int, limit: int = 16) -> int:
    """How many copies of an operand to cycle through so that together they spill ``cache_bytes``.

    >>> copies_to_exceed(32 * MIB, 256 * MIB)
    8
    >>> copies_to_exceed(512 * MIB, 256 * MIB)
    1
    """
    return max(1, min(limit, math.ceil(cache_bytes / max(nbytes, 1))))


def _cycling(calls: list[Callable[[], object]]) -> Callable[[], object]:
    if len(calls) == 1:
        return calls[0]
    ring = itertools.cycle(calls)
    return lambda: next(ring)()


def gemm(torch: Any, device: Any, dtype: str, m: int, n: int, k: int, *, rotate_bytes: int = 0) -> Kernel:
    """(m x k) @ (k x n) at ``dtype``; fp8 through torch._scaled_mm, int8 through torch._int_mm.

    With ``rotate_bytes`` the weight (k x n) is copied until the copies exceed it and each call takes
    the next copy, so a small matmul reads its weight from memory rather than from a cache.
    """
    generator = _generator(torch, device)
    a = random_tensor(torch, (m, k), dtype, device, generator)
    weight_bytes = k * n * DTYPE_BYTES[dtype]
    count = copies_to_exceed(weight_bytes, rotate_bytes) if rotate_bytes else 1
    calls: list[Callable[[], object]] = []
    for _ in range(count):
        if dtype in ("fp8", "int8"):
            b = random_tensor(torch, (n, k), dtype, device, generator).t()
        else:
            b = random_tensor(torch, (k, n), dtype, device, generator)
        calls.append(_matmul_call(torch, device, dtype, a, b))
    params = {"dtype": dtype, "m": m, "n": n, "k": k, "weight_copies": count,
              "shape": f"m{m} n{n} k{k}" if not (m == n == k) else f"n={n}",
              "bytes_per_call": gemm_bytes(m, n, k, dtype)}
    return Kernel(_cycling(calls), gemm_flops(m, n, k), params)


def _matmul_call(torch: Any, device: Any, dtype: str, a: Any, b: Any) -> Callable[[], object]:
    if dtype == "fp8":
        one = torch.ones((), dtype=torch.float32, device=device)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if dtype == "int8":
        return lambda: torch._int_mm(a, b)
    out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=device)
    return lambda: torch.mm(a, b, out=out)


def copy(torch: Any, device: Any, nbytes: int) -> Kernel:
    """One ``nbytes`` buffer copied into another in the same memory: read plus write."""
    generator = _generator(torch, device)
    src = random_tensor(torch, (nbytes // 4,), "fp32", device, generator)
    dst = torch.empty_like(src)
    return Kernel(lambda: dst.copy_(src), copy_bytes(src.nbytes), {"bytes": src.nbytes, "shape": _size(src.nbytes)})


def transfer(torch: Any, device: Any, nbytes: int, *, to_device: bool, pinned: bool) -> Kernel:
    """Host memory (pinned or pageable) to the device, or back, ``nbytes`` per call."""
    generator = _generator(torch, "cpu")
    host = random_tensor(torch, (nbytes // 4,), "fp32", "cpu", generator)
    if pinned:
        host = host.pin_memory()
    on_device = host.to(device)
    if to_device:
        def fn() -> object:
            return on_device.copy_(host, non_blocking=pinned)
    else:
        def fn() -> object:
            return host.copy_(on_device, non_blocking=pinned)
    params = {"bytes": host.nbytes, "pinned": pinned, "direction": "h2d" if to_device else "d2h",
              "shape": _size(host.nbytes)}
    return Kernel(fn, transfer_bytes(host.nbytes), params)


def attention(torch: Any, device: Any, dtype: str, *, batch: int, heads: int, seq_len: int, head_dim: int,
              causal: bool = True) -> Kernel:
    """torch.nn.functional.scaled_dot_product_attention forward, whichever backend torch picks."""
    generator = _generator(torch, device)
    q, k, v = (random_tensor(torch, (batch, heads, seq_len, head_dim), dtype, device, generator) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    params = {"dtype": dtype, "batch": batch, "heads": heads, "seq_len": seq_len, "head_dim": head_dim,
              "causal": causal, "shape": f"b{batch} h{heads} s{seq_len} d{head_dim}" + (" causal" if causal else "")}
    work = attention_flops(batch, heads, seq_len, head_dim, causal=causal)
    return Kernel(lambda: sdpa(q, k, v, is_causal=causal), work, params)


def tiny_op(torch: Any, device: Any) -> Kernel:
    """The smallest real kernel: scale one element in place. Its time is launch (dispatch) overhead."""
    x = torch.rand(1, generator=_generator(torch, device), device=device).add_(1.0)
    return Kernel(lambda: x.mul_(1.0), 1, {"elements": 1, "shape": "1 element"})


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:g} GiB" if nbytes >= 2**30 else f"{nbytes / MIB:g} MiB"


def copy_bandwidth(torch: Any, device: str = "cpu", nbytes: int = 256 * 2**20, repeats: int = 10) -> float:
    """The memory bandwidth a workload on ``device`` runs against, in B/s: the median of ``repeats`` copies of
    ``nbytes`` (read plus write) with the memory.copy kernel, in host memory with torch's threads or in the GPU's
    memory (synchronized before each clock reading). The recsys case study divides its bytes per sample by it."""
    where = torch.device(device)
    kernel = copy(torch, where, nbytes)
    sync = (lambda: torch.cuda.synchronize(where)) if where.type == "cuda" else None
    timing = measure(kernel.fn, warmup=2, repeats=repeats, sync=sync)
    return float(kernel.work / timing.median_s)
