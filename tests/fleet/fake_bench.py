"""A tiny stand-in for the quick bench on a simulated Ray cluster: a run per fake GPU, at once, no torch.

Loaded on each node by file path (`--bench tests/fleet/fake_bench.py:tiny_bench`), so it imports only gpufly.
A node started with the custom resource ``fleet_test_fail`` raises; one with ``fleet_test_hang`` never returns.
"""

from __future__ import annotations

import threading

from gpufly.bench import BenchResult, BenchRun, DeviceFacts, Timing


def _this_node_resources() -> dict[str, float]:
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    return next(node["Resources"] for node in ray.nodes() if node["NodeID"] == node_id)


def tiny_bench() -> list[BenchRun]:
    resources = _this_node_resources()
    if "fleet_test_fail" in resources:
        raise RuntimeError("the fake bench was told to fail on this node")
    if "fleet_test_hang" in resources:
        threading.Event().wait()
    timing = Timing(median_s=0.01, min_s=0.0098, max_s=0.0102, p10_s=0.0099, p90_s=0.0101, repeats=10, warmup=1)
    result = BenchResult(name="gemm.bf16", group="gemm", metric="flops_per_s", value=1e13, unit="FLOP/s",
                         params={"shape": "n=4096"}, timing=timing)
    device = DeviceFacts(kind="cuda", name="Fake GPU", index=0, driver_version="550.54.15")
    return [BenchRun(device=device, started_at="2026-12-03T12:00:00+00:00", results=[result])]
