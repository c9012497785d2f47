"""A DLRM-style recommender, generated on the fly: the tuner's case study for data, compute and communication.

The data is what a preprocessed click log looks like on disk: dense features (float32) and, per
sparse feature, a multi-hot bag of category ids (padded, with lengths), plus a click label drawn
from a hidden logistic model so the loss has something to learn. The model is DLRM's shape (Naumov
et al., 2019, arXiv:1906.00091): a bottom MLP for the dense features, one embedding bag per sparse
feature, pairwise dot-product interaction, a top MLP, and a CTR loss.

Two ways to read the same data:
- ``PerSampleDataset``: a row at a time, converted in Python, collated by a Python loop; the naive
  pipeline most first versions have.
- ``BatchedDataset``: a whole batch per ``__getitem__`` by slicing arrays, bags flattened with one
  mask (vectorized collation).
Both produce the same ``Batch`` for the same rows (a test checks it), so any speedup is the pipeline's.
With the fused table, ``BatchedDataset`` reads a ``FusedLayout`` instead: the ids shifted into the one table
and flattened sample by sample once, when the log is loaded (as a production pipeline writes them offline), so
a batch is four slices and the model does no index arithmetic per step.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class RecsysShape:
    rows: int = 200_000
    dense: int = 13
    sparse: int = 8
    bag: int = 4
    """Largest number of ids in one multi-hot feature."""
    table_rows: int = 50_000
    dim: int = 32


@dataclass
class Batch:
    dense: torch.Tensor
    """(batch, dense) float32."""
    ids: torch.Tensor
    """Every id of the batch, flattened feature-major: feature 0 of every sample, then feature 1, ..."""
    offsets: torch.Tensor
    """Start of each (feature, sample) bag in ``ids``: sparse * batch entries."""
    labels: torch.Tensor
    fused: bool = False
    """The ``FusedLayout``'s order instead: ids already shifted into the fused table and flattened sample-major
    (sample 0's features, then sample 1's), so the fused bag reads them as they are."""

    def __len__(self) -> int:
        return int(self.dense.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch on ``device`` (the GPU run must measure the GPU, not the host)."""
        dense, ids, offsets, labels = (t.to(device, non_blocking=non_blocking) for t in (self.dense, self.ids,
                                                                                         self.offsets, self.labels))
        return Batch(dense, ids, offsets, labels, fused=self.fused)


