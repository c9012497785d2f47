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


def _quantized(tmp_path, stated: object, name: str = "config.json"):  # type: ignore[no-untyped-def]
    """The llama-3.1-8b fixture as a checkpoint whose config.json states ``stated`` as its quantization_config."""
    import json
    from pathlib import Path

    from gpufly.models.hf_config import load_config_file

    base = load_config_file(Path(__file__).parent.parent / "fixtures" / "configs" / "llama-3.1-8b")
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**base, "quantization_config": stated}))
    return load_model(str(path))


def test_a_quantized_checkpoints_config_brings_its_format_for_inference(tmp_path) -> None:
    """An AWQ or GPTQ repository's config.json states its quantization: `fit` takes it when --quant is not given
    (a silent bf16 would count 3.7x the weights), and --quant still overrides it. LoRA trains adapters over the
    checkpoint as it is stored (PEFT wraps GPTQ, AWQ and bitsandbytes layers), so its frozen base is that format."""
    for method, bits, quant in (("awq", 4, "awq"), ("gptq", 4, "gptq-int4"), ("gptq", 8, "int8")):
        spec = _quantized(tmp_path, {"quant_method": method, "bits": bits}, f"{method}/{bits}/config.json")
        assert Job.from_options(spec).quant == quant
        assert Job.from_options(spec, quant="bf16").quant == "bf16"
        assert Job.from_options(spec, task="lora").quant == quant, "LoRA's base is the checkpoint as stored"
        assert Job.from_options(spec, task="lora", quant="bf16").quant == "bf16", "--quant still wins"


def test_lora_over_a_quantized_checkpoint_counts_its_stored_base(tmp_path) -> None:
    """Counted at bf16, an AWQ checkpoint's frozen base would be 2.8x too large, with nothing said."""
    from gpufly.estimate.memory import memory

    spec = _quantized(tmp_path, {"quant_method": "awq", "bits": 4})
    stored = memory(spec, Job.from_options(spec, task="lora")).get("weights")
    plain = memory(load_model("llama-3.1-8b"), Job.from_options(load_model("llama-3.1-8b"), task="lora"))
    assert stored < plain.get("weights") / 2.5


@pytest.mark.parametrize("stated", [{"quant_method": "gptq", "bits": 4}, {"quant_method": "awq", "bits": 4},
                                    {"quant_method": "bitsandbytes", "load_in_8bit": True},
                                    {"quant_method": "hqq", "nbits": 4}])
def test_full_training_on_a_quantized_checkpoint_is_refused(tmp_path, stated: dict) -> None:
    """Quantized integer weights cannot be fully fine-tuned: the run would fail where `fit` printed a verdict."""
    spec = _quantized(tmp_path, stated)
    for quant in (None, "int4"):
        with pytest.raises(GpuflyError, match="quantized weights cannot be fully fine-tuned") as raised:
            Job.from_options(spec, task="full", quant=quant, note=lambda _: None)
        assert "16-bit original" in (raised.value.hint or "") and "--task lora" in (raised.value.hint or "")
    assert Job.from_options(spec, task="full", quant="bf16").task == "full", "--quant bf16: the 16-bit weights"


def test_qlora_on_a_checkpoint_quantized_otherwise_than_nf4_is_refused(tmp_path) -> None:
    """QLoRA quantizes a 16-bit base to NF4; transformers loads a GPTQ checkpoint as GPTQ whatever is asked, so an
    NF4 estimate would price another base than the run loads."""
    with pytest.raises(GpuflyError, match="QLoRA quantizes a 16-bit base to NF4") as raised:
        Job.from_options(_quantized(tmp_path, {"quant_method": "gptq", "bits": 4}, "gptq/config.json"),
                         task="qlora")
    assert "--task lora" in (raised.value.hint or "")
    gptq = _quantized(tmp_path, {"quant_method": "gptq", "bits": 4}, "gptq/config.json")
    assert Job.from_options(gptq, task="qlora", quant="bf16", note=lambda _: None).task == "qlora", (
        "--quant bf16 says the weights are 16-bit, which QLoRA quantizes")
    nf4 = _quantized(tmp_path, {"quant_method": "bitsandbytes", "load_in_4bit": True}, "nf4/config.json")
    assert Job.from_options(nf4, task="qlora").task == "qlora", "a bitsandbytes 4-bit checkpoint is QLoRA's base"


