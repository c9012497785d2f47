"""The recommender workload: both pipelines give the same batches, fused and sparse give the same model, and the
fused stage computes what the hand-written reference loop computes, with no more ops a step."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gpufly.tune import ResultsLog, Search, Trial, TrialResult
from gpufly.tune.noise import Interval
from gpufly.tune.stages import CaseStudy, Comparison, Limit, Traffic, stages, with_limit
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
    workload,
)
from gpufly.tune.workloads.recsys_reference import ClickData, HandDLRM, loss_of
from gpufly.tune.workloads.recsys_reference import optimizers as hand_optimizers
from tests.tune.fakes import FakeMachine

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
        fused.get_parameter("tables.0.weight").copy_(torch.cat([t.get_parameter("weight") for t in per_table.tables]))


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


def test_the_fused_layout_gives_the_model_what_the_per_feature_batches_give_it() -> None:
    """Ids shifted into one table and laid out sample by sample once, when the log loads, give the fused model the
    same outputs as the feature-major batches it shifts itself every step."""
    torch.manual_seed(0)
    per_table, fused = DLRM(SMALL), DLRM(SMALL, fused=True)
    _copy_tables(per_table, fused)
    log = ClickLog(SMALL)
    laid_out = BatchedDataset(log, 128, fused=True)[1]
    assert laid_out.fused and len(laid_out) == 128 and laid_out.offsets.numel() == SMALL.sparse * 128
    assert int(laid_out.offsets[0]) == 0 and int(laid_out.ids.max()) < SMALL.sparse * SMALL.table_rows
    feature_major = BatchedDataset(log, 128)[1]
    torch.testing.assert_close(fused(laid_out), per_table(feature_major))
    torch.testing.assert_close(fused(laid_out), fused(feature_major))
    moved = laid_out.to("cpu")
    assert moved.fused, "a batch keeps its layout when it moves"


def test_a_fused_batch_is_refused_by_the_per_feature_model() -> None:
    batch = BatchedDataset(ClickLog(SMALL), 32, fused=True)[0]
    with pytest.raises(ValueError, match="needs the fused model"):
        DLRM(SMALL)(batch)


def test_the_fused_stage_trains_exactly_as_the_hand_written_loop() -> None:
    """Same initial weights, same samples, same optimizers: the same losses step for step, so any gap in speed
    between the case study's fused stage and its reference row is overhead, not a different computation."""
    log = ClickLog(SMALL)
    torch.manual_seed(0)
    stage = DLRM(SMALL, fused=True, sparse=True)
    torch.manual_seed(0)
    hand = HandDLRM(SMALL)
    stage_opts, hand_opts = optimizers(stage, lr=1e-2, sparse=True), hand_optimizers(hand, lr=1e-2)
    batches, data = BatchedDataset(log, 256, fused=True), ClickData(log)
    for k in range(6):
        ours = float(train_step(stage, stage_opts, batches[k]))
        loss = loss_of(hand, data.rows(k * 256, (k + 1) * 256))
        for opt in hand_opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in hand_opts:
            opt.step()
        assert ours == pytest.approx(float(loss.detach()), rel=1e-6), k


class _Ops(TorchDispatchMode):
    """Counts the aten ops a block runs."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count += 1
        return func(*args, **(kwargs or {}))


def _ops_per_step(options: dict[str, Any]) -> int:
    """The aten ops of one training step as the tuner's worker runs it (batch, loss, backward, step, readback)."""
    from gpufly.tune import worker

    built = workload({**options, "rows": 4096})
    opts = worker.optimizers_of(built, built.model)
    for k in range(2):  # the optimizers' state exists from here on
        worker._step(opts, built.loss(built.model, built.dataset[k]), None)
    with _Ops() as ops:
        loss = built.loss(built.model, worker.to_device(built.dataset[2], torch.device("cpu"), False))
        worker._step(opts, loss, None)
        float(loss.detach())
    return ops.count


def test_the_fused_stage_runs_no_more_ops_a_step_than_the_hand_written_loop() -> None:
    """Before the fused layout, the stage shifted, repeated and transposed ids every step (227 aten ops against
    217); the regression this guards against is any op the hand-written loop does not need."""
    stage = _ops_per_step({"batched": True, "sparse": True, "fused": True})
    assert stage <= _ops_per_step({"reference": True})


def test_the_reference_workload_is_what_the_worker_runs_for_the_reference_row() -> None:
    built = workload({"reference": True, "rows": 4096, "batch_size": 512})
    assert built.batch_sampler_dataset and isinstance(built.model, HandDLRM)
    dense, ids, offsets, labels = built.dataset[1]
    assert dense.shape == (512, 13) and labels.shape == (512,) and offsets.numel() == 8 * 512
    assert int(offsets[0]) == 0 and int(offsets[-1]) < ids.numel() <= 8 * 4 * 512
    assert built.evaluate is not None and 0.0 < built.evaluate(built.model) < 2.0


