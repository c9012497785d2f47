"""Small real training loops on the CPU, each built to show (or not show) one problem.

Their work is real (torch tensors, DataLoaders, optimizers, the wrapped ``.item()``), but the time it takes
is fake: each part of a step moves a ``FakeClock`` by a set amount, so the profiler's figures are exact
whatever the machine's load. ``Pace`` says how much each part costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import gpufly
from gpufly.profile.sampling import EVERY_STEP, Sampling

from .fakes import FakeClock


@dataclass(frozen=True)
class Pace:
    """Fake seconds per batch for waiting on the loader, and per step for forward, backward and optimizer."""

    wait_s: float = 0.0
    forward_s: float = 0.0005
    backward_s: float = 0.0003
    optimizer_s: float = 0.0002

    @property
    def step_s(self) -> float:
        return self.wait_s + self.forward_s + self.backward_s + self.optimizer_s


class PacedDataset(Dataset):
    """Each item costs ``item_s`` of fake time to "decode", as JPEG decoding in __getitem__ does. In a worker
    process the decoding moves that worker's copy of the clock, not the loop's: it overlaps the loop's work."""

    def __init__(self, data: Dataset, clock: FakeClock, item_s: float) -> None:
        self.data, self.clock, self.item_s = data, clock, item_s

    def __len__(self) -> int:
        return len(self.data)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> Any:
        self.clock.advance(self.item_s)
        return self.data[i]


class PacedModel(torch.nn.Module):
    """``inner`` whose forward pass costs ``forward_s`` and whose backward pass costs ``backward_s``."""

    def __init__(self, inner: torch.nn.Module, clock: FakeClock, pace: Pace) -> None:
        super().__init__()
        self.inner, self.clock, self.pace = inner, clock, pace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.advance(self.pace.forward_s)
        out = self.inner(x)
        if out.requires_grad:
            out.register_hook(lambda grad: self.clock.advance(self.pace.backward_s))
        return out


def _mlp(width: int, inputs: int = 32, outputs: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(inputs, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, outputs))


def _dataset(items: int, features: int = 32) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(items, features, generator=generator),
                         torch.randint(0, 4, (items,), generator=generator))


def train(loader: Any, model: torch.nn.Module, clock: FakeClock, pace: Pace, item_every_step: bool = False,
          warmup: int = 3, sampling: Sampling = EVERY_STEP) -> gpufly.Profiler:
    """The user's loop with the profiler's two lines; returns the profiler, finished. Every step is looked inside
    unless ``sampling`` says otherwise, so the figures are exact."""
    model = PacedModel(model, clock, pace)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    prof = gpufly.Profiler(warmup=warmup, sampling=sampling, clock=clock).watch(model, optimizer)
    optimizer.register_step_pre_hook(lambda *args: clock.advance(pace.optimizer_s))  # after the profiler's hook
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


def input_bound(num_workers: int, pace: Pace) -> gpufly.Profiler:
    """Batches of 16 items, each item ``pace.wait_s / 16`` to decode in __getitem__."""
    clock = FakeClock()
    dataset = PacedDataset(_dataset(16 * 24), clock, pace.wait_s / 16)
    loader = DataLoader(dataset, batch_size=16, num_workers=num_workers, persistent_workers=num_workers > 0)
    return train(loader, _mlp(64), clock, pace)


def clean(item_every_step: bool = False, pace: Pace = Pace(), steps: int = 30,
          sampling: Sampling = EVERY_STEP) -> gpufly.Profiler:
    """``steps`` steps of an in-memory dataset: no wait, no sync (unless asked for), nothing to find."""
    clock = FakeClock()
    loader = DataLoader(PacedDataset(_dataset(64 * steps), clock, pace.wait_s / 64), batch_size=64)
    return train(loader, _mlp(64), clock, pace, item_every_step=item_every_step, sampling=sampling)


def small_clean() -> gpufly.Profiler:
    """A tiny model over an in-memory dataset: handing over the batch is a large share of a short step (0.3 ms of
    1.4 ms, as measured once on a real one), but a fraction of a millisecond that worker processes cannot cut."""
    clock = FakeClock()
    pace = Pace(wait_s=0.0003, forward_s=0.0006, backward_s=0.0003, optimizer_s=0.0002)
    loader = DataLoader(PacedDataset(_dataset(64 * 40), clock, pace.wait_s / 64), batch_size=64)
    torch.manual_seed(0)
    return train(loader, torch.nn.Linear(32, 4), clock, pace)


def leaking() -> gpufly.Profiler:
    """An evaluation loop without torch.no_grad() that keeps each batch's score tensor: every graph stays alive."""
    data = _dataset(256 * 40, features=256)
    model = _mlp(2048, inputs=256)
    prof = gpufly.Profiler().watch(model)
    scores: list[torch.Tensor] = []
    for x, _ in prof.loader(DataLoader(data, batch_size=256)):
        with prof.step():
            scores.append(model(x).softmax(-1).max(-1).values.mean())
    prof.finish()
    return prof
