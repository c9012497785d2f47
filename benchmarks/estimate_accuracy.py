"""How far gpufly's estimates are from published measurements, on a fit set and a check set apart.

    python benchmarks/estimate_accuracy.py [--rows DIR] [--detail] [--write-ranges]

Reads the public measurements in ../shared/calibration/ (or --rows DIR) plus benchmarks/rows/*.csv, predicts
each row with gpufly's advisor (catalog peaks, engines' calibrated constants), and prints per metric (decode,
multi-GPU decode, prefill, prefill on one GPU and several together, inference memory, training memory,
training throughput) and engine: n, the median and p90 of |error|, and the share of rows inside the
prediction's 80% range, on the fit set and on the check set separately. SPLIT_RULE puts each row on one side,
a whole GPU of a source at a time. The 80% ranges (estimate/ranges.py) come from the fit set's residuals only;
--write-ranges stores them in src/gpufly/estimate/data/ranges.json, which `gpufly fit` reads. Nothing is tuned
on the check set. "decode, naive" is the common shortcut (bandwidth / weight bytes), printed for comparison.
A row that cannot be read (a value such as "~500" is read as 500; "n/a" or "OOM" is not a number) is
skipped and counted, with why, never a crash.
"fit verdict" checks `gpufly fit`'s verdict on every measured run (each one ran, so it must fit) and on
the published out-of-memory cells (each must be "does not fit" or a fit within the estimate's error).
Rows whose GPU or model gpufly does not know are counted as skipped, never guessed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpufly.catalog import default_catalog
from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.advise import fit
from gpufly.estimate.engines import GIB
from gpufly.estimate.formats import weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import inference_memory, training_memory, weight_bytes
from gpufly.estimate.ranges import (
    COVERAGE,
    RANGES_FILE,
    Band,
    Estimate,
    RangeTable,
    Residual,
    Where,
    bands_from,
    estimate,
    regime,
    where,
    widening_key,
)
from gpufly.estimate.speed import ATTENTION_KERNEL, decode_step_s, prefill_s, training_speed
from gpufly.jsonfile import write_json_atomic
from gpufly.models.resolve import load_model
from gpufly.models.spec import ModelSpec

HERE = Path(__file__).parent
NAIVE = ", naive"
DEFAULT_ROWS = HERE.parent.parent / "shared" / "calibration"

GPU_NAMES = {
    "A100 80GB": "a100-sxm4-80gb", "A100 SXM 80GB": "a100-sxm4-80gb", "A100 PCIe 80GB": "a100-pcie-80gb",
    "H100 PCIe 80GB": "h100-pcie", "RTX 4090 24GB": "rtx-4090", "RTX 3090 24GB": "rtx-3090",
    "L40S 48GB": "l40s", "RTX 6000 Ada 48GB": "rtx-6000-ada", "RTX A6000 48GB": "rtx-a6000", "A40 48GB": "a40",
    "RTX 3080 Ti 12GB": "rtx-3080-ti", "RTX 4080 16GB": "rtx-4080", "RTX 3080 10GB": "rtx-3080-10gb",
    "Apple M3 Max 40-Core GPU 64GB": "m3-max", "Apple M2 Ultra 76-Core GPU 192GB": "m2-ultra",
    "H100 80GB SXM5": "h100-sxm", "H100 80GB PCIe Gen5": "h100-pcie", "RTX 6000 Ada": "rtx-6000-ada",
    "RTX A6000": "rtx-a6000", "V100 16GB": "v100-sxm2-16gb", "A100 80GB SXM4": "a100-sxm4-80gb",
    "RTX 4090": "rtx-4090", "RTX 3090": "rtx-3090", "A100 40GB PCIe": "a100-pcie-40gb", "A10": "a10",
    "A100 80GB PCIe": "a100-pcie-80gb", "A100 80GB x1": "a100-sxm4-80gb", "A100 80GB x2": "a100-sxm4-80gb",
    "Quadro RTX 8000": "", "RTX 4000 Ada 20GB": "rtx-4000-ada", "RTX 5000 Ada 32GB": "rtx-5000-ada",
    "Apple M1 Max 32-Core GPU 64GB": "m1-max", "A100 40GB SXM4": "a100-sxm4-40gb",
}
MODEL_NAMES = {
    "Meta-Llama-3-8B": "llama-3.1-8b", "Meta-Llama-3-70B": "llama-3.1-70b",
    "Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b", "Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
    "Qwen2.5-3B-Instruct": "qwen2.5-3b", "Qwen2.5-7B-Instruct": "qwen2.5-7b", "Qwen2.5-14B-Instruct": "qwen2.5-14b",
    "Qwen2.5-32B-Instruct": "qwen2.5-32b", "Qwen2.5-72B-Instruct": "qwen2.5-72b",
    "llama 7B": str(HERE / "rows" / "models" / "codellama-7b.json"),
}
"""Model names as the tables print them -> a preset, or a config.json under benchmarks/rows/models/ (each with
its source in `_source`) for a model gpufly has no preset for."""
QUANTS = {"Q4_K_M": "q4_k_m", "F16": "f16", "BF16": "bf16", "GPTQ-Int8": "int8", "GPTQ-Int4": "gptq-int4",
          "AWQ": "awq", "amp fp16": "bf16", "fp32": "fp32", "Q8_0": "q8_0", "Q4_0": "q4_0"}
ENGINES = {"llama.cpp": "llama.cpp", "vLLM 0.6.3": "vllm", "HF transformers": "transformers"}
XIONGJIEDAI = ("https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference/blob/"
               "aa72e0ec86c356c41f8281c9733e9a13c3675800/README.md")
MEMORY_OBSERVATIONS = [
    *(("ran", "RTX 4080 16GB", 1, "llama.cpp", "Meta-Llama-3-8B", "F16", n, XIONGJIEDAI) for n in (512, 1024, 4096)),
    ("out of memory", "RTX 4080 16GB", 1, "llama.cpp", "Meta-Llama-3-8B", "F16", 8192, XIONGJIEDAI),
]
"""Published runs whose speeds llm_inference.csv lacks, with whether they ran or failed for memory: (observed, gpu,
count, engine, model, quant, context, source). The LLaMA 3 NVIDIA table lists 8B F16 on the RTX 4080 16GB at tg/pp
512, 1024 and 4096 (40.6, 40.3, 39.4 tok/s) and marks tg8192 and pp8192 OOM."""


class Lookup:
    """GPUs and models by the names the measurement tables use; None where gpufly lacks one."""

    def __init__(self) -> None:
        self.catalog = {spec.id: spec for spec in default_catalog()}
        self.models: dict[str, ModelSpec | None] = {}

    def gpu(self, name: str) -> GpuSpec | None:
        return self.catalog.get(GPU_NAMES.get(name.strip(), ""))

    def model(self, name: str) -> ModelSpec | None:
        preset = MODEL_NAMES.get(name.strip())
        return None if preset is None else self.preset(preset)

    def preset(self, preset: str) -> ModelSpec | None:
        if preset not in self.models:
            try:
                self.models[preset] = load_model(preset)
            except GpuflyError:
                self.models[preset] = None
        return self.models[preset]



SPLIT_RULE = ("check set: rows whose sha256(source_url|gpu|model) is 0 mod 3; fit set: the rest. A model on a GPU "
              "in one source lands whole on one side, so every source has rows on both sides. The memory constants and "
              "vLLM's bandwidth and prefill efficiencies in estimate/engines.py were fitted before this split on the "
              "whole ../shared/calibration sample (on its check rows they are in-sample); training's matmul share, "
              "GEMM tile overhead, Hopper's sustained share, TF32 share and CNN traffic (estimate/speed.py), "
              "llama.cpp's decode and prefill constants, vLLM's quantized-weight bandwidth and "
              "transformers' KV traffic were fitted on the fit set only")


def _hash(row: dict[str, str]) -> int:
    key = "|".join(row.get(field, "").strip() for field in ("source_url", "gpu", "model"))
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)


def side(row: dict[str, str]) -> str:
    return "check" if _hash(row) % 3 == 0 else "fit"


FOLDS = 5
"""Cross-validation folds over the fit set's (source, GPU, model) groups, to find how much the bands must widen."""


