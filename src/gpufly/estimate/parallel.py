"""Training across GPUs and nodes: one step's time split into compute and communication, and where adding nodes
stops paying.

The layout is ``Job.layout``: tensor parallel (tp) inside a node, pipeline parallel (pp) across nodes, data parallel
(dp) over the rest, with ZeRO/FSDP sharding over dp. A step runs ``m`` micro-batches of ``Job.batch`` samples
through each pipeline (m = 1 without a pipeline or a --global-batch), and takes::

    micro-batch items m * (each of speed.training_micro_parts: matmuls, attention, elementwise traffic, weight casts
                      or dequantization, host floor) / (tp * pp); the weight casts also / dp under ZeRO-3
    optimizer step    once per step, on this GPU's share of the trainable parameters (/ tp * pp, and / dp from ZeRO-1)
    tensor parallel   m * (L / pp) * (4, or 6 with checkpointing) all-reduces of batch x seq x hidden (16-bit)
    pipeline bubble   (pp - 1) * (one micro-batch's compute and tensor-parallel time)    (1F1B: Narayanan et al.
                      2021, "Efficient Large-Scale Language Model Training on GPU Clusters", bubble (p-1)/m)
    pipeline sends    2 * (m + pp - 1) sends of a micro-batch's activations / tp between stages
    data parallel     ZeRO 0-2: one all-reduce of the gradients per step (ZeRO-2's reduce-scatter + all-gather moves
                      the same bytes); ZeRO-3/FSDP: per micro-batch two all-gathers of the weights (forward and
                      backward) and a reduce-scatter of the gradients, 1.5x the bytes (Rajbhandari et al. 2020)

Only the part of the data-parallel time that does not fit behind compute is added (overlap_note); tensor-parallel
all-reduces, the bubble and the pipeline sends are on the critical path. Collective times are estimate/comms.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.comms import Link, Topology, collective_s, send_s, topology
from gpufly.estimate.job import Job
from gpufly.estimate.memory import lora_adapter_params, memory
from gpufly.estimate.speed import (
    ACTIVATION_BYTES,
    ATTENTION_KERNEL,
    WEIGHT_TRAFFIC,
    StepPart,
    optimizer_step_part,
    training_micro_parts,
)
from gpufly.i18n import gettext as _
from gpufly.models.spec import ModelSpec

TP_ALLREDUCES_PER_LAYER_TRAINING = 4
"""Megatron-LM's tensor parallelism: two all-reduces per layer in the forward, two in the backward (Shoeybi et al.
2019, Figure 4); full recomputation runs the forward's two again."""
BACKWARD_SHARE = 2 / 3
"""The backward's share of a step's compute (twice the forward's FLOPs): DDP overlaps its gradient all-reduce with
it, bucket by bucket (Li et al. 2020, "PyTorch Distributed", VLDB)."""


def overlap_note() -> str:
    """The overlap assumption every multi-GPU training estimate rests on, in the reader's language."""
    return _("data-parallel communication overlaps compute: DDP's gradient all-reduce hides behind the last "
             "micro-batch's backward, FSDP's prefetched all-gathers and reduce-scatters behind each micro-batch's "
             "forward and backward; only what exceeds that compute is added")


DEFAULT_MICROBATCHES_PER_STAGE = 4
"""Micro-batches per pipeline stage when neither --microbatches nor --global-batch is given: m = 4 x pp keeps the
1F1B bubble (p-1)/m under 25%."""
MAX_NODES = 64
"""`fit` scans node counts 1..MAX_NODES for the point where adding nodes stops paying."""
STOP_SHARE = 0.5
"""Adding nodes stops paying where the throughput an added node brings falls under this share of what one node
brings at the smallest count that runs."""


@dataclass(frozen=True)
class TrainingStep:
    """One training step of ``job``: its parts, the samples it processes, and how the GPUs are split."""

    parts: tuple[StepPart, ...]
    samples: int
    microbatches: int
    layout: tuple[int, int, int]
    topology: Topology
    defaults: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return sum(part.seconds for part in self.parts)

    @property
    def samples_s(self) -> float:
        return self.samples / self.seconds

    def to_dict(self) -> dict[str, Any]:
        tp, pp, dp = self.layout
        return {"step_s": self.seconds, "samples_per_step": self.samples, "microbatches": self.microbatches,
                "tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp,
                "topology": self.topology.to_dict(), "defaults": list(self.defaults),
                "parts": [{"name": p.name, "seconds": p.seconds, "note": p.note, "communication": p.communication}
                          for p in self.parts]}


