"""The report's advisor section: which popular models fit this machine's GPUs, and how fast."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.advise import fit
from gpufly.estimate.job import Job

DEFAULT_MODELS = ("llama-3.2-3b", "llama-3.1-8b", "qwen2.5-14b", "qwen2.5-32b", "llama-3.1-70b")
DEFAULT_JOBS = (("bf16", "transformers"), ("q4_k_m", "llama.cpp"))
CONTEXT = 8192


@dataclass(frozen=True)
class ModelFitRow:
    """One model and job on one GPU type; ``decode_tok_s`` is None where the job does not fit (a speed there would
    be hypothetical, and a report row is read as what the machine does)."""

    model: str
    quant: str
    engine: str
    gpu: str
    gpus: int
    fits: bool
    needs_bytes: int
    decode_tok_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def model_fit_rows(gpus: list[tuple[GpuSpec, int]], models: tuple[str, ...] = DEFAULT_MODELS) -> list[ModelFitRow]:
    """For each GPU type on the machine (all of that type together), each model at bf16 and Q4_K_M."""
    from gpufly.models.resolve import load_model

    rows: list[ModelFitRow] = []
    for name in models:
        try:
            spec = load_model(name)
        except GpuflyError:
            continue
        for gpu, count in gpus:
            for quant, engine in DEFAULT_JOBS:
                verdict = fit(spec, gpu, Job(quant=quant, engine=engine, context=CONTEXT, gpus=count))
                rows.append(ModelFitRow(spec.name, quant, engine, gpu.name, count, verdict.fits,
                                        verdict.memory.total_bytes,
                                        verdict.speed.decode_tok_s if verdict.fits else None))
    return rows