@pytest.mark.parametrize(("options", "message"), [
    ({"quant": "q4_k_m"}, r"LoRA cannot train over a Q4_K_M base \(--quant q4_k_m\)"),
    ({"quant": "Q8_0"}, "LoRA cannot train over a Q8_0 base"),
    ({"quant": "exl2"}, "LoRA cannot train over a EXL2-4.0 base"),
    ({"quant": "q4f16_1"}, "LoRA cannot train over a q4f16_1 base"),
    ({"quant": "fp8"}, "does not fine-tune FP8-quantized weights"),
])
def test_lora_over_a_base_peft_cannot_train_is_refused(llama, options: dict, message: str) -> None:
    """PEFT adds adapters to PyTorch layers: a GGUF (or EXL2, MLC) base is an inference engine's format, and
    transformers refuses to fine-tune FP8 weights. A verdict would price a run that cannot start."""
    with pytest.raises(GpuflyError, match=message) as raised:
        Job.from_options(llama, task="lora", **options)
    assert "--task qlora" in (raised.value.hint or "") and "--quant bf16" in (raised.value.hint or "")
    for quant in ("int8", "int4", "nf4", "fp16"):
        assert Job.from_options(llama, task="lora", quant=quant).quant == quant


def test_lora_over_an_fp8_checkpoint_is_refused(tmp_path) -> None:
    with pytest.raises(GpuflyError, match="as the checkpoint stores it") as raised:
        Job.from_options(_quantized(tmp_path, {"quant_method": "fp8"}), task="lora")
    assert "16-bit original checkpoint" in (raised.value.hint or "")


def test_a_gguf_file_is_trained_dequantized_as_said(llama) -> None:
    """transformers dequantizes a GGUF file to train it: its Q4_K_M type is no training base, and a note says so."""
    from_file = dataclasses.replace(llama, source="gguf:model.gguf", weight_format="Q4_K_M")
    said: list[str] = []
    assert Job.from_options(from_file, task="lora", note=said.append).quant == "bf16"
    assert len(said) == 1 and "dequantizes" in said[0]
    assert Job.from_options(from_file, task="full", note=lambda _: None).quant == "bf16"


@pytest.mark.parametrize(("stated", "said"), [
    ({"quant_method": "hqq", "nbits": 4}, "quant_method 'hqq', bits not stated"),
    ({"quant_method": "gptq", "bits": "four"}, "quant_method 'gptq', bits four"),
    ({"quant_method": "gptq", "bits": 3}, "quant_method 'gptq', bits 3"),
    ("gptq", "a str, not a table"),
])
def test_a_quantization_config_gpufly_cannot_read_asks_for_quant(tmp_path, stated, said) -> None:  # type: ignore[no-untyped-def]
    """Counted at 16 bits, an unread quantized checkpoint's weights would be 2-4x too large with nothing said:
    inference and LoRA (whose frozen base is the checkpoint as stored) ask for --quant instead, and --quant goes
    on."""
    spec = _quantized(tmp_path, stated)
    for task in ("infer", "lora"):
        with pytest.raises(GpuflyError, match="quantization gpufly cannot read") as raised:
            Job.from_options(spec, task=task)
        assert said in str(raised.value) and "--quant" in (raised.value.hint or "")
        assert Job.from_options(spec, task=task, quant="int4").quant == "int4"


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


@pytest.mark.parametrize(("options", "message"), [
    ({"gpus": 8, "global_batch": 64}, "cannot accumulate gradients: --global-batch 64 is more than --batch 1 on 8"),
    ({"global_batch": 4, "batch": 2}, "cannot accumulate gradients"),
    ({"gpus": 8, "pipeline_parallel": 2}, r"cannot run a pipeline \(--pp 2\)"),
    ({"gpus": 8, "pipeline_parallel": 2, "microbatches": 1}, "cannot run a pipeline"),
])
def test_optimizer_in_backward_with_accumulated_gradients_is_refused(llama, options: dict, message: str) -> None:
    """Stepping inside backward applies and frees each gradient as it is made: no micro-batch can add to it
    (torchtune raises on optimizer_in_bwd with gradient accumulation, torchtitan with pipeline parallelism)."""
    with pytest.raises(GpuflyError, match=message) as raised:
        Job.from_options(llama, task="full", precision="bf16", optimizer_in_backward=True, **options)
    assert "--optimizer-in-backward" in (raised.value.hint or "")


def test_optimizer_in_backward_without_accumulation_runs(llama) -> None:
    job = Job.from_options(llama, task="full", optimizer_in_backward=True, gpus=8, global_batch=8)
    assert job.optimizer_in_backward and not job.accumulates
    assert Job.from_options(llama, task="full", gpus=8, global_batch=64).accumulates