def microbatches(job: Job) -> int:
    """Micro-batches per step: --global-batch / (batch x dp) when given (refused when it does not divide), else
    --microbatches, else DEFAULT_MICROBATCHES_PER_STAGE x pp with a pipeline and 1 without."""
    _tp, pp, dp = job.layout
    if job.global_batch:
        per_step = job.batch * dp
        if job.global_batch % per_step:
            raise GpuflyError(f"--global-batch {job.global_batch} is not a whole number of micro-batches of "
                              f"{job.batch} on {dp} data-parallel ranks ({per_step} samples each)",
                              hint=f"a multiple of {per_step}, e.g. --global-batch {per_step * max(1, pp)}")
        count = job.global_batch // per_step
        if job.microbatches and job.microbatches != count:
            raise GpuflyError(f"--global-batch {job.global_batch} makes {count} micro-batches per step, but "
                              f"--microbatches says {job.microbatches}", hint="give one of them")
        return count
    if job.microbatches:
        return job.microbatches
    return DEFAULT_MICROBATCHES_PER_STAGE * pp if pp > 1 else 1


def _groups(job: Job) -> tuple[tuple[int, int], tuple[int, int]]:
    """(GPUs per node, nodes) of a tensor-parallel group and of a data-parallel group. Ranks are placed tensor
    first, then data, then pipeline (Megatron's order), so a pipeline stage per node when pp >= nodes."""
    tp, pp, dp = job.layout
    tp_group = (min(tp, job.gpus), max(1, tp // job.gpus))
    stages_per_node = max(1, pp // job.nodes)
    dp_per_node = max(1, min(dp, job.gpus // max(1, tp) // stages_per_node))
    return tp_group, (dp_per_node, max(1, dp // dp_per_node))


def _stage_link(topo: Topology, job: Job) -> Link:
    """Pipeline stages sit on different nodes when there are several, else on the node's link."""
    return topo.inter if topo.inter is not None and job.nodes > 1 else topo.intra


def training_step(spec: ModelSpec, gpu: GpuSpec, job: Job,
                  attention_kernel: str = ATTENTION_KERNEL) -> TrainingStep | None:
    """One step of ``job`` on its ``job.world`` GPUs, item by item; None when one GPU's time is unknown (no tensor
    rate, no FLOP count)."""
    micro_parts = training_micro_parts(spec, gpu, job, attention_kernel)
    if micro_parts is None:
        return None
    tp, pp, dp = job.layout
    if (tp > 1 or pp > 1) and not spec.is_transformer:
        raise GpuflyError(f"--tp and --pp split a transformer's layers; {spec.name} is not one",
                          hint="train it data parallel: --tp 1 --pp 1 (the default)")
    if pp > (spec.layers or 1):
        raise GpuflyError(f"--pp {pp} is more pipeline stages than {spec.name}'s {spec.layers} layers",
                          hint=f"--pp {spec.layers} or fewer")
    m = microbatches(job)
    topo, said = topology(gpu, job)
    split = (_("the model split {ways} ways").format(ways=tp * pp) if tp * pp > 1
             else _("a whole model on each GPU"))
    each = tuple(_on_one_gpu(part, job) for part in micro_parts)
    micro = sum(part.seconds for part in each)
    first, *rest = each
    how = _("{m} x micro-batch {batch} per GPU, {split}").format(m=m, batch=job.batch, split=split)
    parts = [StepPart(first.name, m * first.seconds, f"{first.note}; {how}"),
             *(StepPart(part.name, m * part.seconds, part.note) for part in rest)]
    parts.append(optimizer_step_part(spec, gpu, job))
    tp_micro = _tensor_parallel_s(spec, job, topo)
    if tp_micro:
        parts.append(StepPart("tensor-parallel all-reduce", m * tp_micro, _(
            "{count} all-reduces per micro-batch over {link}").format(
                count=_tp_count(spec, job), link=_tp_link_label(topo, job)), communication=True))
    if pp > 1:
        parts.append(StepPart("pipeline bubble", (pp - 1) * (micro + tp_micro), _(
            "1F1B: {stages} stages idle (p-1)/m = {share} of the micro-batches' time").format(
                stages=pp, share=f"{(pp - 1) / m:.0%}")))
        link = _stage_link(topo, job)
        message = job.batch * job.context * (spec.hidden or 0) * ACTIVATION_BYTES / tp
        parts.append(StepPart("pipeline sends", 2 * (m + pp - 1) * send_s(message, link), _(
            "activations forward and gradients back between stages over {link}").format(link=link.label),
            communication=True))
    if dp > 1:
        total, hidden = _data_parallel_s(spec, job, topo, m, micro)
        parts.append(StepPart("data-parallel communication (exposed)", max(0.0, total - hidden), _(
            "{kind}: {total} s a step, {hidden} s of it hidden behind compute").format(
                kind=_dp_kind(job), total=f"{total:.3f}", hidden=f"{min(total, hidden):.3f}"), communication=True))
    return TrainingStep(tuple(parts), job.batch * m * dp, m, (tp, pp, dp), topo, said)


def _on_one_gpu(part: StepPart, job: Job) -> StepPart:
    """A whole-model micro-batch item as one GPU runs it: tensor and pipeline parallelism split the work tp x pp
    ways; under ZeRO-3/FSDP each GPU also casts and accumulates only its shard of the weights."""
    tp, pp, dp = job.layout
    ways = tp * pp * (dp if job.zero >= 3 and part.name == WEIGHT_TRAFFIC else 1)
    return StepPart(part.name, part.seconds / ways, part.note)


def _tp_count(spec: ModelSpec, job: Job) -> int:
    per_layer = TP_ALLREDUCES_PER_LAYER_TRAINING + (2 if job.checkpointing else 0)
    return math.ceil((spec.layers or 1) / job.layout[1]) * per_layer


def _tp_link_label(topo: Topology, job: Job) -> str:
    tp = job.layout[0]
    if tp > job.gpus and topo.inter is not None:
        return _("{link} (tensor parallelism across nodes: every layer waits on the network)").format(
            link=topo.inter.label)
    return topo.intra.label


def _tensor_parallel_s(spec: ModelSpec, job: Job, topo: Topology) -> float:
    """One micro-batch's tensor-parallel all-reduces on one pipeline stage."""
    tp = job.layout[0]
    if tp == 1:
        return 0.0
    (per_node, nodes), _dp = _groups(job)
    message = job.batch * job.context * (spec.hidden or 0) * ACTIVATION_BYTES
    return _tp_count(spec, job) * collective_s("all-reduce", message, topo, per_node, nodes)


def _dp_kind(job: Job) -> str:
    if job.zero >= 3:
        return _("ZeRO-3/FSDP: all-gather weights twice and reduce-scatter gradients per micro-batch")
    return _("gradient all-reduce once per step") if job.zero < 2 else _(
        "ZeRO-2: reduce-scatter gradients and all-gather weights once per step")


def _data_parallel_s(spec: ModelSpec, job: Job, topo: Topology, m: int, micro: float) -> tuple[float, float]:
    """Seconds of data-parallel communication per step, and how much compute can hide it."""
    tp, pp, _dp = job.layout
    _tp_group, (per_node, nodes) = _groups(job)
    local = spec.params / (tp * pp)
    trainable = local if job.task == "full" else lora_adapter_params(spec, job) / (tp * pp)
    weight_b = 2 if job.mixed_precision else 4
    grad_b = weight_b if job.task == "full" else 4
    if job.zero >= 3:
        per_micro = (2 * collective_s("all-gather", local * weight_b, topo, per_node, nodes)
                     + collective_s("reduce-scatter", trainable * grad_b, topo, per_node, nodes))
        return m * per_micro, m * micro
    return collective_s("all-reduce", trainable * grad_b, topo, per_node, nodes), BACKWARD_SHARE * micro


@dataclass(frozen=True)
class ScalePoint:
    """The job on ``nodes`` nodes: samples/s, efficiency against the smallest count, whether it fits."""

    nodes: int
    samples_s: float
    step_s: float
    communication_s: float
    efficiency: float
    fits: bool

    def to_dict(self, band: tuple[float, float] = (1.0, 1.0)) -> dict[str, Any]:
        """``band``: the 80% range as ratios to the value (the job's own training-speed band)."""
        return {"nodes": self.nodes, "samples_s": self.samples_s, "samples_s_low": self.samples_s * band[0],
                "samples_s_high": self.samples_s * band[1], "step_s": self.step_s,
                "communication_s": self.communication_s, "efficiency": self.efficiency, "fits": self.fits,
                "hypothetical": not self.fits}


@dataclass(frozen=True)
class Scaling:
    """Throughput over node counts 1..MAX_NODES (those the layout and global batch allow) and where adding nodes
    stops paying: ``stops_at`` is the first count whose added nodes bring less than STOP_SHARE of a node's
    throughput (None: it keeps paying to MAX_NODES); ``why`` says what ended the scan early, if anything."""

    points: tuple[ScalePoint, ...]
    stops_at: int | None
    threshold: float = STOP_SHARE
    why: str = ""
    notes: tuple[str, ...] = field(default=())

    def point(self, nodes: int) -> ScalePoint | None:
        return next((p for p in self.points if p.nodes == nodes), None)

    def to_dict(self, band: tuple[float, float] = (1.0, 1.0)) -> dict[str, Any]:
        """``band``: each count's 80% range as ratios to its samples/s (a count's prediction is the same model's, so
        it shares the job's band)."""
        return {"points": [p.to_dict(band) for p in self.points], "stops_paying_at_nodes": self.stops_at,
                "threshold": self.threshold, "why": self.why or None, "notes": list(self.notes)}


def scaling(spec: ModelSpec, gpu: GpuSpec, job: Job, max_nodes: int = MAX_NODES) -> Scaling | None:
    """The job's throughput on 1..max_nodes nodes with its per-node layout (tp, pp and micro-batch kept; data
    parallelism grows), from the smallest count that fits in memory, and the count where adding nodes stops paying.
    None for one GPU's unknown time."""
    steps: list[tuple[int, TrainingStep, bool]] = []
    why = ""
    for nodes in range(1, max_nodes + 1):
        try:
            changed = job.with_(nodes=nodes)
        except GpuflyError:
            continue
        if job.optimizer_in_backward and changed.accumulates:
            continue  # fewer nodes would accumulate gradients, which stepping in backward cannot
        if job.global_batch and changed.batch * changed.data_parallel > job.global_batch:
            why = _("past {nodes} nodes the global batch {batch} leaves no micro-batch for some data-parallel "
                    "ranks").format(nodes=steps[-1][0] if steps else nodes, batch=job.global_batch)
            break
        try:
            step = training_step(spec, gpu, changed)
        except GpuflyError:
            if job.global_batch:
                continue
            raise
        if step is None:
            return None
        steps.append((nodes, step, memory(spec, changed).total_bytes <= gpu.vram_gib * 2**30))
    if not steps:
        return Scaling((), None, why=why)
    first_fit = next((index for index, (_n, _s, fits) in enumerate(steps) if fits), 0)
    notes = (_("below {nodes} nodes the job does not fit in memory; the scan starts there").format(
        nodes=steps[first_fit][0]),) if first_fit else ()
    steps = steps[first_fit:]
    base_nodes, base_step, _fits = steps[0]
    per_node = base_step.samples_s / base_nodes
    points = tuple(ScalePoint(n, s.samples_s, s.seconds, sum(p.seconds for p in s.parts if p.communication),
                              s.samples_s / (per_node * n), fits) for n, s, fits in steps)
    stops_at = next((b.nodes for a, b in pairwise(points)
                     if (b.samples_s - a.samples_s) / (b.nodes - a.nodes) < STOP_SHARE * per_node), None)
    return Scaling(points, stops_at, why=why, notes=notes)
