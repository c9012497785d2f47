"""The profiler on a real GPU: NVML readings, peak memory, copies, and the GPU-only rules, live."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_an_fp32_loop_on_a_tensor_core_gpu_is_told_about_amp() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import gpufly
    from gpufly.profile.rules import diagnose

    # 256 flattened 3x64x64 images (12 MiB a batch): the pageable copy is a large share of the step on any GPU.
    # Measured on no device yet: the H100/H200 estimate is ~1.5 ms copy and ~2 ms collate against ~0.5 ms of
    # fp32 compute, so host-to-device stays far above the 10% threshold.
    features = 3 * 64 * 64
    model = torch.nn.Sequential(torch.nn.Linear(features, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(256 * 30, features), torch.randint(0, 10, (256 * 30,))),
                        batch_size=256)
    prof = gpufly.Profiler(nvml_interval=0.1).watch(model, optimizer)
    for x, y in prof.loader(loader):
        with prof.step():
            x, y = x.cuda(), y.cuda()  # pageable memory, blocking copies
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            torch.cuda.synchronize()
    data = prof.finish()
    assert data.settings.device.startswith("cuda") and data.settings.compute_capability
    detailed = [s for s in data.steps if s.detailed]  # the default sampling: warm-up, the first 8, then windows
    assert 11 <= len(detailed) < len(data.steps)
    read = [s for s in data.steps if s.memory_bytes is not None]
    assert all(s.memory_bytes and s.memory_bytes > 4 * 1024 * 4096 for s in read), "peak GPU memory"
    assert read[:11] == data.steps[:11], "each of the warm-up steps and the first 8 measured ones"
    assert all(s.detailed for s in read), "then the last step of each window: read on detailed steps only"
    assert all(s.h2d_s > 0 for s in data.detailed) and data.settings.non_blocking_copies is False
    assert data.sync_calls.get("torch.cuda.synchronize()") == len(detailed)
    assert all(s.sync_wait_s is not None for s in detailed), "the time the host waited in each synchronize()"
    assert data.gpu, "NVML samples in the background"
    rules = [f.rule for f in diagnose(data)]
    if data.settings.tensor_cores:
        assert "fp32_tensor_cores" in rules
    assert "sync_points" in rules, "torch.cuda.synchronize() once a step is one sync per step, the rule's threshold"
    share = data.share("h2d_s")
    assert share is not None and share > 0.10, f"host-to-device {share}"
    assert "blocking_copies" in rules, "pageable memory (pin_memory=False) and blocking .cuda() copies"
    finding = next(f for f in diagnose(data) if f.rule == "blocking_copies")
    assert "pin_memory=False" in finding.seen and "non_blocking=False" in finding.seen
