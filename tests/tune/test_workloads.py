"""The built-in workloads build, train a step, and give the same data every time (trials must compare)."""

from __future__ import annotations

import pytest
import torch

from gpufly.tune import Target, offered
from gpufly.tune.workload import build


@pytest.mark.parametrize("name", ["cnn", "transformer", "recsys"])
def test_a_builtin_trains_and_its_data_is_deterministic(name: str) -> None:
    torch.manual_seed(0)
    workload = build(name, {})
    again = build(name, {})
    first, second = workload.dataset[3], again.dataset[3]
    flat = [t for t in (first if isinstance(first, tuple) else (first,)) if isinstance(t, torch.Tensor)]
    flat2 = [t for t in (second if isinstance(second, tuple) else (second,)) if isinstance(t, torch.Tensor)]
    assert all(torch.equal(a, b) for a, b in zip(flat, flat2, strict=True))
    collate = workload.collate or torch.utils.data.default_collate
    batch = collate([workload.dataset[i] for i in range(workload.batch_size)])
    optimizer = workload.optimizer(workload.model)
    optimizers = optimizer if isinstance(optimizer, list) else [optimizer]
    before = float(workload.loss(workload.model, batch).detach())
    for _ in range(5):
        loss = workload.loss(workload.model, batch)
        for opt in optimizers:
            opt.zero_grad()
        loss.backward()
        for opt in optimizers:
            opt.step()
    assert float(workload.loss(workload.model, batch).detach()) < before, "a few steps on one batch lower its loss"


def test_the_knobs_offered_fit_the_builtins() -> None:
    cnn = offered(Target(build("cnn", {}), cuda=False))
    assert cnn["channels_last"] == [True] and "tf32" not in cnn
    recsys = offered(Target(build("recsys", {}), cuda=True, ddp=2))
    assert {"batched", "sparse", "fused", "ddp", "tf32", "pin_memory"} <= set(recsys)
    assert "channels_last" not in recsys
    assert recsys["ddp"] == [2] and recsys["ddp_hook"] == ["fp16", "powersgd", "bf16"] and recsys["bucket_mb"]
    assert offered(Target(build("recsys", {}), cuda=False, ddp=2))["ddp_hook"] == ["fp16", "powersgd"], \
        "bf16 compression needs NCCL"
    transformer = offered(Target(build("transformer", {}), cuda=True))
    assert transformer["compile"] == ["default", "reduce-overhead"]
    assert transformer["optimizer_impl"] == ["foreach", "fused"]
