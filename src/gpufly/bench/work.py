"""Work per call of each benchmark: FLOPs (or integer ops) and bytes moved, the numerators of every rate.

Conventions: a multiply-add is 2 FLOPs; a copy moves its bytes twice (read once, written once); a
host-device transfer moves its bytes once across the link.
"""

from __future__ import annotations

DTYPE_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
"""Bytes per element of each precision's inputs (TF32 is stored as fp32)."""

OUTPUT_BYTES = {"fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 2, "int8": 4}
"""Bytes per element of each precision's output: fp8 matmuls write bf16, int8 matmuls write int32."""


def gemm_flops(m: int, n: int, k: int) -> int:
    """FLOPs of (m x k) @ (k x n): one multiply and one add per term.

    >>> gemm_flops(4096, 4096, 4096) / 1e9
    137.438953472
    """
    return 2 * m * n * k


def gemm_bytes(m: int, n: int, k: int, dtype: str) -> int:
    """Bytes a matmul must touch at least once: both inputs read, the output written.

    >>> gemm_bytes(1, 4096, 4096, "bf16")
    33570816
    """
    return (m * k + k * n) * DTYPE_BYTES[dtype] + m * n * OUTPUT_BYTES[dtype]


def copy_bytes(nbytes: int) -> int:
    """Memory traffic of copying ``nbytes`` within one memory: read them, write them.

    >>> copy_bytes(2**30)
    2147483648
    """
    return 2 * nbytes


def transfer_bytes(nbytes: int) -> int:
    """Bytes a host-to-device or device-to-host copy carries across the link."""
    return nbytes


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, *, causal: bool) -> int:
    """Forward FLOPs of softmax(Q K^T) V: two (seq x seq x head_dim) matmuls per head, halved when causal.

    The FlashAttention papers' count; the softmax's own arithmetic is left out.

    >>> attention_flops(1, 32, 4096, 128, causal=False) / 1e12
    0.274877906944
    """
    full = 4 * batch * heads * seq_len * seq_len * head_dim
    return full // 2 if causal else full