_NUMBER = re.compile(r"^[~≈<>]?\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*(?:±.*|\+-.*)?$")


def number(text: str | None) -> float | None:
    """A published figure as a float: '~500' and '1,234.5' and '74.77 ± 0.10' read as numbers; '' is None.
    Anything else raises ValueError, which the caller counts as a skipped row."""
    text = (text or "").strip()
    if not text:
        return None
    match = _NUMBER.match(text)
    if match is None:
        raise ValueError(f"not a number: {text!r}")
    return float(match.group(1).replace(",", ""))


def count(text: str | None, default: int) -> int:
    value = number(text)
    return default if value is None else int(value)


@dataclass
class Comparison:
    metric: str
    engine: str
    gpus: int
    predicted: float
    measured: float
    row: str
    side: str
    where: Where | None = None
    fold: int = 0
    range: Estimate | None = None

    @property
    def error(self) -> float:
        return abs(self.predicted - self.measured) / self.measured

    @property
    def label(self) -> str:
        """The accuracy table's metric: decode and prefill on several GPUs, and training across nodes, are lines of
        their own."""
        if self.where is not None and self.where.nodes > 1:
            return f"multi-node {self.metric}"
        return f"multi-GPU {self.metric}" if self.metric in ("decode", "prefill") and self.gpus > 1 else self.metric

    @property
    def residual(self) -> Residual | None:
        w = self.where
        if w is None:
            return None
        return Residual(w.metric, w.engine, regime(w.gpus), w.family, w.format, w.params_b,
                        math.log(self.measured / self.predicted), w.nodes)