def test_the_traffic_model_follows_the_workload_s_shape() -> None:
    """The byte count of the limit rests on the shape's numbers and the MLP's size: tied to the real model."""
    shape, traffic = RecsysShape(), Traffic()
    model = DLRM(shape, fused=True)
    mlp = sum(p.numel() for p in [*model.bottom.parameters(), *model.top.parameters()])
    assert traffic.mlp_parameters == mlp
    assert (traffic.features, traffic.dim, traffic.dense) == (shape.sparse, shape.dim, shape.dense)
    assert traffic.ids_per_feature == (1 + shape.bag) / 2, "bags of 1 to bag ids, uniform"
    log = ClickLog(RecsysShape(rows=20_000))
    assert float(log.lengths.mean()) == pytest.approx(traffic.ids_per_feature, rel=0.02)
    assert traffic.bytes_per_sample(2048) < traffic.bytes_per_sample(256), "the MLP's update is shared by the batch"


SPEEDS = {"batched": 1.2, "sparse": 8.0, "fused": 1.5, "optimizer_impl": 1.1, "batch_size": 1.5, "num_workers": 0.6,
          "ddp": 0.5, "reference": 14.0}


def _case_study(tmp_path: Path, machine: FakeMachine) -> tuple[CaseStudy, Search]:
    """The case study's plan on a fake machine whose results carry their batch size, as the worker's do."""

    def runner(trial: Trial) -> TrialResult:
        result = machine(trial)
        result.batch_size = int(trial.knobs.get("batch_size", 256))
        return result

    plan = stages(2)
    return plan, Search(plan, ResultsLog(tmp_path / "stages.jsonl"), runner)


def test_the_reference_row_is_measured_beside_the_fastest_stage_and_never_carried_or_named_best(
        tmp_path: Path) -> None:
    machine = FakeMachine(SPEEDS, noise=0.02)
    plan, search = _case_study(tmp_path, machine)
    search.run()
    reference = [r for r in search.results if r.stage == "reference"]
    assert len(reference) == 1 and reference[0].knobs == {"reference": True}
    assert all("reference" not in r.knobs for r in search.results if r.stage != "reference"), "never carried"
    assert reference[0].rounds == 0 and len(reference[0].throughputs) == plan.rounds
    stages_run = [r for r in search.results if r.stage not in ("reference", "baseline") and r.role == "trial"]
    decision = search.decision()
    named = decision.winner if decision.verdict == "faster" else None
    fastest = named or max(stages_run, key=lambda r: r.speedup or 0.0)
    like = max((r for r in stages_run if "batch_size" not in r.knobs), key=lambda r: r.speedup or 0.0)
    assert [c.stage for c in plan.comparisons] == [fastest.name, like.name] != [fastest.name, fastest.name], \
        "the stage the run names (else the fastest) beside the loop, and the fastest at the loop's own batch"
    assert all(c.rounds == plan.rounds for c in plan.comparisons)
    assert machine.runs.count(reference[0].name) == plan.rounds
    winner = search.decision().winner
    assert winner is None or winner.stage != "reference", "the yardstick is never the best stage"
    resumed_plan, resumed = _case_study(tmp_path, FakeMachine(SPEEDS))
    resumed.run()
    assert [r.name for r in resumed.results if r.stage == "reference"] == [reference[0].name]
    assert resumed_plan.comparisons == [], "a resumed run reads the row back; the rounds are not re-run"


def test_the_comparison_says_whether_the_stage_matches_the_hand_written_loop() -> None:
    matches = Comparison("+ fused", Interval(0.99, 0.95, 1.04), 4)
    slower = Comparison("+ fused", Interval(0.77, 0.74, 0.80), 4)
    assert matches.text().startswith("+ fused matches the hand-written loop: 0.99x")
    assert "is slower than" in slower.text() and "0.74-0.80x over 4 A/B rounds" in slower.text()
    assert matches.to_dict() == {"stage": "+ fused", "ratio": 0.99, "interval": [0.95, 1.04], "rounds": 4}


def test_each_row_gets_its_share_of_the_memory_bandwidth_limit() -> None:
    limit = Limit(bandwidth_bytes_per_s=1.9e9)
    rows = with_limit([{"throughput": 10_000.0, "batch_size": 256}, {"throughput": None, "batch_size": 2048}],
                      limit)
    assert rows[0]["limit_share"] == pytest.approx(10_000 / (1.9e9 / Traffic().bytes_per_sample(256)))
    assert rows[1]["limit_share"] is None and rows[1]["bytes_per_sample"] < rows[0]["bytes_per_sample"]
    assert with_limit(rows, None)[0]["limit_share"] is None


