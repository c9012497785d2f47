"""How far gpufly's estimates are from published measurements: prints median and p90 error.

    python benchmarks/estimate_accuracy.py [--rows DIR] [--detail]

Reads the public measurements in ../shared/calibration/ (or --rows DIR) plus benchmarks/rows/*.csv,
predicts each row with gpufly's advisor (catalog peaks, engines' calibrated constants), and prints
the absolute percentage error per metric: decode tok/s, prefill tok/s, training throughput, VRAM.
"decode tok/s, naive" is the common shortcut (bandwidth / weight bytes), printed for comparison.
"fit verdict" checks `gpufly fit`'s verdict on every measured run (each one ran, so it must fit) and on
the published out-of-memory cells (each must be "does not fit" or a fit within the estimate's error).
Rows whose GPU or model gpufly does not know are counted as skipped, never guessed.
"""

from __future__ import annotations

import argparse
import csv
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
from gpufly.estimate.memory import inference_memory, weight_bytes
from gpufly.estimate.speed import decode_step_s, prefill_s, training_speed
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
}
MODEL_NAMES = {
    "Meta-Llama-3-8B": "llama-3.1-8b", "Meta-Llama-3-70B": "llama-3.1-70b",
    "Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b", "Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
    "Qwen2.5-3B-Instruct": "qwen2.5-3b", "Qwen2.5-7B-Instruct": "qwen2.5-7b", "Qwen2.5-14B-Instruct": "qwen2.5-14b",
    "Qwen2.5-32B-Instruct": "qwen2.5-32b", "Qwen2.5-72B-Instruct": "qwen2.5-72b",
}
QUANTS = {"Q4_K_M": "q4_k_m", "F16": "f16", "BF16": "bf16", "GPTQ-Int8": "int8", "GPTQ-Int4": "int4",
          "AWQ": "int4", "amp fp16": "bf16", "fp32": "fp32"}
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


@dataclass
class Comparison:
    metric: str
    group: str
    predicted: float
    measured: float
    row: str

    @property
    def error(self) -> float:
        return abs(self.predicted - self.measured) / self.measured


class Lookup:
    """GPUs and models by the names the measurement tables use; None where gpufly lacks one."""

    def __init__(self) -> None:
        self.catalog = {spec.id: spec for spec in default_catalog()}
        self.models: dict[str, ModelSpec | None] = {}

    def gpu(self, name: str) -> GpuSpec | None:
        return self.catalog.get(GPU_NAMES.get(name, ""))

    def model(self, name: str) -> ModelSpec | None:
        preset = MODEL_NAMES.get(name)
        return None if preset is None else self.preset(preset)

    def preset(self, preset: str) -> ModelSpec | None:
        if preset not in self.models:
            try:
                self.models[preset] = load_model(preset)
            except GpuflyError:
                self.models[preset] = None
        return self.models[preset]


def _rows(folder: Path, name: str) -> Iterator[dict[str, str]]:
    for path in [folder / name, *sorted((HERE / "rows").glob(f"*{name}"))]:
        if path.exists():
            yield from csv.DictReader(path.open())


def _inference_job(row: dict[str, str], gpus: int) -> Job:
    return Job(quant=QUANTS[row["quant"]], engine=ENGINES[row["engine"]], batch=int(row["batch"]), gpus=gpus,
               context=max(1, int(row["prompt_tokens"] or 0) + int(row["gen_tokens"] or 0)))


def _mean_decode_position(prompt: int, generated: int, whole_request: bool) -> int:
    """The KV position at the middle of the generation, the step whose time is the mean (decode
    time grows linearly with position). llama-bench's tgN test generates N tokens from an empty
    context, apart from its ppN test; a whole request (Qwen's speed benchmark) decodes after its prompt."""
    return (prompt if whole_request else 0) + generated // 2


def inference_comparisons(folder: Path, lookup: Lookup, skipped: dict[str, int]) -> Iterator[Comparison]:
    for row in _rows(folder, "llm_inference.csv"):
        gpu, model = lookup.gpu(row["gpu"]), lookup.model(row["model"])
        if gpu is None or model is None or row["quant"] not in QUANTS or row["engine"] not in ENGINES:
            skipped[f"{row['gpu']} / {row['model']}"] += 1
            continue
        count = int(row["gpu_count"] or 1)
        job = _inference_job(row, count)
        prompt, generated = int(row["prompt_tokens"] or 0), int(row["gen_tokens"] or 0)
        single = "1 GPU" if count == 1 else f"{count} GPUs"
        label = f"{row['gpu']} x{count} {row['engine']} {row['model']} {row['quant']} pp{prompt} tg{generated}"
        whole_request = "includes prefill" in row["notes"]
        if row["decode_tok_s"]:
            step = decode_step_s(model, gpu, job, _mean_decode_position(prompt, generated, whole_request))
            if whole_request:
                prefill = prefill_s(model, gpu, job, prompt) if prompt > 1 else 0.0
                if prefill is None:
                    continue
                predicted = generated * job.batch / (prefill + generated * step)
            else:
                predicted = job.batch / step
            yield Comparison("decode tok/s", f"{job.engine}, {single}", predicted, float(row["decode_tok_s"]), label)
            naive = gpu.memory_bandwidth_gbps * 1e9 / weight_bytes(model, weight_format(job.quant))
            yield Comparison(f"decode tok/s{NAIVE}", f"{job.engine}, {single}", naive, float(row["decode_tok_s"]),
                             label)
        if row["prefill_tok_s"]:
            seconds = prefill_s(model, gpu, job, prompt)
            if seconds is not None:
                yield Comparison("prefill tok/s", f"{job.engine}, {single}", prompt * job.batch / seconds,
                                 float(row["prefill_tok_s"]), label)


