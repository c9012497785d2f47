"""The recommender trained the way a competent PyTorch engineer writes it by hand: the case study's yardstick.

Batched tensors built once from the click log's arrays, one ``nn.EmbeddingBag(sparse=True)`` over all the
tables with SparseAdam, Adam for the MLPs, batch 256, and a plain loop. It shares no model or data code with
``recsys.py`` on purpose: a yardstick built from the code it measures would hide that code's overheads.
Only the generated log (``ClickLog``) is common, so both train on the same samples.

``train`` is the loop as a user runs it, timed as the tuner's worker times a trial; ``workload`` hands the same
model, data and optimizers to the worker, so the case study's reference row is measured in the same run and
the same way as every stage.
"""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from gpufly.tune.workloads.recsys import HELD_OUT_ROWS, ClickLog, RecsysShape

Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""(dense, ids, offsets, labels) of a run of rows."""


class ClickData:
    """The log as tensors, once: ids shifted into one table and flattened sample by sample, bag starts."""

    def __init__(self, log: ClickLog) -> None:
        features, rows = log.shape.sparse, log.shape.table_rows
        self.features = features
        self.dense, self.labels = torch.from_numpy(log.dense), torch.from_numpy(log.labels)
        self.ids = torch.from_numpy((log.ids + np.arange(features)[None, :, None] * rows)[log.ids >= 0])
        self.starts = torch.from_numpy(np.concatenate([[0], np.cumsum(log.lengths.reshape(-1))]))

    def rows(self, start: int, stop: int) -> Tensors:
        bags = self.starts[start * self.features:stop * self.features + 1]
        first = int(bags[0])
        return self.dense[start:stop], self.ids[first:int(bags[-1])], bags[:-1] - first, self.labels[start:stop]


class HandDLRM(nn.Module):
    """Bottom MLP, one embedding bag for every table, pairwise dots, top MLP."""

    pairs: torch.Tensor

    def __init__(self, shape: RecsysShape) -> None:
        super().__init__()
        self.features, dim = shape.sparse, shape.dim
        self.bottom = nn.Sequential(nn.Linear(shape.dense, 64), nn.ReLU(), nn.Linear(64, dim))
        self.embedding = nn.EmbeddingBag(shape.sparse * shape.table_rows, dim, mode="sum", sparse=True)
        bound = shape.table_rows ** -0.5  # DLRM's: uniform within 1/sqrt(rows of one table)
        nn.init.uniform_(self.embedding.weight, -bound, bound)
        vectors = shape.sparse + 1
        self.top = nn.Sequential(nn.Linear(dim + vectors * (vectors - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 1))
        self.register_buffer("pairs", torch.triu_indices(vectors, vectors, offset=1), persistent=False)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        bags = self.embedding(ids, offsets).view(dense.shape[0], self.features, -1)
        z = torch.cat([x.unsqueeze(1), bags], dim=1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def optimizers(model: HandDLRM, lr: float) -> list[torch.optim.Optimizer]:
    return [torch.optim.Adam([*model.bottom.parameters(), *model.top.parameters()], lr=lr),
            torch.optim.SparseAdam(list(model.embedding.parameters()), lr=lr)]


def loss_of(model: nn.Module, batch: Tensors) -> torch.Tensor:
    dense, ids, offsets, labels = batch
    return nn.functional.binary_cross_entropy_with_logits(model(dense, ids, offsets), labels)


def train(steps: int = 160, batch_size: int = 256, lr: float = 1e-3, train_rows: int = 65_536, seed: int = 0,
          warmup: int = 3) -> float:
    """The hand-written loop; samples/s over the wall time of the steps after ``warmup``, as the worker counts."""
    torch.manual_seed(seed)
    shape = RecsysShape(rows=train_rows + HELD_OUT_ROWS)
    data = ClickData(ClickLog(shape))
    model = HandDLRM(shape)
    opts = optimizers(model, lr)
    seconds = 0.0
    last = time.perf_counter()
    for step in range(steps):
        loss = loss_of(model, data.rows(step * batch_size, (step + 1) * batch_size))
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in opts:
            opt.step()
        now = time.perf_counter()
        if step >= warmup:
            seconds += now - last
        last = now
    return (steps - warmup) * batch_size / seconds


class _Batches(torch.utils.data.Dataset):
    """Item ``k``: rows [k*batch, (k+1)*batch) of the data, for the worker's loader (batch_size=None)."""

    def __init__(self, data: ClickData, batch_size: int, rows: int) -> None:
        self.data, self.batch_size, self.count = data, batch_size, rows // batch_size

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, k: int) -> Tensors:
        return self.data.rows(k * self.batch_size, (k + 1) * self.batch_size)


def workload(options: dict[str, Any]) -> Any:
    """The hand-written model, data and optimizers as the tuner's worker runs them (the reference row)."""
    from gpufly.tune.workload import Workload

    train_rows = int(options.get("rows", 65_536))
    shape = RecsysShape(rows=train_rows + HELD_OUT_ROWS)
    data = ClickData(ClickLog(shape))
    lr = float(options.get("lr", 1e-3))
    held_out = data.rows(train_rows, shape.rows)

    def evaluate(model: nn.Module) -> float:
        dense, ids, offsets, labels = (t.to(next(model.parameters()).device) for t in held_out)
        with torch.no_grad():
            return float(loss_of(model, (dense, ids, offsets, labels)))

    return Workload(name="recsys", model=HandDLRM(shape), loss=loss_of, batch_size=256,
                    dataset=_Batches(data, int(options.get("batch_size", 256)), train_rows),
                    optimizer=lambda m: optimizers(cast(HandDLRM, m), lr), batch_sampler_dataset=True,
                    evaluate=evaluate, higher_is_better=False)
