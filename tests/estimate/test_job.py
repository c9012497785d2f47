"""Job.from_options: the options of `gpufly fit`/`recommend` become one validated Job, outside the CLI."""

from __future__ import annotations

import dataclasses

import pytest

from gpufly.errors import GpuflyError
from gpufly.estimate.job import DEFAULT_LORA_TARGETS, Job
from gpufly.models.resolve import load_model


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


def test_defaults_are_bf16_inference_on_transformers(llama) -> None:
    job = Job.from_options(llama)
    assert (job.task, job.quant, job.engine, job.mixed_precision) == ("infer", "bf16", "transformers", True)


def test_a_gguf_format_defaults_to_llama_cpp_for_inference_only(llama) -> None:
    assert Job.from_options(llama, quant="q4_k_m").engine == "llama.cpp"
    assert Job.from_options(llama, quant="q4_k_m", engine="vllm").engine == "vllm"
    assert Job.from_options(llama, task="full", quant="q8_0").engine == "transformers"


def test_a_gguf_file_brings_its_own_format(llama) -> None:
    from_file = dataclasses.replace(llama, source="gguf:model.gguf", weight_format="Q4_K_M")
    job = Job.from_options(from_file)
    assert (job.quant, job.engine) == ("q4_k_m", "llama.cpp")
    assert Job.from_options(from_file, quant="bf16").quant == "bf16"


def test_fp32_turns_the_default_precision_and_mixed_precision_off(llama) -> None:
    job = Job.from_options(llama, task="full", fp32=True)
    assert (job.quant, job.mixed_precision) == ("fp32", False)
    assert Job.from_options(llama, task="full", quant="fp16", fp32=True).quant == "fp16"


@pytest.mark.parametrize(("strategy", "stage"), [("full_shard", 3), ("SHARD_GRAD_OP", 2), ("no_shard", 0)])
def test_an_fsdp_strategy_is_the_zero_stage_it_equals(llama, strategy: str, stage: int) -> None:
    assert Job.from_options(llama, task="full", zero=1, fsdp=strategy).zero == stage


def test_lora_targets_are_checked_against_the_model(llama) -> None:
    assert Job.from_options(llama, task="lora").lora_targets == DEFAULT_LORA_TARGETS
    assert Job.from_options(llama, task="lora", lora_targets="q_proj, v_proj").lora_targets == ("q_proj", "v_proj")
    with pytest.raises(GpuflyError, match="names no module"):
        Job.from_options(llama, task="lora", lora_targets=" , ")


@pytest.mark.parametrize(("options", "message"), [
    ({"fsdp": "hybrid"}, "unknown FSDP strategy 'hybrid'"),
    ({"quant": "int3"}, "int3"),
    ({"kv_format": "fp7"}, "fp7"),
    ({"engine": "vlm"}, "did you mean vllm"),
    ({"batch": 0}, "--batch must be a positive whole number"),
])
def test_bad_options_are_one_error_each(llama, options: dict, message: str) -> None:
    with pytest.raises(GpuflyError, match=message):
        Job.from_options(llama, **options)


def test_to_dict_is_the_json_the_cli_prints(llama) -> None:
    data = Job.from_options(llama, context=8192).to_dict()
    assert data["context"] == 8192 and data["lora_targets"] == DEFAULT_LORA_TARGETS
