"""Job: what the user wants to do with a model, validated once, in one frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufly.errors import GpuflyError, unknown_choice

TASKS = ("infer", "lora", "qlora", "full")
OPTIMIZERS = ("adamw", "adamw8bit", "sgd", "sgd-momentum", "adafactor")
DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Job:
    """One way of running a model. Defaults describe a common case that runs.

    ``context`` is tokens per sequence (prompt plus generated tokens for inference, the training
    sequence length otherwise); ``gpus`` is the data/tensor-parallel degree.
    """

    task: str = "infer"
    quant: str = "bf16"
    context: int = 4096
    batch: int = 1
    kv_format: str = "fp16"
    engine: str = "transformers"
    optimizer: str = "adamw"
    mixed_precision: bool = True
    zero: int = 0
    gpus: int = 1
    checkpointing: bool = False
    flash_attention: bool = True
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    gpu_memory_utilization: float = 0.9

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            _bad("task", self.task, TASKS)
        if self.optimizer not in OPTIMIZERS:
            _bad("optimizer", self.optimizer, OPTIMIZERS)
        for name, flag in (("context", "--ctx"), ("batch", "--batch"), ("gpus", "--gpu COUNTx"),
                           ("lora_rank", "--lora-rank")):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise GpuflyError(f"{flag} must be a positive whole number, got {value}", hint=f"e.g. {flag} 8")
        if self.zero not in (0, 1, 2, 3):
            raise GpuflyError(f"--zero must be 0, 1, 2 or 3, got {self.zero}",
                              hint="ZeRO-1 shards optimizer states, 2 also gradients, 3 also weights")
        if not 0.05 <= self.gpu_memory_utilization <= 1.0:
            raise GpuflyError(f"--gpu-memory-utilization must be within 0.05..1, got {self.gpu_memory_utilization}",
                              hint="e.g. --gpu-memory-utilization 0.9 (vLLM's default)")

    @property
    def training(self) -> bool:
        return self.task != "infer"

    def with_(self, **changes: object) -> Job:
        return replace(self, **changes)


def _bad(kind: str, value: str, choices: tuple[str, ...]) -> None:
    raise unknown_choice(kind, value, choices, hint=f"{kind}s: {', '.join(choices)}", cutoff=0.4)
