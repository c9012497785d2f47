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


def test_a_quantized_checkpoints_config_brings_its_format_for_inference(tmp_path) -> None:
    """An AWQ or GPTQ repository's config.json states its quantization: `fit` takes it when --quant is not given
    (a silent bf16 would count 3.7x the weights), and --quant still overrides it."""
    import json
    from pathlib import Path

    from gpufly.models.hf_config import load_config_file

    base = load_config_file(Path(__file__).parent.parent / "fixtures" / "configs" / "llama-3.1-8b")
    for method, bits, quant in (("awq", 4, "awq"), ("gptq", 4, "gptq-int4"), ("gptq", 8, "int8")):
        path = tmp_path / method / str(bits) / "config.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({**base, "quantization_config": {"quant_method": method, "bits": bits}}))
        spec = load_model(str(path))
        assert Job.from_options(spec).quant == quant
        assert Job.from_options(spec, quant="bf16").quant == "bf16"
        assert Job.from_options(spec, task="lora").quant == "bf16", "training keeps its own recipe"


@pytest.mark.parametrize(("stated", "said"), [
    ({"quant_method": "hqq", "nbits": 4}, "quant_method 'hqq', bits not stated"),
    ({"quant_method": "gptq", "bits": "four"}, "quant_method 'gptq', bits four"),
    ({"quant_method": "gptq", "bits": 3}, "quant_method 'gptq', bits 3"),
    ("gptq", "a str, not a table"),
])
def test_a_quantization_config_gpufly_cannot_read_asks_for_quant(tmp_path, stated, said) -> None:  # type: ignore[no-untyped-def]
    """Counted at 16 bits, an unread quantized checkpoint's weights would be 2-4x too large with nothing said:
    inference asks for --quant instead, and --quant (or a training task, which keeps its recipe) goes on."""
    import json
    from pathlib import Path

    from gpufly.models.hf_config import load_config_file

    base = load_config_file(Path(__file__).parent.parent / "fixtures" / "configs" / "llama-3.1-8b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "quantization_config": stated}))
    spec = load_model(str(path))
    with pytest.raises(GpuflyError, match="quantization gpufly cannot read") as raised:
        Job.from_options(spec)
    assert said in str(raised.value) and "--quant" in (raised.value.hint or "")
    assert Job.from_options(spec, quant="int4").quant == "int4"
    assert Job.from_options(spec, task="lora").quant == "bf16"


def test_fp32_turns_the_default_precision_and_mixed_precision_off(llama) -> None:
    job = Job.from_options(llama, task="full", fp32=True)
    assert (job.quant, job.mixed_precision) == ("fp32", False)
    assert Job.from_options(llama, task="full", quant="fp16", fp32=True).quant == "fp16"


@pytest.mark.parametrize(("strategy", "stage"), [("full_shard", 3), ("SHARD_GRAD_OP", 2), ("no_shard", 0)])
def test_an_fsdp_strategy_is_the_zero_stage_it_equals(llama, strategy: str, stage: int) -> None:
    assert Job.from_options(llama, task="full", fsdp=strategy).zero == stage
    assert Job.from_options(llama, task="full", zero=stage, fsdp=strategy).zero == stage


def test_an_fsdp_strategy_and_a_different_zero_stage_contradict_each_other(llama) -> None:
    with pytest.raises(GpuflyError, match="--fsdp full_shard is ZeRO-3 in memory, but --zero says 1"):
        Job.from_options(llama, task="full", zero=1, fsdp="full_shard")


def _notes(llama, **options) -> list[str]:  # type: ignore[no-untyped-def]
    said: list[str] = []
    Job.from_options(llama, note=said.append, **options)
    return said


@pytest.mark.parametrize(("options", "unused"), [
    ({"zero": 2}, ["--zero"]),
    ({"fsdp": "full_shard"}, ["--fsdp"]),
    ({"fsdp": "full_shard", "zero": 3}, ["--fsdp"]),
    ({"checkpointing": True}, ["--checkpointing"]),
    ({"lora_rank": 8, "lora_targets": "q_proj"}, ["--lora-rank", "--lora-targets"]),
    ({"task": "full", "lora_rank": 8}, ["--lora-rank"]),
    ({"task": "full", "lora_targets": "q_proj"}, ["--lora-targets"]),
    ({"fp32": True, "quant": "int4"}, ["--fp32"]),
])
def test_each_option_the_task_does_not_use_is_one_note(llama, options: dict, unused: list[str]) -> None:
    notes = _notes(llama, **options)
    assert [note.split(" ")[0] for note in notes] == [option.split(" ")[0] for option in unused]
    assert all(note.endswith("(ignored)") for note in notes)


@pytest.mark.parametrize("options", [
    {"task": "full", "zero": 2, "checkpointing": True, "gpus": 2},
    {"task": "lora", "lora_rank": 8, "lora_targets": "q_proj", "zero": 3, "gpus": 4},
    {"task": "qlora", "lora_rank": 8},
    {"fp32": True},
    {"task": "full", "fp32": True, "quant": "fp16"},
    {},
])
def test_options_the_task_uses_bring_no_note(llama, options: dict) -> None:
    assert _notes(llama, **options) == []


def test_a_refused_job_brings_no_notes(llama) -> None:
    said: list[str] = []
    with pytest.raises(GpuflyError, match="unknown task"):
        Job.from_options(llama, task="inference", lora_rank=8, note=said.append)
    assert said == []


def test_a_library_caller_gets_no_notes_and_the_default_rank(llama) -> None:
    assert Job.from_options(llama, task="lora").lora_rank == 16
    assert Job.from_options(llama, zero=2).zero == 2


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


@pytest.mark.parametrize(("options", "precision"), [
    ({}, "mixed"), ({"precision": "bf16"}, "bf16"), ({"precision": "FP32"}, "fp32"), ({"fp32": True}, "fp32"),
    ({"fp32": True, "precision": "fp32"}, "fp32"),
])
def test_precision_recipes_and_the_fp32_alias(llama, options: dict, precision: str) -> None:
    job = Job.from_options(llama, task="full", **options)
    assert job.precision == precision and job.to_dict()["precision"] == precision
    assert job.mixed_precision is (precision != "fp32")


@pytest.mark.parametrize(("options", "mode", "fraction"), [
    ({"task": "full"}, "none", 0.0), ({"task": "qlora"}, "full", 1.0),
    ({"task": "full", "checkpointing": True}, "full", 1.0),
    ({"task": "full", "checkpointing_mode": "selective"}, "selective", 0.5),
    ({"task": "lora", "checkpointing": True, "checkpointing_mode": "selective"}, "selective", 0.5),
    ({"task": "lora", "checkpointing_mode": "none"}, "none", 0.0),
])
def test_checkpointing_modes(llama, options: dict, mode: str, fraction: float) -> None:
    job = Job.from_options(llama, **options)
    assert (job.checkpointing_mode, job.recompute_forward_fraction) == (mode, fraction)
    assert job.checkpointing is (mode != "none")


def test_training_attention_offload_and_context_options(llama) -> None:
    job = Job.from_options(llama, task="full", attention="eager", offload="params", cuda_context_gib=1.25,
                           optimizer_in_backward=True)
    assert (job.attention, job.flash_attention, job.offload, job.cuda_context_bytes, job.optimizer_in_backward) == (
        "eager", False, "params", round(1.25 * 2**30), True)
    assert Job.from_options(llama, task="full", attention="sdpa").attention == "sdpa"
    assert Job.from_options(llama, task="full").attention == "flash"
    assert Job.from_options(llama, task="full", offload="none").offload == "none"
    assert Job.from_options(llama, task="lora", loss="Chunked").loss == "chunked"
    assert Job.from_options(llama, task="lora").loss == "full"


@pytest.mark.parametrize(("options", "message"), [
    ({"precision": "fp16"}, "unknown precision 'fp16'"),
    ({"precision": "bf16", "fp32": True}, "--fp32 and --precision bf16 contradict each other"),
    ({"checkpointing": False, "checkpointing_mode": "full"}, "--no-checkpointing and --checkpointing-mode full"),
    ({"checkpointing": True, "checkpointing_mode": "none"}, "--checkpointing and --checkpointing-mode none"),
    ({"checkpointing_mode": "some"}, "unknown checkpointing mode 'some'"),
    ({"attention": "xformers"}, "unknown attention 'xformers'"),
    ({"offload": "disk"}, "unknown offload 'disk'"),
    ({"cuda_context_gib": -0.5}, "--cuda-context must be within 0..64 GiB"),
    ({"cuda_context_gib": float("inf")}, "--cuda-context must be within 0..64 GiB"),
    ({"optimizer": "paged-adam"}, "unknown optimizer 'paged-adam'"),
    ({"loss": "liger"}, "unknown loss 'liger'"),
])
def test_bad_training_options_are_one_error_with_a_hint(llama, options: dict, message: str) -> None:
    with pytest.raises(GpuflyError, match=message) as raised:
        Job.from_options(llama, task="full", **options)
    assert raised.value.hint


def test_training_options_given_to_inference_are_notes(llama) -> None:
    notes = _notes(llama, precision="bf16", checkpointing_mode="full", optimizer_in_backward=True,
                   offload="optimizer", cuda_context_gib=1.0, loss="fused")
    assert [note.split(" ")[0] for note in notes] == ["--precision", "--checkpointing-mode",
                                                      "--optimizer-in-backward", "--offload", "--cuda-context",
                                                      "--loss"]
    assert Job.from_options(llama, loss="fused").loss == "full", "inference has no loss"
    assert all(note.endswith("(ignored)") for note in notes)


def test_inference_options_given_to_training_are_notes_and_change_nothing(llama) -> None:
    plain = Job.from_options(llama, task="lora")
    assert Job.from_options(llama, task="lora", engine="ollama", note=lambda _: None) == plain
    assert _notes(llama, task="lora", engine="vllm") == [
        "--engine vllm serves inference; training is modelled as PyTorch runs it (ignored)"]
    assert _notes(llama, task="full", quant="int4")[0].startswith("--quant int4 sets inference weights")
    assert _notes(llama, task="qlora", quant="fp8") == ["--quant fp8: QLoRA's frozen base is NF4 (ignored)"]
    with pytest.raises(GpuflyError, match="unknown engine 'olama'"):
        Job.from_options(llama, task="full", engine="olama")


def test_zero_with_one_data_parallel_rank_is_said_to_shard_nothing(llama) -> None:
    assert _notes(llama, task="full", zero=3)[0].startswith("--zero 3 shards training state across data-parallel")
    assert _notes(llama, task="full", fsdp="full_shard", gpus=8, tensor_parallel=8)[0].startswith("--zero 3 shards")
    assert _notes(llama, task="full", zero=3, gpus=8) == []


def test_precision_given_to_inference_is_ignored_as_said(llama) -> None:
    assert Job.from_options(llama, precision="fp32", note=lambda _: None).quant == "bf16"
    assert Job.from_options(llama, fp32=True).quant == "fp32", "--fp32 does set inference weights"


def test_attention_applies_to_inference_too(llama) -> None:
    assert _notes(llama, attention="eager") == []
    assert Job.from_options(llama, attention="eager").attention == "eager"
    assert Job.from_options(llama, attention="sdpa").attention == "sdpa"
    assert Job.from_options(llama).attention == "flash"
    assert Job.from_options(llama, engine="ollama").attention == "eager"


def test_a_prompt_is_part_of_the_context_and_a_shorter_context_shortens_it() -> None:
    spec = load_model("qwen2.5-7b")
    job = Job.from_options(spec, context=8192, prompt=2048)
    assert job.prompt == 2048
    assert job.with_(context=1024).prompt == 1024, "--max-ctx tries shorter contexts"
    assert job.with_(context=4096).prompt == 2048
    for bad in (0, -5):
        with pytest.raises(GpuflyError, match="--prompt must be a positive"):
            Job.from_options(spec, context=8192, prompt=bad)
    with pytest.raises(GpuflyError, match="longer than the context"):
        Job.from_options(spec, context=1024, prompt=2048)
    said: list[str] = []
    training = Job.from_options(spec, task="lora", context=1024, prompt=100, note=said.append)
    assert training.prompt == 0 and any("--prompt" in sentence for sentence in said)