def test_microbatches_without_a_pipeline_are_dropped_as_said(llama) -> None:
    """The note says --microbatches is ignored without a pipeline: the step must then be one micro-batch."""
    from gpufly.estimate.parallel import microbatches

    said: list[str] = []
    job = Job.from_options(llama, task="full", gpus=8, microbatches=4, note=said.append)
    assert any(sentence.startswith("--microbatches feeds a pipeline") for sentence in said)
    assert (job.microbatches, microbatches(job)) == (0, 1)
    assert Job.from_options(llama, task="full", gpus=8, pipeline_parallel=2, microbatches=4).microbatches == 4


@pytest.mark.parametrize(("engine", "said"), [
    ("sglang", "SGLang does not read it: its share is --mem-fraction-static"),
    ("mlc-llm", "MLC LLM does not read it: its share is gpu_memory_utilization"),
    ("tensorrt-llm", "TensorRT-LLM does not read it: its KV cache takes kv_cache_free_gpu_memory_fraction"),
    ("llama.cpp", "llama.cpp claims no share up front"),
    ("transformers", "transformers claims no share up front"),
])
def test_gpu_memory_utilization_outside_vllm_is_a_note(llama, engine: str, said: str) -> None:
    """Only vLLM's capacity reads --gpu-memory-utilization: elsewhere it changes nothing, which must be said."""
    notes = _notes(llama, engine=engine, gpu_memory_utilization=0.5)
    assert len(notes) == 1 and notes[0].startswith("--gpu-memory-utilization 0.5 sets vLLM's share")
    assert said in notes[0] and notes[0].endswith("(ignored)")


def test_gpu_memory_utilization_is_no_note_for_vllm_or_when_not_given(llama) -> None:
    assert _notes(llama, engine="vllm", gpu_memory_utilization=0.5) == []
    assert Job.from_options(llama, engine="vllm", gpu_memory_utilization=0.5).gpu_memory_utilization == 0.5
    assert _notes(llama, engine="sglang") == [], "not given: nothing to say"
    assert len(_notes(llama, engine="sglang", gpu_memory_utilization=0.9)) == 1, "given, even at vLLM's default"
    assert Job.from_options(llama).gpu_memory_utilization == 0.9
    assert _notes(llama, task="lora", gpu_memory_utilization=0.5) == [
        "--gpu-memory-utilization 0.5 sets vLLM's share of each GPU; training uses the whole GPU (ignored)"]


@pytest.mark.parametrize(("kind", "plural"), [("loss", "losses"), ("task", "tasks"), ("precision", "precisions"),
                                              ("checkpointing mode", "checkpointing modes")])
def test_the_hint_for_an_unknown_choice_lists_them_in_good_english(llama, kind: str, plural: str) -> None:
    option = {"loss": "loss", "task": "task", "precision": "precision", "checkpointing mode": "checkpointing_mode"}
    with pytest.raises(GpuflyError) as raised:
        Job.from_options(llama, **{"task": "full", option[kind]: "bogus"})
    assert (raised.value.hint or "").startswith(f"{plural}: ")


@pytest.mark.parametrize(("options", "named"), [
    ({"task": "full", "checkpointing_mode": "selective"}, "checkpointing on by --checkpointing-mode selective;"),
    ({"task": "full", "checkpointing_mode": "full"}, "checkpointing on by --checkpointing-mode full;"),
    ({"task": "full", "checkpointing": True}, "checkpointing on by --checkpointing;"),
    ({"task": "lora", "checkpointing_mode": "none"}, "checkpointing off by --checkpointing-mode none;"),
    ({"task": "lora", "checkpointing": False}, "checkpointing off by --no-checkpointing;"),
])
def test_the_checkpointing_reason_names_the_option_given(llama, options: dict, named: str) -> None:
    reason = Job.from_options(llama, **options).checkpointing_reason
    assert reason.startswith(named)
    assert reason.count("--checkpointing-mode selective") <= 1


def test_a_changed_checkpointing_names_the_option_that_sets_it(llama) -> None:
    """A change `fit` suggests (job.with_) is named by the option that would make it, not the one first given."""
    job = Job.from_options(llama, task="full", checkpointing_mode="selective")
    assert job.with_(selective=False).checkpointing_reason.startswith("checkpointing on by --checkpointing;")
    assert job.with_(checkpointing=False).checkpointing_reason.startswith("checkpointing off, the full recipe's")
    assert "checkpointing_option" not in job.to_dict()
    assert job == Job.from_options(llama, task="full", checkpointing=True).with_(selective=True)


def test_a_link_on_one_gpu_is_noted_and_a_misspelt_one_still_refused(llama) -> None:
    assert _notes(llama, link="nvlink") == ["--link nvlink joins GPUs; one GPU does not use it (ignored)"]
    assert _notes(llama, link="pcie", gpus=2) == []
    with pytest.raises(GpuflyError):
        Job.from_options(llama, link="nvlnk")