class Skipped(dict[str, int]):
    def add(self, why: str) -> None:
        self[why] = self.get(why, 0) + 1


def _rows(folder: Path, name: str) -> Iterator[dict[str, str]]:
    for path in [folder / name, *sorted((HERE / "rows").glob(f"*{name}"))]:
        if path.exists():
            with path.open(newline="") as handle:
                yield from csv.DictReader(handle)


def _inference_job(row: dict[str, str], gpus: int) -> Job:
    """The row's job as it ran. llama-bench ran without flash attention (-fa 0, its default in every build the rows
    name; PR 6017 predates llama.cpp's flash attention) unless the row's notes say -fa 1."""
    context = count(row["prompt_tokens"], 0) + count(row["gen_tokens"], 0)
    engine_name = ENGINES[row["engine"]]
    flash = engine_name != "llama.cpp" or "-fa 1" in row["notes"]
    return Job(quant=QUANTS[row["quant"]], engine=engine_name, batch=count(row["batch"], 1), gpus=gpus,
               context=max(1, context), flash_attention=flash)


DROPPED_PREFILL = (
    (XIONGJIEDAI, "A100 SXM 80GB", 0, "F16",
     "A100 SXM F16 prompt speeds unlike the same table's: 627-1323 t/s where its A100 PCIe F16 rows (same GA100 "
     "chip) give 7504-7741 and its own A100 SXM Q4_K_M rows 4851-11536, and rising with prompt length (pp4096 866, "
     "pp8192 1323) where every other card falls; decode on the same rows is normal, so the prompt did not run the "
     "F16 tensor-core path the other rows ran"),
    (XIONGJIEDAI, "L40S 48GB", 1, "F16",
     "L40S single-GPU F16 prompt speeds unlike the same table's: 2254-2888 t/s, below its own Q4_K_M row (5909) "
     "where every other card's F16 prefill beats its Q4_K_M, a third of the RTX 6000 Ada's (same AD102 chip, 6663), "
     "and rising with prompt length (pp512 2254, pp4096 2888) where every other card falls"),
)
"""Published prefill figures left out, with why: (source, GPU, GPU count or 0 for any, format, reason). Each
contradicts the rest of its own table; their decode figures are kept. Dropped on that evidence before any constant
was fitted."""


def _dropped_prefill(row: dict[str, str]) -> str | None:
    for source, gpu, gpus, quant, why in DROPPED_PREFILL:
        if (row["source_url"].strip() == source and row["gpu"].strip() == gpu and row["quant"].strip() == quant
                and gpus in (0, count(row["gpu_count"], 1))):
            return why
    return None


def _mean_decode_position(prompt: int, generated: int, whole_request: bool) -> int:
    """The KV position at the middle of the generation, the step whose time is the mean (decode
    time grows linearly with position). llama-bench's tgN test generates N tokens from an empty
    context, apart from its ppN test; a whole request (Qwen's speed benchmark) decodes after its prompt."""
    return (prompt if whole_request else 0) + generated // 2


