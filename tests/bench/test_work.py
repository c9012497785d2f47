"""FLOPs and bytes per call: the numerator of every rate, counted by hand and by the real kernels."""

from __future__ import annotations

import pytest

from gpufly.bench import kernels
from gpufly.bench.work import attention_flops, copy_bytes, gemm_bytes, gemm_flops, transfer_bytes


def test_gemm_counts_a_multiply_add_as_two_flops() -> None:
    assert gemm_flops(2, 3, 4) == 48
    assert gemm_flops(8192, 8192, 8192) == 2 * 8192**3


@pytest.mark.parametrize(("dtype", "expected"), [
    ("fp32", (1 * 4096 + 4096 * 14336) * 4 + 1 * 14336 * 4),
    ("bf16", (1 * 4096 + 4096 * 14336) * 2 + 1 * 14336 * 2),
    ("fp8", (16 * 4096 + 4096 * 4096) * 1 + 16 * 4096 * 2),
    ("int8", (16 * 4096 + 4096 * 4096) * 1 + 16 * 4096 * 4),
])
def test_gemm_bytes_read_both_inputs_and_write_the_output(dtype, expected) -> None:
    m, n = (1, 14336) if dtype in ("fp32", "bf16") else (16, 4096)
    assert gemm_bytes(m, n, 4096, dtype) == expected


def test_a_copy_reads_and_writes_and_a_transfer_crosses_once() -> None:
    assert copy_bytes(1000) == 2000
    assert transfer_bytes(1000) == 1000


def test_attention_counts_two_matmuls_per_head_and_halves_for_causal() -> None:
    qk = 2 * 512 * 512 * 64
    assert attention_flops(2, 8, 512, 64, causal=False) == 2 * 8 * 2 * qk
    assert attention_flops(2, 8, 512, 64, causal=True) == 2 * 8 * qk


def test_the_real_kernels_declare_that_work() -> None:
    import torch

    cpu = torch.device("cpu")
    gemm = kernels.gemm(torch, cpu, "fp32", 8, 16, 32)
    assert gemm.work == gemm_flops(8, 16, 32)
    assert tuple(gemm.fn().shape) == (8, 16)
    copy = kernels.copy(torch, cpu, 4 * 2**20)
    assert copy.work == 8 * 2**20 and copy.params["bytes"] == 4 * 2**20
    attention = kernels.attention(torch, cpu, "fp32", batch=1, heads=2, seq_len=64, head_dim=16)
    assert attention.work == attention_flops(1, 2, 64, 16, causal=True)
    assert tuple(attention.fn().shape) == (1, 2, 64, 16)


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "int8"])
def test_inputs_are_random_never_zeros(dtype) -> None:
    import torch

    tensor = kernels.random_tensor(torch, (64, 64), dtype, "cpu", torch.Generator().manual_seed(1))
    assert tensor.float().abs().sum() > 0
    assert tensor.float().unique().numel() > 10


def test_small_weights_are_cycled_to_spill_the_cache() -> None:
    import torch

    kernel = kernels.gemm(torch, torch.device("cpu"), "fp32", 1, 256, 256, rotate_bytes=1 * 2**20)
    assert kernel.params["weight_copies"] == 4
    outputs = [kernel.fn().clone() for _ in range(5)]
    assert not torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[0], outputs[4])


def test_decode_shapes_report_bytes_and_keep_their_flops() -> None:
    import torch

    from gpufly.bench.cpu import _llm

    kernel = _llm(torch, torch.device("cpu"), 1, 4096, decode=True)
    assert kernel.work == gemm_bytes(1, 4096, 4096, "fp32")
    assert kernel.params["flop_per_call"] == gemm_flops(1, 4096, 4096)
