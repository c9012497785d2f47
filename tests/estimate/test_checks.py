"""What a real run would refuse: a context past the model's maximum, tensor-parallel sizes the heads do not divide,
a multi-die card taken as one device."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpufly.catalog.spec import GpuSpec
from gpufly.errors import GpuflyError
from gpufly.estimate.advise import fit, recommend
from gpufly.estimate.checks import check_job, device_spec, tensor_parallel_sizes
from gpufly.estimate.job import Job
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.resolve import load_model
from gpufly.models.spec import RopeScaling

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
LLAMA = spec_from_config(load_config_file(CONFIGS / "llama-3.1-8b"), "Llama 3.1 8B", "test")
PLAIN = dataclasses.replace(LLAMA, rope_scaling=None, max_context=2048)
TWO_DIES = GpuSpec(id="twin", name="Twin", full_name="Twin", vendor="amd", segment="datacenter", architecture="CDNA 2",
                   vram_gib=128, memory_type="HBM2e", memory_bandwidth_gbps=3200, launch_year=2021,
                   sources=("https://example.org",), fp16_tensor_tflops=380, tdp_w=560, launch_price_usd=10000,
                   memory_bus_bits=8192, dies=2)


def test_the_config_keeps_its_rope_scaling() -> None:
    assert LLAMA.rope_scaling == RopeScaling(kind="llama3", factor=8.0, original_context=8192)
    assert LLAMA.rope_scaling.described == "llama3, factor 8 over 8,192 trained tokens"


def test_a_context_past_the_maximum_is_refused_without_rope_scaling(catalog) -> None:
    with pytest.raises(GpuflyError, match=r"--ctx 4,096 is beyond Llama 3\.1 8B's maximum context of 2,048") as error:
        fit(PLAIN, catalog.get("rtx 4090"), Job(context=4096))
    assert "--max-ctx" in (error.value.hint or "")
    assert fit(PLAIN, catalog.get("rtx 4090"), Job(context=2048)).notes == ()


def test_rope_scaling_turns_it_into_a_warning_naming_the_scaling(catalog) -> None:
    verdict = fit(LLAMA, catalog.get("b200"), Job(context=200_000))
    assert len(verdict.notes) == 1
    assert "beyond Llama 3.1 8B's max_position_embeddings (131,072)" in verdict.notes[0]
    assert "RoPE scaling (llama3, factor 8" in verdict.notes[0]


def test_tensor_parallel_must_divide_the_heads_where_the_engine_splits_tensors() -> None:
    with pytest.raises(GpuflyError, match=r"cannot split Llama 3\.1 8B's 32 attention heads and 8 KV heads across 5"
                       ) as error:
        check_job(LLAMA, TWO_DIES, Job(engine="vllm", gpus=5))
    assert "1, 2, 4, 8, 16, 32" in (error.value.hint or "")


@pytest.mark.parametrize("job", [Job(engine="llama.cpp", quant="q4_k_m", gpus=5), Job(engine="transformers", gpus=5),
                                 Job(task="full", gpus=5, zero=3), Job(engine="vllm", gpus=16)])
def test_layer_splits_training_and_replicated_kv_heads_are_not_refused(job: Job) -> None:
    check_job(LLAMA, TWO_DIES, job)


def test_the_sizes_that_work_follow_the_kv_heads() -> None:
    qwen_7b = load_model("qwen2.5-7b")
    assert qwen_7b.attention is not None and (qwen_7b.heads, qwen_7b.attention.kv_heads) == (28, 4)
    assert tensor_parallel_sizes(qwen_7b) == [1, 2, 4, 28]


def test_recommend_never_offers_a_size_vllm_would_refuse(catalog) -> None:
    qwen_7b = load_model("qwen2.5-7b")
    ranking = recommend(qwen_7b, Job(engine="vllm", context=32768, batch=64), catalog)
    assert ranking.picks and all(pick.fit.job.gpus in (1, 2, 4) for pick in ranking.picks)


def test_a_two_die_card_is_two_devices() -> None:
    die = device_spec(TWO_DIES)
    assert (die.vram_gib, die.memory_bandwidth_gbps, die.fp16_tensor_tflops) == (64, 1600, 190)
    assert (die.tdp_w, die.launch_price_usd, die.memory_bus_bits, die.dies) == (280, 5000, 4096, 1)
    assert device_spec(die) is die


def test_fit_on_a_two_die_card_holds_one_die(catalog) -> None:
    one = fit(LLAMA, TWO_DIES, Job())
    assert one.capacity_bytes == 64 * 2**30 and one.card is TWO_DIES
    assert any("Twin is 2 devices to the software" in note and "0.5 card" in note for note in one.notes)
    both = fit(LLAMA, TWO_DIES, Job(gpus=2))
    assert any("2 is 1 card" in note for note in both.notes)


def test_awq_weights_need_a_turing_or_newer_nvidia_gpu(catalog) -> None:
    """vLLM (and SGLang) check AWQ's minimum capability, 7.5, at start: refused there; transformers' AutoAWQ states the
    same requirement: a note. GPTQ, Turing and newer cards, and other vendors are left alone."""
    from gpufly.estimate.advise import parse_gpu
    from gpufly.estimate.checks import awq_note

    pascal, volta, turing = (parse_gpu(name, catalog).spec for name in ("gtx 1080 ti", "tesla v100 sxm2 32gb", "t4"))
    note = awq_note(pascal, Job(quant="awq"))
    assert note is not None and "7.5" in note and "6.1" in note and "--quant gptq" in note
    with pytest.raises(GpuflyError) as refused:
        awq_note(volta, Job(quant="awq", engine="vllm"))
    assert "refuses AWQ weights" in refused.value.message and "7.0" in refused.value.message
    assert awq_note(turing, Job(quant="awq", engine="vllm")) is None
    assert awq_note(pascal, Job(quant="gptq")) is None and awq_note(pascal, Job(quant="int4")) is None
    assert awq_note(pascal, Job(task="lora", quant="awq")) is None