def _inference_row(row: dict[str, str], lookup: Lookup, skipped: Skipped) -> Iterator[Comparison]:
    gpu, model = lookup.gpu(row["gpu"]), lookup.model(row["model"])
    if gpu is None or model is None or row["quant"] not in QUANTS or row["engine"] not in ENGINES:
        skipped.add(f"unknown to gpufly: {row['gpu']} / {row['model']} / {row['quant']} / {row['engine']}")
        return
    gpus = count(row["gpu_count"], 1)
    job = _inference_job(row, gpus)
    prompt, generated = count(row["prompt_tokens"], 0), count(row["gen_tokens"], 0)
    label = f"{row['gpu']} x{gpus} {row['engine']} {row['model']} {row['quant']} pp{prompt} tg{generated}"
    split = side(row)
    whole_request = "includes prefill" in row["notes"]
    decode, prefill = number(row["decode_tok_s"]), number(row["prefill_tok_s"])
    if decode:
        step = decode_step_s(model, gpu, job, _mean_decode_position(prompt, generated, whole_request))
        if whole_request:
            seconds = prefill_s(model, gpu, job, prompt) if prompt > 1 else 0.0
            if seconds is None:
                skipped.add(f"no tensor rate for {gpu.name}")
                return
            predicted = generated * job.batch / (seconds + generated * step)
        else:
            predicted = job.batch / step
        yield Comparison("decode", job.engine, gpus, predicted, decode, label, split,
                         where("decode", model, gpu, job))
        naive = gpu.memory_bandwidth_gbps * 1e9 / weight_bytes(model, weight_format(job.quant))
        yield Comparison(f"decode{NAIVE}", job.engine, gpus, naive, decode, label, split)
    dropped = _dropped_prefill(row) if prefill else None
    if dropped:
        skipped.add(f"prefill dropped: {dropped[:60]}...")
    elif prefill:
        seconds = prefill_s(model, gpu, job, prompt)
        if seconds is None:
            skipped.add(f"no tensor rate for {gpu.name}")
        else:
            yield Comparison("prefill", job.engine, gpus, prompt * job.batch / seconds, prefill, label, split,
                             where("prefill", model, gpu, job))


CHECKPOINT_MODELS = {("Qwen2.5-1.5B-Instruct", "AWQ"): str(HERE / "rows" / "models" / "qwen2.5-1.5b-instruct-awq.json")}
"""(model, precision) -> the checkpoint's own config where it differs from the model's: Qwen's AWQ checkpoint of the
tied-embedding 1.5B stores its LM head apart, as a Qwen maintainer says (the config's _source). The 3B AWQ checkpoint
may too (its row sits 20% under, as the 1.5B's did), but no source says so, and guessing it from that check row
would fit on the check set: it is read as the model's own, tied config."""


def _vram_row(row: dict[str, str], lookup: Lookup, skipped: Skipped) -> Iterator[Comparison]:
    """Rows measured with torch.cuda.max_memory_allocated: compare without context and allocator. seq_len is
    "prompt+generated": the prefill runs the prompt, the KV cache holds both."""
    checkpoint = CHECKPOINT_MODELS.get((row["model"].strip(), row["precision"].strip()))
    model = lookup.preset(checkpoint) if checkpoint else lookup.model(row["model"])
    tokens = [int(t) for t in re.findall(r"\d+", row["seq_len"])]
    if model is None or row["precision"] not in QUANTS or not tokens:
        skipped.add(f"VRAM row unknown to gpufly: {row['model']} / {row['precision']}")
        return
    found = re.search(r"x(\d+)", row["gpu"])
    gpus = int(found.group(1)) if found else 1
    training = not row["task"].startswith("inference")
    job = Job(quant=QUANTS[row["precision"]], context=sum(tokens), batch=count(row["batch"], 1), gpus=gpus,
              prompt=tokens[0] if len(tokens) > 1 else 0)
    if training:
        skipped.add("training-memory row (no parser for its recipe yet)")
        return
    breakdown = inference_memory(model, job)
    predicted = breakdown.without("runtime", "allocator") * gpus / GIB
    gpu = lookup.gpu(row["gpu"])
    measured = number(row["measured_vram_gb"])
    if gpu is None or measured is None:
        skipped.add(f"VRAM row without a known GPU or value: {row['gpu']}")
        return
    yield Comparison("inference memory", "transformers", gpus, predicted, measured,
                     f"{row['model']} {row['precision']} {row['seq_len']} on {row['gpu']}",
                     side(row), where("inference memory", model, gpu, job))