class ClickLog:
    """The generated log, held as arrays (dense, ids padded with -1, lengths, labels)."""

    def __init__(self, shape: RecsysShape = RecsysShape(), seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.shape = shape
        self.dense = rng.standard_normal((shape.rows, shape.dense), dtype=np.float32)
        self.lengths = rng.integers(1, shape.bag + 1, size=(shape.rows, shape.sparse))
        # Zipf-like popularity, as real category ids have: a few rows are hot.
        raw = rng.zipf(1.2, size=(shape.rows, shape.sparse, shape.bag)) % shape.table_rows
        slots = np.arange(shape.bag)[None, None, :]
        self.ids = np.where(slots < self.lengths[..., None], raw, -1).astype(np.int64)
        weights = rng.standard_normal(shape.dense).astype(np.float32)
        hot = (self.ids[:, :, 0] % 7 == 0).sum(axis=1)
        logits = self.dense @ weights * 0.5 + 0.4 * hot - 1.0
        self.labels = (rng.random(shape.rows) < 1 / (1 + np.exp(-logits))).astype(np.float32)


class PerSampleDataset(torch.utils.data.Dataset):
    """One sample per call, converted in Python: the naive pipeline."""

    def __init__(self, log: ClickLog, rows: int | None = None) -> None:
        self.log = log
        self.rows = log.shape.rows if rows is None else rows
        """Only the first ``rows`` rows: the rest of the log is held out for evaluation."""

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> tuple[list[float], list[list[int]], float]:
        log = self.log
        bags = [[int(v) for v in log.ids[i, f, : log.lengths[i, f]]] for f in range(log.shape.sparse)]
        return [float(v) for v in log.dense[i]], bags, float(log.labels[i])


def collate_per_sample(samples: list[tuple[list[float], list[list[int]], float]]) -> Batch:
    """Build the flattened ids and offsets with Python loops, feature-major, as the embedding bags want."""
    features = len(samples[0][1])
    ids: list[int] = []
    offsets: list[int] = []
    for f in range(features):
        for _, bags, _ in samples:
            offsets.append(len(ids))
            ids.extend(bags[f])
    return Batch(dense=torch.tensor([s[0] for s in samples], dtype=torch.float32),
                 ids=torch.tensor(ids, dtype=torch.int64), offsets=torch.tensor(offsets, dtype=torch.int64),
                 labels=torch.tensor([s[2] for s in samples], dtype=torch.float32))


class FusedLayout:
    """The log as the fused table reads it, built once: every id shifted by its feature's table
    (``feature * table_rows``) and flattened sample-major, with the start of every (sample, feature) bag.
    A run of rows is then a slice of each array. The per-step shifting, repeating and transposing the model did
    otherwise, and the batch re-derived from the padded arrays, were 17 aten ops a step that a hand-written loop
    does not run (227 in all against its 217)."""

    def __init__(self, log: ClickLog) -> None:
        shape = log.shape
        shifted = log.ids + np.arange(shape.sparse)[None, :, None] * shape.table_rows
        self.ids = torch.from_numpy(shifted[log.ids >= 0])
        self.starts = torch.from_numpy(np.concatenate([[0], np.cumsum(log.lengths.reshape(-1))]))
        """Start of bag (row, feature) at ``row * sparse + feature``; one more entry, the end of the last."""
        self.dense = torch.from_numpy(log.dense)
        self.labels = torch.from_numpy(log.labels)
        self.sparse = shape.sparse

    def rows(self, start: int, stop: int) -> Batch:
        """Rows [start, stop) as a fused batch: slices (views) and one subtraction."""
        bags = self.starts[start * self.sparse:stop * self.sparse + 1]
        first = int(bags[0])
        return Batch(dense=self.dense[start:stop], ids=self.ids[first:int(bags[-1])], offsets=bags[:-1] - first,
                     labels=self.labels[start:stop], fused=True)


class BatchedDataset(torch.utils.data.Dataset):
    """Item ``k`` is the whole batch of rows [k*batch, (k+1)*batch): slices and one mask, no Python per sample;
    with ``fused``, slices of the ``FusedLayout``."""

    def __init__(self, log: ClickLog, batch_size: int, rows: int | None = None, fused: bool = False) -> None:
        self.log = log
        self.batch_size = batch_size
        self.rows = log.shape.rows if rows is None else rows
        self.layout = FusedLayout(log) if fused else None

    def __len__(self) -> int:
        return self.rows // self.batch_size

    def __getitem__(self, k: int) -> Batch:
        start, stop = k * self.batch_size, (k + 1) * self.batch_size
        if self.layout is not None:
            return self.layout.rows(start, stop)
        return batch_of(self.log, np.arange(start, stop))


def batch_of(log: ClickLog, rows: np.ndarray) -> Batch:
    ids = log.ids[rows].transpose(1, 0, 2)  # feature-major: (sparse, batch, bag)
    lengths = log.lengths[rows].T.reshape(-1)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return Batch(dense=torch.from_numpy(log.dense[rows]), ids=torch.from_numpy(ids[ids >= 0]),
                 offsets=torch.from_numpy(offsets), labels=torch.from_numpy(log.labels[rows]))


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def init_rows(weight: torch.Tensor, table_rows: int) -> None:
    """DLRM's initialization: uniform within 1/sqrt(rows). torch's default, N(0, 1), starts every pairwise dot
    near dim in size, so the model first has to unlearn its start: after 160 steps two seeds then ended 2.5%
    apart in held-out loss (4.3% in probe loss), too far for the tuner to judge any stage's accuracy; with this,
    0.2% (1.7%)."""
    bound = table_rows ** -0.5
    nn.init.uniform_(weight, -bound, bound)


class DLRM(nn.Module):
    """Bottom MLP, embedding bags, pairwise dot interaction, top MLP.

    ``fused``: all tables in one ``EmbeddingBag`` (ids shifted by table), one kernel instead of one per
    feature. ``sparse``: embedding gradients as sparse tensors, so a row-wise optimizer touches only
    the rows a batch used instead of every row of every table.
    """

    tables: nn.ModuleList
    _pairs: torch.Tensor

    def __init__(self, shape: RecsysShape = RecsysShape(), fused: bool = False, sparse: bool = False) -> None:
        super().__init__()
        self.shape, self.fused = shape, fused
        self.bottom = _mlp([shape.dense, 64, shape.dim])
        if fused:
            self.tables = nn.ModuleList([nn.EmbeddingBag(shape.table_rows * shape.sparse, shape.dim, mode="sum",
                                                         sparse=sparse)])
        else:
            self.tables = nn.ModuleList([nn.EmbeddingBag(shape.table_rows, shape.dim, mode="sum", sparse=sparse)
                                         for _ in range(shape.sparse)])
        for weight in self.tables.parameters():
            init_rows(weight, shape.table_rows)
        features = shape.sparse + 1
        self.top = _mlp([shape.dim + features * (features - 1) // 2, 64, 1])
        # A buffer, so it moves with the model to the GPU; not saved, since it follows from the shape.
        self.register_buffer("_pairs", torch.triu_indices(features, features, offset=1), persistent=False)

    def embeddings(self, batch: Batch) -> torch.Tensor:
        """(batch, sparse, dim)."""
        n, s = len(batch), self.shape.sparse
        if self.fused and batch.fused:
            return self.tables[0](batch.ids, batch.offsets).view(n, s, -1)
        if self.fused:  # a feature-major batch (the per-sample pipeline): shift its ids here, every step
            device = batch.ids.device
            counts = torch.diff(batch.offsets, append=torch.tensor([batch.ids.numel()], device=device))
            table = torch.arange(s, device=device).repeat_interleave(n)
            shifted = batch.ids + (table * self.shape.table_rows).repeat_interleave(counts)
            return self.tables[0](shifted, batch.offsets).view(s, n, -1).transpose(0, 1)
        if batch.fused:
            raise ValueError("a fused batch (ids shifted into one table) needs the fused model")
        per_feature = batch.offsets.view(s, n)
        bounds = [*per_feature[1:, 0].tolist(), batch.ids.numel()]
        out = []
        for f, bag in enumerate(self.tables):
            start = int(per_feature[f, 0])
            out.append(bag(batch.ids[start:bounds[f]], per_feature[f] - start))
        return torch.stack(out, dim=1)

    def forward(self, batch: Batch) -> torch.Tensor:
        dense = self.bottom(batch.dense)
        vectors = torch.cat([dense.unsqueeze(1), self.embeddings(batch)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self._pairs[0], self._pairs[1]]
        return self.top(torch.cat([dense, dots], dim=1)).squeeze(1)


def optimizers(model: DLRM, lr: float, sparse: bool) -> list[torch.optim.Optimizer]:
    """Adam for the MLPs; for the tables Adam too (dense) or SparseAdam (row-wise, sparse gradients)."""
    dense_params = [*model.bottom.parameters(), *model.top.parameters()]
    tables = list(model.tables.parameters())
    if sparse:
        return [torch.optim.Adam(dense_params, lr=lr), torch.optim.SparseAdam(tables, lr=lr)]
    return [torch.optim.Adam(dense_params + tables, lr=lr)]


def train_step(model: DLRM, opts: list[torch.optim.Optimizer], batch: Batch) -> torch.Tensor:
    loss = nn.functional.binary_cross_entropy_with_logits(model(batch), batch.labels)
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    loss.backward()
    for opt in opts:
        opt.step()
    return loss.detach()


@torch.no_grad()
def eval_logloss(model: DLRM, batch: Batch) -> float:
    return float(nn.functional.binary_cross_entropy_with_logits(model(batch), batch.labels))


def describe() -> dict[str, Any]:
    shape = RecsysShape()
    return {"rows": shape.rows, "sparse_features": shape.sparse, "table_rows": shape.table_rows, "dim": shape.dim,
            "embedding_parameters": shape.sparse * shape.table_rows * shape.dim}


HELD_OUT_ROWS = 8192
"""Rows after the training rows, never trained on: the held-out log loss that ``evaluate`` reports."""


def workload(options: dict[str, Any]) -> Any:
    """The tuner's view: options ``batched``, ``sparse``, ``fused`` (each off in the naive baseline),
    ``compile_dense`` (torch.compile of the MLPs; the case study offers it on a GPU) and ``lr`` (1e-3; the case
    study's bigger-batch stages raise it). ``evaluate`` is the held-out log loss
    (lower is better) on rows no trial trains on. ``reference`` swaps in the hand-written loop's model and data
    (``recsys_reference``): the case study's yardstick, measured by the same worker."""
    from gpufly.tune.workload import Workload, WorkloadOption

    if options.get("reference"):
        from gpufly.tune.workloads import recsys_reference

        return recsys_reference.workload(options)
    train_rows = int(options.get("rows", 65_536))
    shape = RecsysShape(rows=train_rows + HELD_OUT_ROWS)
    log = ClickLog(shape)
    batched = bool(options.get("batched"))
    sparse = bool(options.get("sparse"))
    batch_size = int(options.get("batch_size", 256))
    lr = float(options.get("lr", 1e-3))
    fused = bool(options.get("fused"))
    model = DLRM(shape, fused=fused, sparse=sparse)
    if options.get("compile_dense"):  # the MLPs only: the sparse embedding bag stays eager
        model.bottom, model.top = (cast(nn.Sequential, torch.compile(part)) for part in (model.bottom, model.top))
    held_out = batch_of(log, np.arange(train_rows, shape.rows))

    def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(model(batch), batch.labels)

    def evaluate(model: nn.Module) -> float:
        return float(loss(model, held_out.to(next(model.parameters()).device)))

    return Workload(
        name="recsys", model=model,
        dataset=BatchedDataset(log, batch_size, train_rows, fused) if batched else PerSampleDataset(log, train_rows),
        loss=loss, batch_size=256, collate=None if batched else collate_per_sample,
        optimizer=lambda m: optimizers(cast(DLRM, m), lr=lr, sparse=sparse), batch_sampler_dataset=batched,
        evaluate=evaluate, higher_is_better=False,
        options=(
            WorkloadOption("batched", [False, True], "data", "one __getitem__ returns a whole batch by slicing"),
            WorkloadOption("sparse", [False, True], "compute", "sparse embedding gradients with SparseAdam",
                           "SparseAdam keeps moments per touched row only; checked by the probe loss"),
            WorkloadOption("fused", [False, True], "compute", "all tables in one EmbeddingBag"),
        ),
    )
