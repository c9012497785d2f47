"""The recommender workload: both pipelines give the same batches, fused and sparse give the same model."""

from __future__ import annotations

import numpy as np
import torch

from gpufly.tune.workloads.recsys import (
    DLRM,
    BatchedDataset,
    ClickLog,
    PerSampleDataset,
    RecsysShape,
    collate_per_sample,
    eval_logloss,
    optimizers,
    train_step,
)

SMALL = RecsysShape(rows=4096, table_rows=1000, dim=8)


def test_the_naive_and_the_batched_pipelines_give_the_same_batch() -> None:
    log = ClickLog(SMALL)
    naive = collate_per_sample([PerSampleDataset(log)[i] for i in range(64, 128)])
    batched = BatchedDataset(log, 64)[1]
    for name in ("dense", "ids", "offsets", "labels"):
        assert torch.equal(getattr(naive, name), getattr(batched, name)), name
    assert len(batched) == 64 and batched.offsets.numel() == SMALL.sparse * 64
    assert int(batched.ids.numel()) == int(log.lengths[64:128].sum())


def _copy_tables(per_table: DLRM, fused: DLRM) -> None:
    fused.load_state_dict({k: v for k, v in per_table.state_dict().items() if not k.startswith("tables")},
                          strict=False)
    with torch.no_grad():
        fused.tables[0].weight.copy_(torch.cat([t.weight for t in per_table.tables]))


def test_fused_tables_compute_what_one_table_per_feature_computes() -> None:
    torch.manual_seed(0)
    per_table, fused = DLRM(SMALL), DLRM(SMALL, fused=True)
    _copy_tables(per_table, fused)
    batch = BatchedDataset(ClickLog(SMALL), 128)[0]
    torch.testing.assert_close(fused(batch), per_table(batch))


def test_sparse_gradients_with_a_row_wise_optimizer_follow_the_dense_run() -> None:
    log = ClickLog(SMALL)
    batches = [BatchedDataset(log, 256)[k] for k in range(8)]
    losses = {}
    for sparse in (False, True):
        torch.manual_seed(0)
        model = DLRM(SMALL, sparse=sparse)
        opts = optimizers(model, lr=1e-2, sparse=sparse)
        losses[sparse] = [float(train_step(model, opts, b)) for b in batches]
    # SparseAdam keeps moments only for touched rows, so the two drift apart a little; they must stay close.
    assert np.allclose(losses[False][:2], losses[True][:2], rtol=1e-5)
    assert abs(losses[False][-1] - losses[True][-1]) < 0.05


def test_training_lowers_the_held_out_loss() -> None:
    log = ClickLog(RecsysShape(rows=20_000, table_rows=1000, dim=8))
    data = BatchedDataset(log, 512)
    held_out = data[len(data) - 1]
    torch.manual_seed(0)
    model = DLRM(log.shape, fused=True, sparse=True)
    opts = optimizers(model, lr=5e-3, sparse=True)
    before = eval_logloss(model, held_out)
    for k in range(len(data) - 1):
        train_step(model, opts, data[k])
    assert eval_logloss(model, held_out) < before - 0.02


def test_the_model_and_its_batches_move_to_the_device_together() -> None:
    """On a GPU every tensor the forward pass builds must live where the batch is, or the GPU run measures
    the host: the pair indices are a buffer (moved by ``model.to``) and a batch has ``to``."""
    model = DLRM(SMALL, fused=True)
    assert "_pairs" in dict(model.named_buffers()) and "_pairs" not in model.state_dict()
    batch = BatchedDataset(ClickLog(SMALL), 32)[0]
    moved = batch.to("cpu")
    assert torch.equal(moved.ids, batch.ids) and len(moved) == 32
    assert model(moved).shape == (32,)