NODE_GPUS = 8
"""A training row on more than 8 GPUs ran on nodes of 8 (llm-foundry's MosaicML clusters: 8-GPU A100/H100 nodes),
with the catalog's default network between them (estimate/comms.py: InfiniBand HDR for A100, NDR for H100, a NIC
per GPU); the FSDP rows are ZeRO-3 (Composer's default sharding, FULL_SHARD)."""
TRAINING_PRESETS = {"resnet50": "resnet-50", "bert-base-uncased": "bert-base-uncased",
                    "bert-large-uncased": "bert-large-uncased",
                    **{f"mpt-{size}": str(HERE / "rows" / "models" / f"mpt-{size}.json")
                       for size in ("125m", "350m", "760m", "1b", "3b", "7b", "13b", "30b", "70b")}}
"""Training tables' model names -> a preset, or a config.json under benchmarks/rows/models/."""
EAGER_ATTENTION = ("bert-base-uncased", "bert-large-uncased")
"""Training rows whose attention materializes its scores: the BERT SQuAD fine-tuning script computes attention as
matmul, softmax and dropout in PyTorch (no flash attention in the NGC 22.09 container's BERT), while llm-foundry's
MPT runs flash attention: its throughput script's Triton kernel (submit_benchmarks.py, --attn_impl triton by
default). A row whose batch is the "total across GPUs" is split evenly into per-GPU micro-batches."""


