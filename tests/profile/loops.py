"""Small real training loops on the CPU, each built to show (or not show) one problem."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import gpufly


class SlowDecode(Dataset):
    """Each item costs ``delay_s`` to "decode", as JPEG decoding in __getitem__ does."""

    def __init__(self, items: int, delay_s: float = 0.002) -> None:
        self.items, self.delay_s = items, delay_s
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(items, 32, generator=generator)
        self.y = torch.randint(0, 4, (items,), generator=generator)

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.delay_s)
        return self.x[i], self.y[i]


def _mlp(width: int, inputs: int = 32, outputs: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(inputs, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, outputs))


def train(loader: Any, model: torch.nn.Module, item_every_step: bool = False, warmup: int = 3) -> gpufly.Profiler:
    """The user's loop with the profiler's two lines; returns the profiler, finished."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    prof = gpufly.Profiler(warmup=warmup).watch(model, optimizer)
    for x, y in prof.loader(loader):
        with prof.step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if item_every_step:
                loss.item()
    prof.finish()
    return prof


def input_bound(num_workers: int) -> gpufly.Profiler:
    loader = DataLoader(SlowDecode(16 * 24), batch_size=16, num_workers=num_workers,
                        persistent_workers=num_workers > 0)
    return train(loader, _mlp(64))


def clean(item_every_step: bool = False) -> gpufly.Profiler:
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64 * 30, 256, generator=generator), torch.randint(0, 4, (64 * 30,)))
    return train(DataLoader(data, batch_size=64), _mlp(1024, inputs=256), item_every_step=item_every_step)


def small_clean() -> gpufly.Profiler:
    """A tiny model over an in-memory dataset: handing over the batch is a large share of a short step, but
    a fraction of a millisecond that worker processes cannot make shorter."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64 * 40, 32, generator=generator), torch.randint(0, 4, (64 * 40,)))
    torch.manual_seed(0)
    return train(DataLoader(data, batch_size=64), torch.nn.Linear(32, 4))


def leaking() -> gpufly.Profiler:
    """An evaluation loop without torch.no_grad() that keeps each batch's score tensor: every graph stays alive."""
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(256 * 40, 256, generator=generator))
    model = _mlp(2048, inputs=256)
    prof = gpufly.Profiler().watch(model)
    scores: list[torch.Tensor] = []
    for (x,) in prof.loader(DataLoader(data, batch_size=256)):
        with prof.step():
            scores.append(model(x).softmax(-1).max(-1).values.mean())
    prof.finish()
    return prof
