"""The profiler on a real GPU: NVML readings, peak memory, copies, and the GPU-only rules, live."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_an_fp32_loop_on_a_tensor_core_gpu_is_told_about_amp() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import gpufly
    from gpufly.profile.rules import diagnose

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(torch.randn(256 * 60, 1024), torch.randint(0, 10, (256 * 60,))), batch_size=256)
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
    assert all(s.memory_bytes and s.memory_bytes > 4 * 1024 * 4096 for s in data.measured), "peak GPU memory"
    assert all(s.h2d_s > 0 for s in data.measured) and data.settings.non_blocking_copies is False
    assert data.sync_calls.get("torch.cuda.synchronize()") == len(data.steps)
    assert data.gpu, "NVML samples in the background"
    rules = [f.rule for f in diagnose(data)]
    if data.settings.tensor_cores:
        assert "fp32_tensor_cores" in rules