def _training_row(row: dict[str, str], lookup: Lookup, skipped: Skipped) -> Iterator[Comparison]:
    gpu = lookup.gpu(row["gpu"])
    name = row["model"].split()[0]
    preset = TRAINING_PRESETS.get(name)
    if gpu is None or preset is None:
        skipped.add(f"training row unknown to gpufly: {row['gpu']} / {name}")
        return
    model = lookup.preset(preset)
    if model is None:
        skipped.add(f"training {name} (needs torch)")
        return
    seq = re.search(r"seq (\d+)", row["seq_len_or_image_size"])
    gpus = count(row["gpu_count"], 1)
    per_node, nodes = (NODE_GPUS, gpus // NODE_GPUS) if gpus > NODE_GPUS and gpus % NODE_GPUS == 0 else (gpus, 1)
    batch = count(row["batch_size"], 1)
    if "total across GPUs" in row["notes"]:
        batch = max(1, batch // gpus)
    job = Job(task="full", mixed_precision=row["precision"] != "fp32", batch=batch,
              context=int(seq.group(1)) if seq else 1, gpus=per_node, nodes=nodes,
              zero=3 if "FSDP" in row["framework"] else 0,
              checkpointing="activation checkpointing: True" in row["notes"],
              flash_attention=name not in EAGER_ATTENTION)
    predicted = training_speed(model, gpu, job, "triton" if name.startswith("mpt-") else ATTENTION_KERNEL)
    value = predicted.train_tokens_s if row["unit"] == "tokens/s" else predicted.train_samples_s
    measured = number(row["throughput"])
    if value is None or measured is None:
        skipped.add(f"training {row['gpu']} (no tensor rate or no value)")
        return
    yield Comparison("training throughput", "training", gpus, value, measured,
                     f"{row['gpu']} x{gpus} {name} {row['precision']}", side(row),
                     where("training throughput", model, gpu, job))


TRAINING_MEMORY_MODELS = {"Llama-3.1-8B-Instruct": "llama-3.1-8b", "Llama-3.3-70B-Instruct": "llama-3.1-70b",
                          "Meta-Llama-3-8B": "llama-3.1-8b", "gemma-2-9b": "gemma-2-9b",
                          "Llama-2-7b-hf": str(HERE / "rows" / "models" / "codellama-7b.json"),
                          **{name: str(HERE / "rows" / "models" / f"{config}.json") for name, config in (
                              ("Llama-2-70b-hf", "llama-2-70b"), ("Yi-34B", "yi-34b"),
                              ("Mistral-7B-v0.2", "mistral-7b-v0.2"), ("Llama-2-13b-hf", "llama-2-13b"),
                              ("phi-1.5", "phi-1.5"), ("stablelm-base-alpha-3b", "stablelm-base-alpha-3b"),
                              ("TinyLlama-1.1B", "tinyllama-1.1b"))}}
"""Training-memory tables' model names -> a preset or config (Llama 3.3 70B has Llama 3.1 70B's architecture, Llama 3
8B Llama 3.1 8B's shapes; CodeLlama 7B has Llama 2 7B's shapes, vocabulary 32016 for 32000)."""
TRAINING_MEMORY_KINDS = {"peak reserved": ("runtime", "nccl"), "peak allocated": ("runtime", "nccl", "allocator"),
                         "max context": ()}
"""How a training_memory.csv row was measured, and which of gpufly's items the measurement leaves out: "peak
reserved" is torch.cuda.max_memory_reserved (no CUDA context, no NCCL buffers); "peak allocated" is
torch.cuda.max_memory_allocated (also without the caching allocator's rounding, fragmentation and cached free blocks,
which gpufly's allocator item stands for); "max context" is the longest
sequence that fit, whose measured value is the GPU's memory (peak just under capacity, an upper bound). An estimated
requirement is no measurement and is skipped."""


def _training_memory_row(row: dict[str, str], lookup: Lookup, skipped: Skipped) -> Iterator[Comparison]:
    """Published training peaks per GPU (LoRA, QLoRA, full): gpufly's per-GPU figure, less what the measurement
    leaves out (TRAINING_MEMORY_KINDS), against the measured value in GiB. FSDP full sharding is ZeRO-3; the recipe
    column is the precision recipe (mixed: fp32 master and adapters, PEFT's fp32 upcast for QLoRA; bf16: pure bf16);
    the loss column how the loss holds the logits (chunked: LitGPT's scripts)."""
    kind = row["measurement"].strip()
    if kind not in TRAINING_MEMORY_KINDS:
        skipped.add(f"training-memory row not a measurement: {row['measurement']}")
        return
    gpu = lookup.gpu(row["gpu"])
    preset = TRAINING_MEMORY_MODELS.get(row["model"].strip())
    model = None if preset is None else lookup.preset(preset)
    if gpu is None or model is None:
        skipped.add(f"training-memory row unknown to gpufly: {row['gpu']} / {row['model']}")
        return
    gpus = count(row["gpu_count"], 1)
    method = row["method"].strip()
    sharded = gpus > 1 and "full shard" in row["framework"]
    targets = row["lora_targets"].strip()
    job = Job(task=method, quant=QUANTS.get(row["precision"].strip(), row["precision"].strip()),
              mixed_precision=row["precision"].strip() != "fp32", master_weights=row.get("recipe") != "bf16",
              batch=count(row["batch"], 1),
              context=count(row["seq_len"], 1), gpus=gpus, zero=3 if sharded else 0,
              optimizer=row["optimizer"].strip() or "adamw", offload=row.get("offload") or "none",
              loss=(row.get("loss") or "full").strip(),
              checkpointing=row["gradient_checkpointing"].strip() == "True", lora_rank=count(row["lora_rank"], 16),
              **({} if targets in ("", "all-linear") else {"lora_targets": tuple(targets.split(";"))}))
    measured = number(row["measured_gb"])
    if measured is None:
        skipped.add("training-memory row without a value")
        return
    predicted = training_memory(model, job).without(*TRAINING_MEMORY_KINDS[kind]) / GIB
    yield Comparison("training memory", "training", gpus, predicted, measured,
                     f"{row['gpu']} x{gpus} {row['model']} {method} bs{job.batch} seq{job.context} "
                     f"({kind})", side(row), where("training memory", model, gpu, job))


READERS = (("llm_inference.csv", _inference_row), ("vram_measured.csv", _vram_row),
           ("training_throughput.csv", _training_row), ("training_memory.csv", _training_memory_row))


def comparisons(folder: Path, lookup: Lookup, skipped: Skipped) -> list[Comparison]:
    """Every row's predictions; a row that cannot be read is skipped and counted with why, never a crash."""
    found: list[Comparison] = []
    for name, reader in READERS:
        for row in _rows(folder, name):
            try:
                made = list(reader(row, lookup, skipped))
                for c in made:
                    c.fold = _hash(row) // 3 % FOLDS
                found += made
            except (GpuflyError, ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
                skipped.add(f"{name}: {type(exc).__name__}: {str(exc)[:60]}")
    return found


WIDENINGS = tuple(1 + step / 20 for step in range(41))
"""The widening factors tried, 1.0 to 3.0."""


def cross_validated_widening(fit_rows: list[Comparison], rule: str) -> tuple[tuple[str, float], ...]:
    """Per metric and regime, the smallest widening at which bands computed without a fold hold COVERAGE of that
    fold's rows, over all folds of the fit set: the check set plays no part."""
    ranged = [c for c in fit_rows if c.where is not None]
    held_out: list[tuple[Comparison, tuple[Band, ...]]] = []
    for fold in range(FOLDS):
        rest = [r for c in ranged if c.fold != fold and (r := c.residual) is not None]
        bands = tuple(bands_from(rest))
        held_out += [(c, bands) for c in ranged if c.fold == fold]
    found = []
    for key in sorted({widening_key(c.where) for c, _ in held_out if c.where}):
        rows = [(c, bands) for c, bands in held_out if c.where and widening_key(c.where) == key]
        chosen = WIDENINGS[-1]
        for widening in WIDENINGS:
            table_for = {id(bands): RangeTable(bands, rule, ((key, widening),)) for _, bands in rows}
            inside = sum(estimate(c.predicted, c.where, table_for[id(bands)]).contains(c.measured)
                         for c, bands in rows if c.where)
            if inside / len(rows) >= COVERAGE:
                chosen = widening
                break
        found.append((key, chosen))
    return tuple(found)


def with_ranges(found: list[Comparison], table: RangeTable) -> None:
    for c in found:
        if c.where is not None:
            c.range = estimate(c.predicted, c.where, table)


@dataclass
class Verdict:
    observed: str
    predicted: str
    row: str


def _predicted(model: ModelSpec, gpu: GpuSpec, job: Job) -> str:
    verdict = fit(model, gpu, job)
    return "fits, within the error" if verdict.tight else "fits" if verdict.fits else "does not fit"


def verdict_checks(folder: Path, lookup: Lookup) -> Iterator[Verdict]:
    """gpufly's verdict on every measured run (it ran) and MEMORY_OBSERVATIONS. llama-bench runs its
    ppN and tgN tests apart, each at a context of N; a whole request (Qwen's benchmark) holds prompt plus output."""
    for row in _rows(folder, "llm_inference.csv"):
        gpu, model = lookup.gpu(row["gpu"]), lookup.model(row["model"])
        if gpu is None or model is None or row["quant"] not in QUANTS or row["engine"] not in ENGINES:
            continue
        try:
            prompt, generated = count(row["prompt_tokens"], 0), count(row["gen_tokens"], 0)
            job = _inference_job(row, count(row["gpu_count"], 1))
            if "includes prefill" not in row["notes"]:
                job = job.with_(context=max(1, prompt, generated))
            predicted = _predicted(model, gpu, job)
        except (GpuflyError, ValueError):
            continue
        yield Verdict("ran", predicted,
                      f"{row['gpu']} x{job.gpus} {row['engine']} {row['model']} {row['quant']} ctx {job.context}")
    for observed, gpu_name, gpus, engine, model_name, quant, context, _ in MEMORY_OBSERVATIONS:
        gpu, model = lookup.gpu(gpu_name), lookup.model(model_name)
        if gpu is None or model is None:
            continue
        job = Job(quant=QUANTS[quant], engine=ENGINES[engine], context=context, gpus=gpus)
        yield Verdict(observed, _predicted(model, gpu, job),
                      f"{gpu_name} x{gpus} {engine} {model_name} {quant} ctx {context}")


def _print_verdicts(verdicts: list[Verdict], detail: bool) -> None:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for v in verdicts:
        counts[(v.observed, v.predicted)] += 1
    print(f"{'fit verdict':<20} {'observed':<16} {'gpufly says':<24} {'rows':>5}")
    for (observed, predicted), count in sorted(counts.items()):
        print(f"{'fit verdict':<20} {observed:<16} {predicted:<24} {count:>5}")
    wrong = [v for v in verdicts if (v.observed == "ran" and v.predicted == "does not fit")
             or (v.observed != "ran" and v.predicted == "fits")]
    if detail:
        for v in wrong:
            print(f"  {v.observed}, gpufly says {v.predicted}: {v.row}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


PROMPT_PROCESSING = "prefill, 1 GPU and several"
"""Prefill on one GPU and on several in one line: issue 17's "prompt processing" target is one figure over both."""
TABLE_ORDER = ("decode", "multi-GPU decode", "prefill", "multi-GPU prefill", PROMPT_PROCESSING, "inference memory",
               "training memory", "training throughput", "multi-node training throughput", f"decode{NAIVE}")


def accuracy_table(found: list[Comparison]) -> list[tuple[str, str, str, int, float, float, float | None]]:
    """(set, metric, engine, n, median |err|, p90 |err|, share inside the 80% range) per metric and engine, and
    per metric over all engines (prefill also over one GPU and several together); the naive decode shortcut has no
    range."""
    groups: dict[tuple[str, str, str], list[Comparison]] = defaultdict(list)
    for c in found:
        groups[(c.side, c.label, c.engine)].append(c)
        groups[(c.side, c.label, "all")].append(c)
        if c.label in ("prefill", "multi-GPU prefill"):
            groups[(c.side, PROMPT_PROCESSING, "all")].append(c)
    lines = []
    for (split, metric, engine_name), items in sorted(
            groups.items(), key=lambda kv: (kv[0][0] != "fit", TABLE_ORDER.index(kv[0][1]), kv[0][2] != "all",
                                            kv[0][2])):
        errors = [c.error for c in items]
        ranged = [c for c in items if c.range is not None]
        inside = sum(c.range.contains(c.measured) for c in ranged if c.range) / len(ranged) if ranged else None
        lines.append((split, metric, engine_name, len(items), statistics.median(errors), percentile(errors, 0.9),
                      inside))
    return lines


def print_table(found: list[Comparison]) -> None:
    print(f"{'set':<6} {'metric':<31} {'engine':<13} {'n':>4} {'median |err|':>13} {'p90 |err|':>10} "
          f"{'in 80% range':>13}")
    for split, metric, engine_name, n, median, p90, inside in accuracy_table(found):
        shown = "-" if inside is None else f"{inside:.0%}"
        print(f"{split:<6} {metric:<31} {engine_name:<13} {n:>4} {median:>13.1%} {p90:>10.1%} {shown:>13}")
    for split in ("fit", "check"):
        ranged = [c for c in found if c.side == split and c.range is not None]
        if ranged:
            inside = sum(c.range.contains(c.measured) for c in ranged if c.range) / len(ranged)
            print(f"{split} set: {inside:.1%} of {len(ranged)} rows inside their {COVERAGE:.0%} range")


def print_worst(found: list[Comparison], per_set: int) -> None:
    print(f"worst rows (largest |error|, {per_set} per set):")
    for split in ("fit", "check"):
        rows = sorted((c for c in found if c.side == split and c.range is not None), key=lambda c: -c.error)
        for c in rows[:per_set]:
            r = c.range
            assert r is not None
            print(f"  {split:<5} {c.label:<31} {c.error:>6.1%} predicted {c.predicted:>9.1f} "
                  f"({r.low:,.1f}-{r.high:,.1f}) measured {c.measured:>9.1f}  {c.row}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS)
    parser.add_argument("--detail", action="store_true", help="print every row's prediction")
    parser.add_argument("--write-ranges", action="store_true",
                        help=f"store the fit set's residual bands in {RANGES_FILE.relative_to(HERE.parent)}")
    args = parser.parse_args()
    lookup = Lookup()
    skipped = Skipped()
    found = comparisons(args.rows, lookup, skipped)
    fit_residuals = [r for c in found if c.side == "fit" and (r := c.residual) is not None]
    widening = cross_validated_widening([c for c in found if c.side == "fit"], SPLIT_RULE)
    table = RangeTable(tuple(bands_from(fit_residuals)), SPLIT_RULE, widening)
    print(f"# bands widened (log ratio) by the smallest factor at which {FOLDS}-fold cross-validation over the fit "
          f"set's GPUs holds {COVERAGE:.0%}: " + ", ".join(f"{metric} {factor:.2f}x" for metric, factor in widening))
    if args.write_ranges:
        write_json_atomic(RANGES_FILE, table.to_dict(), hint="check that src/gpufly/estimate/data is writable",
                          parents=True)
    with_ranges(found, table)
    if args.detail:
        for c in sorted(found, key=lambda c: (c.side, c.label, -c.error)):
            shown = f"({c.range.low:,.1f}-{c.range.high:,.1f})" if c.range else ""
            print(f"{c.side:<5} {c.label:<31} {c.error:>6.1%}  predicted {c.predicted:>9.1f} {shown:<22} "
                  f"measured {c.measured:>9.1f}  {c.row}")
        print()
    measured = [c for c in found if not c.metric.endswith(NAIVE)]
    print(f"# gpufly estimate accuracy against {len(measured)} published measurements ({args.rows} and "
          f"benchmarks/rows/): {sum(c.side == 'fit' for c in measured)} fit rows, "
          f"{sum(c.side == 'check' for c in measured)} check rows")
    print(f"# split: {SPLIT_RULE}")
    print_table(found)
    print_worst(found, 6)
    _print_verdicts(list(verdict_checks(args.rows, lookup)), args.detail)
    if skipped:
        print(f"skipped {sum(skipped.values())} rows: " + "; ".join(f"{k} ({v})" for k, v in sorted(skipped.items())))


if __name__ == "__main__":
    main()