def test_the_gpu_only_stages_come_with_cuda() -> None:
    cpu, gpu = stages(2), stages(4, cuda=True)
    assert cpu.stages[0].stage == "baseline" and cpu.stages[-1].adds == {"ddp": 2}
    assert "reference" not in {s.stage for s in cpu.stages}, "the reference row is not a stage"
    added = {k for s in gpu.stages for k in s.adds} - {k for s in cpu.stages for k in s.adds}
    assert added == {"pin_memory", "prefetch_factor", "compile_dense"} and gpu.stages[-1].adds == {"ddp": 4}


def test_the_stage_set_beside_the_hand_written_loop_is_a_safe_one_never_one_whose_accuracy_was_not_judged() -> None:
    """A stage that ran fast but whose accuracy the run could not judge (the baseline's seeds too far apart) is no
    "fastest safe" stage: the comparison with the hand-written loop takes the fastest judged-safe one."""
    from gpufly.tune.stages import fastest_safe

    def row(stage: str, speedup: float, **extra: Any) -> TrialResult:
        result = TrialResult(stage, {}, "ok", throughput=100 * speedup, speedup=speedup, batch_size=256, **extra)
        result.stage = stage
        return result

    results = [row("batch 2048", 9.0, unjudged="seeds"), row("sparse", 3.0), row("fused", 2.0)]
    chosen = fastest_safe(results)
    assert chosen is not None and chosen.name == "sparse"
    assert fastest_safe([row("batch 2048", 9.0, unjudged="seeds")]) is None


def test_the_reference_row_has_an_interval_from_rounds_beside_the_baseline_and_one_run_s_figures(
        tmp_path: Path) -> None:
    """The probe's case: every stage had an interval, the hand-written loop's row none (its speedup was the median of
    its runs over the baseline's median). The baseline now runs in each of its rounds: the row's speedup is the
    geometric mean of its ratios to the baseline beside it, with their interval; its figures are its median run's."""
    machine = FakeMachine(SPEEDS, noise=0.02, timed=True)
    plan, search = _case_study(tmp_path, machine)
    baseline_runs_before_reference: list[int] = []
    runner = search.runner

    def counting(trial: Trial) -> TrialResult:
        if trial.knobs == {"reference": True} and not baseline_runs_before_reference:
            baseline_runs_before_reference.append(machine.runs.count(search.baseline.name))  # type: ignore[union-attr]
        return runner(trial)

    search.runner = counting
    search.run()
    reference = next(r for r in search.results if r.stage == "reference")
    assert reference.rounds == 0, "never a candidate"
    assert reference.pairs == plan.rounds and reference.speedup_low is not None and reference.speedup_high is not None
    assert reference.speedup_low <= (reference.speedup or 0) <= reference.speedup_high
    assert reference.speedup == pytest.approx((reference.paired_throughput or 0) / (reference.paired_baseline or 1))
    assert reference.speedup_low < 14.0 < reference.speedup_high, "the fake machine's truth: 14x the baseline"
    baseline_name = search.baseline.name  # type: ignore[union-attr]
    assert machine.runs.count(baseline_name) >= baseline_runs_before_reference[0] + plan.rounds
    runs = [r for r in machine.results if r.knobs == {"reference": True}]
    assert (reference.throughput, reference.median_step_throughput, reference.seconds) in [
        (r.throughput, r.median_step_throughput, r.seconds) for r in runs], "one run's figures"
    row = reference.to_dict()
    assert row["speedup_interval"] == [reference.speedup_low, reference.speedup_high] and row["pairs"] == plan.rounds


def test_the_bandwidth_behind_the_limit_column_comes_with_its_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpufly.cli.tune
    from gpufly.cli.tune import bandwidth_text, measure_copy_bandwidth

    monkeypatch.setattr(gpufly.cli.tune, "COPY_BYTES", 2**20)
    limit = measure_copy_bandwidth(torch, "cpu")
    assert limit.bandwidth_interval is not None and limit.copies == 10 and limit.interval_level > 0.95
    low, high = limit.bandwidth_interval
    assert low <= limit.bandwidth_bytes_per_s <= high
    rows = with_limit([{"throughput": 10_000.0, "batch_size": 256}], limit)
    share_low, share_high = rows[0]["limit_share_interval"]
    assert share_low <= rows[0]["limit_share"] <= share_high
    text = bandwidth_text(limit.to_dict())
    assert re.fullmatch(r"[\d.]+ GB/s \[[\d.]+-[\d.]+\] \(median of 10 copies, 9\d\.\d% interval\)", text), text