def vram_comparisons(folder: Path, lookup: Lookup, skipped: dict[str, int]) -> Iterator[Comparison]:
    """Rows measured with torch.cuda.max_memory_allocated: compare without context and allocator."""
    for row in _rows(folder, "vram_measured.csv"):
        model = lookup.model(row["model"])
        tokens = [int(t) for t in re.findall(r"\d+", row["seq_len"])]
        if model is None or row["precision"] not in QUANTS or not tokens:
            skipped[f"VRAM {row['model']}"] += 1
            continue
        gpus = int(re.search(r"x(\d+)", row["gpu"]).group(1)) if "x" in row["gpu"] else 1
        job = Job(quant=QUANTS[row["precision"]], context=sum(tokens), batch=int(row["batch"]), gpus=gpus)
        breakdown = inference_memory(model, job)
        predicted = breakdown.without("runtime", "allocator") * gpus / GIB
        yield Comparison("VRAM GiB", "transformers (allocated)", predicted, float(row["measured_vram_gb"]),
                         f"{row['model']} {row['precision']} {row['seq_len']} on {row['gpu']}")


def training_comparisons(folder: Path, lookup: Lookup, skipped: dict[str, int]) -> Iterator[Comparison]:
    for row in _rows(folder, "training_throughput.csv"):
        gpu = lookup.gpu(row["gpu"])
        name = row["model"].split()[0]
        preset = {"resnet50": "resnet-50", "bert-base-uncased": "bert-base-uncased",
                  "bert-large-uncased": "bert-large-uncased"}.get(name)
        if gpu is None or preset is None:
            skipped[f"training {row['gpu']} / {name}"] += 1
            continue
        model = lookup.preset(preset)
        if model is None:
            skipped[f"training {name} (needs torch)"] += 1
            continue
        seq = re.search(r"seq (\d+)", row["seq_len_or_image_size"])
        job = Job(task="full", mixed_precision=row["precision"] != "fp32", batch=int(row["batch_size"]),
                  context=int(seq.group(1)) if seq else 1, gpus=int(row["gpu_count"]))
        predicted = training_speed(model, gpu, job)
        value = predicted.train_samples_s
        if value is None:
            skipped[f"training {row['gpu']} (no tensor rate)"] += 1
            continue
        yield Comparison("training samples/s", f"{name} {row['precision']}", value, float(row["throughput"]),
                         f"{row['gpu']} x{row['gpu_count']} {name} {row['precision']}")


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
        prompt, generated = int(row["prompt_tokens"] or 0), int(row["gen_tokens"] or 0)
        whole_request = "includes prefill" in row["notes"]
        job = _inference_job(row, int(row["gpu_count"] or 1))
        if not whole_request:
            job = job.with_(context=max(1, prompt, generated))
        yield Verdict("ran", _predicted(model, gpu, job),
                      f"{row['gpu']} x{job.gpus} {row['engine']} {row['model']} {row['quant']} ctx {job.context}")
    for observed, gpu_name, count, engine, model_name, quant, context, _ in MEMORY_OBSERVATIONS:
        gpu, model = lookup.gpu(gpu_name), lookup.model(model_name)
        if gpu is None or model is None:
            continue
        job = Job(quant=QUANTS[quant], engine=ENGINES[engine], context=context, gpus=count)
        yield Verdict(observed, _predicted(model, gpu, job),
                      f"{gpu_name} x{count} {engine} {model_name} {quant} ctx {context}")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, default=DEFAULT_ROWS)
    parser.add_argument("--detail", action="store_true", help="print every row's prediction")
    args = parser.parse_args()
    lookup = Lookup()
    skipped: dict[str, int] = defaultdict(int)
    comparisons = [*inference_comparisons(args.rows, lookup, skipped), *vram_comparisons(args.rows, lookup, skipped),
                   *training_comparisons(args.rows, lookup, skipped)]
    if args.detail:
        for c in sorted(comparisons, key=lambda c: (c.metric, -c.error)):
            print(f"{c.metric:<20} {c.error:>6.1%}  predicted {c.predicted:>9.1f} measured {c.measured:>9.1f}  {c.row}")
        print()
    groups: dict[tuple[str, str], list[Comparison]] = defaultdict(list)
    for c in comparisons:
        groups[(c.metric, c.group)].append(c)
        groups[(c.metric, "all")].append(c)
    measured = [c for c in comparisons if not c.metric.endswith(NAIVE)]
    print(f"# gpufly estimate accuracy against {len(measured)} published measurements ({args.rows}); "
          f"the naive predictor's {len(comparisons) - len(measured)} comparisons reuse the decode rows")
    print(f"{'metric':<20} {'group':<32} {'rows':>5} {'median err':>11} {'p90 err':>8} {'median bias':>12}")
    for (metric, group), items in sorted(groups.items()):
        errors = [c.error for c in items]
        bias = statistics.median((c.predicted - c.measured) / c.measured for c in items)
        print(f"{metric:<20} {group:<32} {len(items):>5} {statistics.median(errors):>11.1%} "
              f"{percentile(errors, 0.9):>8.1%} {bias:>+12.1%}")
    _print_verdicts(list(verdict_checks(args.rows, lookup)), args.detail)
    if skipped:
        print(f"skipped {sum(skipped.values())} rows: " + "; ".join(f"{k} ({v})" for k, v in sorted(skipped.items())))


if __name__ == "__main__":
    main()
