"""Training across GPUs and nodes: a step's compute and communication, layouts a real run would refuse, and the
point where adding nodes stops paying."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufly.catalog import default_catalog
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.advise import fit
from gpufly.estimate.job import Job
from gpufly.estimate.memory import memory
from gpufly.estimate.parallel import microbatches, scaling, training_step
from gpufly.estimate.ranges import where
from gpufly.models.hf_config import load_config_file, spec_from_config

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
LLAMA = spec_from_config(load_config_file(CONFIGS / "llama-3.1-8b"), "Llama 3.1 8B", "test")


@pytest.fixture(scope="module")
def h100() -> GpuSpec:
    return next(spec for spec in default_catalog() if spec.id == "h100-sxm")


MICRO_BATCH_ITEMS = ["compute", "attention", "elementwise memory traffic", "weight casts and gradient accumulation"]
"""A full mixed-precision training micro-batch's items, in the order the step shows them."""


def names(step) -> list[str]:
    return [part.name for part in step.parts]


def part(step, name: str) -> float:
    return next(item.seconds for item in step.parts if item.name == name)


def test_data_parallel_step_is_compute_plus_what_the_network_leaves_exposed(h100) -> None:
    fast = training_step(LLAMA, h100, Job(task="full", gpus=8, nodes=2, zero=3))
    slow = training_step(LLAMA, h100, Job(task="full", gpus=8, nodes=2, zero=3, internode="eth-10"))
    assert fast is not None and slow is not None
    assert names(fast) == [*MICRO_BATCH_ITEMS, "optimizer step", "data-parallel communication (exposed)"]
    assert part(fast, "data-parallel communication (exposed)") == 0, "InfiniBand NDR hides FSDP's traffic"
    assert part(slow, "data-parallel communication (exposed)") > 10 * part(slow, "compute"), (
        "10 GbE cannot move 3 x 16 GB per step in time")
    assert fast.samples == 16 and fast.layout == (1, 1, 16)


def test_zero_shards_the_optimizer_step_over_the_data_parallel_gpus(h100) -> None:
    ddp = training_step(LLAMA, h100, Job(task="full", gpus=8))
    zero1 = training_step(LLAMA, h100, Job(task="full", gpus=8, zero=1))
    assert ddp is not None and zero1 is not None
    assert part(zero1, "optimizer step") == pytest.approx(part(ddp, "optimizer step") / 8)
    assert part(zero1, "compute") == part(ddp, "compute"), "ZeRO-1 leaves each GPU's micro-batch as it was"


def test_tensor_and_pipeline_parallel_add_their_items(h100) -> None:
    step = training_step(LLAMA, h100, Job(task="full", gpus=8, nodes=4, tensor_parallel=8, pipeline_parallel=4))
    assert step is not None and step.layout == (8, 4, 1)
    assert names(step) == [*MICRO_BATCH_ITEMS, "optimizer step", "tensor-parallel all-reduce", "pipeline bubble",
                           "pipeline sends"]
    assert step.microbatches == 16, "4 micro-batches per stage by default"
    micro_batches = sum(part(step, name) for name in (*MICRO_BATCH_ITEMS, "tensor-parallel all-reduce"))
    assert part(step, "pipeline bubble") == pytest.approx(micro_batches * 3 / 16), (
        "1F1B: (p-1)/m of the micro-batches' time")


def test_global_batch_sets_the_micro_batches_and_must_divide(h100) -> None:
    assert microbatches(Job(task="full", gpus=8, nodes=2, global_batch=64)) == 4
    with pytest.raises(GpuflyError, match="whole number of micro-batches"):
        microbatches(Job(task="full", gpus=8, nodes=2, global_batch=100))


def test_layouts_a_launcher_refuses_are_refused(h100) -> None:
    with pytest.raises(GpuflyError, match="does not divide"):
        Job(task="full", gpus=8, tensor_parallel=3)
    with pytest.raises(GpuflyError, match="--nodes must be a positive"):
        Job(task="full", gpus=8, nodes=0)
    with pytest.raises(GpuflyError, match="spans nodes"):
        Job(task="full", gpus=8, nodes=3, tensor_parallel=12)
    with pytest.raises(GpuflyError, match="attention heads"):
        fit(LLAMA, h100, Job(task="full", gpus=8, nodes=3, tensor_parallel=3))
    with pytest.raises(GpuflyError, match="--tp and --pp set a training layout"):
        Job(gpus=8, tensor_parallel=2)
    with pytest.raises(GpuflyError, match=r"not for llama\.cpp"):
        fit(LLAMA, h100, Job(engine="llama.cpp", quant="q4_k_m", gpus=8, nodes=2))


def test_tensor_parallel_across_nodes_is_flagged(h100) -> None:
    verdict = fit(LLAMA, h100, Job(task="full", gpus=8, nodes=2, tensor_parallel=16, pipeline_parallel=1))
    assert any("spans 2 nodes" in note for note in verdict.notes)


def test_memory_splits_over_model_parallel_then_zero(h100) -> None:
    alone = memory(LLAMA, Job(task="full", gpus=8, nodes=4))
    split = memory(LLAMA, Job(task="full", gpus=8, nodes=4, tensor_parallel=8, pipeline_parallel=2))
    sharded = memory(LLAMA, Job(task="full", gpus=8, nodes=4, zero=3))
    assert split.get("weights") == alone.get("weights") // 16
    assert sharded.get("weights") == alone.get("weights") // 32
    assert split.get("activations") < alone.get("activations")


def test_scaling_finds_where_adding_nodes_stops_paying(h100) -> None:
    keeps = scaling(LLAMA, h100, Job(task="full", gpus=8, nodes=2, zero=3), max_nodes=8)
    assert keeps is not None and keeps.stops_at is None
    assert all(point.efficiency > 0.95 for point in keeps.points)
    stops = scaling(LLAMA, h100, Job(task="full", gpus=8, nodes=2, zero=3, internode="eth-100"), max_nodes=8)
    assert stops is not None and stops.stops_at == 2, "one 100 GbE NIC per node: the second node already costs more"
    fixed = scaling(LLAMA, h100, Job(task="full", gpus=8, nodes=2, zero=3, global_batch=64), max_nodes=16)
    assert fixed is not None and [p.nodes for p in fixed.points] == [1, 2, 4, 8] and "global batch 64" in fixed.why


def test_multi_node_ranges_are_widened_where_no_row_reaches_and_say_why(h100) -> None:
    """The fit rows span up to 8 nodes, FSDP over InfiniBand (llm-foundry): more nodes, another layout or a network
    without RDMA lies outside them."""
    covered = fit(LLAMA, h100, Job(task="full", gpus=8, nodes=4, zero=3)).speed_ranges["train_tokens_s"]
    assert not covered.basis.widened
    for job, why in ((Job(task="full", gpus=8, nodes=32, zero=3), "across 32 nodes"),
                     (Job(task="full", gpus=8, nodes=4, zero=3, internode="eth-100"), "without RDMA"),
                     (Job(task="full", gpus=8, nodes=4, tensor_parallel=8), "this layout across nodes")):
        outside = fit(LLAMA, h100, job).speed_ranges["train_tokens_s"]
        assert why in outside.basis.text()
        assert outside.high / outside.value > covered.high / covered.value
    assert where("decode", LLAMA, h100, Job(engine="vllm", gpus=2, link="pcie")).uncovered
