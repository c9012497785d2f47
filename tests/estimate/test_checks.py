"""What a real run would refuse: a context past the model's maximum (or past what vLLM and SGLang derive),
tensor-parallel sizes the heads do not divide, a multi-die card taken as one device, an engine on hardware, a model,
an attention kernel, a KV-cache type or fp8 weights it does not run, more GPUs than a node or llama.cpp holds."""

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


def test_an_engine_is_refused_on_hardware_it_does_not_run_on(catalog) -> None:
    """TensorRT-LLM is NVIDIA's alone; llama.cpp has no Gaudi backend; vLLM has no Apple GPU path. The hint names the
    engines that run there; a training job (PyTorch) is left alone."""
    with pytest.raises(GpuflyError, match=r"TensorRT-LLM does not run on AMD hardware like the Instinct MI300X") as amd:
        check_job(LLAMA, catalog.get("mi300x"), Job(engine="tensorrt-llm"))
    able = (amd.value.hint or "").split(": ", 1)[1].split(", ")
    assert "vllm" in able and "tensorrt-llm" not in able
    with pytest.raises(GpuflyError, match="Intel Gaudi") as gaudi:
        check_job(LLAMA, catalog.get("gaudi3-oam"), Job(engine="llama.cpp", quant="q4_k_m"))
    assert (gaudi.value.hint or "").endswith(": transformers, vllm")
    with pytest.raises(GpuflyError, match="vLLM does not run on Apple"):
        check_job(LLAMA, catalog.get("m4-max"), Job(engine="vllm"))
    check_job(LLAMA, catalog.get("gaudi3-oam"), Job(engine="vllm"))
    check_job(LLAMA, catalog.get("arc-b580"), Job(engine="ollama", quant="q4_k_m", flash_attention=False))
    check_job(LLAMA, catalog.get("mi300x"), Job(task="lora", engine="tensorrt-llm"))


def test_recommend_with_an_engine_ranks_only_the_hardware_it_runs_on(catalog) -> None:
    ranking = recommend(LLAMA, Job(engine="tensorrt-llm"), catalog)
    assert ranking.picks and {pick.fit.gpu.vendor for pick in ranking.picks} == {"nvidia"}
    vllm = recommend(LLAMA, Job(engine="vllm"), catalog)
    assert "apple" not in {pick.fit.gpu.vendor for pick in vllm.picks}


def test_fp8_weights_are_refused_where_the_engine_has_no_fp8_kernels(catalog) -> None:
    """vLLM and SGLang run fp8 weights from Ampere on (Marlin W8A16), TensorRT-LLM from Ada/Hopper; transformers
    dequantizes them to bf16 below 8.9: a note."""
    from gpufly.estimate.checks import fp8_note

    t4, a100, rtx3090, rtx4090 = (catalog.get(name) for name in ("t4", "a100-sxm4-80gb", "rtx-3090", "rtx-4090"))
    with pytest.raises(GpuflyError, match=r"vLLM refuses fp8 weights on the Tesla T4 \(compute capability 7\.5"):
        fp8_note(t4, Job(engine="vllm", quant="fp8"))
    assert fp8_note(a100, Job(engine="vllm", quant="fp8")) is None
    with pytest.raises(GpuflyError, match=r"TensorRT-LLM refuses fp8 weights on the RTX 3090") as trt:
        fp8_note(rtx3090, Job(engine="trtllm", quant="fp8"))  # an alias is the same engine
    assert "--engine vllm" in (trt.value.hint or "")
    assert fp8_note(rtx4090, Job(engine="tensorrt-llm", quant="fp8")) is None
    note = fp8_note(t4, Job(quant="fp8"))
    assert note is not None and "dequantizes an fp8 checkpoint to bf16" in note
    assert fp8_note(t4, Job(engine="vllm", quant="int8")) is None


def test_llm_engines_refuse_models_that_are_not_transformer_language_models(catalog) -> None:
    resnet, vit, bert = (load_model(name) for name in ("resnet-50", "vit-base-patch16-224", "bert-base-uncased"))
    rtx4090 = catalog.get("rtx-4090")
    with pytest.raises(GpuflyError, match=r"Ollama does not run ResNet-50 .*not a transformer") as cnn:
        check_job(resnet, rtx4090, Job(engine="ollama", quant="q4_k_m", flash_attention=False))
    assert cnn.value.hint == "--engine transformers, or leave --engine out"
    with pytest.raises(GpuflyError, match="vLLM does not run ViT"):
        check_job(vit, rtx4090, Job(engine="vllm"))
    with pytest.raises(GpuflyError, match="ExLlamaV2 does not run BERT"):
        check_job(bert, rtx4090, Job(engine="exllamav2", quant="int4"))
    check_job(bert, rtx4090, Job(engine="vllm", context=512))
    default = Job.from_options(resnet)  # no --engine: transformers, which runs any module
    assert default.engine == "transformers" and fit(resnet, rtx4090, default).fits


def test_vllm_and_sglang_refuse_a_context_past_the_one_they_derive(catalog) -> None:
    """Llama 3.1's llama3 scaling: max_position_embeddings (131,072) already is the extended length, so vLLM and SGLang
    refuse more unless an environment variable says otherwise; transformers runs it with the RoPE note."""
    h100 = catalog.get("h100-sxm")
    with pytest.raises(GpuflyError, match=r"vLLM refuses --ctx 1,000,000 .* maximum of 131,072") as vllm:
        check_job(LLAMA, h100, Job(engine="vllm", gpus=8, context=1_000_000))
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in (vllm.value.hint or "")
    with pytest.raises(GpuflyError) as sglang:
        check_job(LLAMA, h100, Job(engine="sglang", gpus=8, context=200_000))
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in (sglang.value.hint or "")
    check_job(LLAMA, h100, Job(engine="vllm", context=131_072))
    assert any("RoPE scaling" in note for note in check_job(LLAMA, h100, Job(gpus=8, context=200_000)))
    with pytest.raises(GpuflyError, match="derives a maximum"):  # the job's own refusal, before any GPU is tried
        recommend(LLAMA, Job(engine="vllm", context=1_000_000), catalog)


@pytest.mark.parametrize(("scaling", "name", "vllm", "sglang"), [
    (RopeScaling("yarn", 4.0, 32768), "Qwen", 131072, 32768),
    (RopeScaling("linear", 2.0), "Plain", 65536, 65536),
    (RopeScaling("dynamic", 2.0), "Plain", 65536, 65536),
    (RopeScaling("longrope", 4.0), "Phi", 32768, 131072),
    (RopeScaling("linear", 8.0), "Gemma 3 27B", 32768, 262144),
])
def test_the_derived_maximum_follows_each_engines_rule(scaling: RopeScaling, name: str, vllm: int, sglang: int) -> None:
    from gpufly.estimate.checks import derived_max_context

    model = dataclasses.replace(LLAMA, name=name, max_context=32768, rope_scaling=scaling)
    assert (derived_max_context(model, "vllm"), derived_max_context(model, "sglang")) == (vllm, sglang)


def test_kv_cache_types_the_engine_does_not_hold_are_refused(catalog) -> None:
    """vLLM's --kv-cache-dtype has no integer types; ExLlamaV2 holds Q8/Q4 (and FP8) caches; Ollama and llama.cpp keep
    a quantized cache only with flash attention on."""
    from gpufly.estimate.engines import engine
    from gpufly.estimate.memory import engine_kv_note

    h100 = catalog.get("h100-sxm")
    with pytest.raises(GpuflyError, match=r"vLLM has no q4_0 KV cache") as vllm:
        check_job(LLAMA, h100, Job(engine="vllm", kv_format="q4_0"))
    assert "--kv fp8 is its nearest" in (vllm.value.hint or "")
    for kv in ("q8_0", "q4_0", "fp8"):
        assert engine_kv_note(engine("exllamav2"), kv) is None
        check_job(LLAMA, h100, Job(engine="exllamav2", quant="exl2", kv_format=kv))
    ollama = Job.from_options(LLAMA, engine="ollama", kv_format="q8_0")
    with pytest.raises(GpuflyError, match="only with flash attention on") as off:
        check_job(LLAMA, h100, ollama)
    assert (off.value.hint or "").startswith("--attention flash")
    check_job(LLAMA, h100, Job.from_options(LLAMA, engine="ollama", kv_format="q8_0", attention="flash"))


def test_attention_kernels_the_engine_has_no_setting_for_are_refused(catalog) -> None:
    h100 = catalog.get("h100-sxm")
    with pytest.raises(GpuflyError, match="vLLM has no eager attention") as eager:
        check_job(LLAMA, h100, Job.from_options(LLAMA, engine="vllm", attention="eager"))
    assert eager.value.hint == "leave --attention out"
    with pytest.raises(GpuflyError, match="SGLang has no sdpa attention"):
        check_job(LLAMA, h100, Job.from_options(LLAMA, engine="sglang", attention="sdpa"))
    with pytest.raises(GpuflyError, match=r"llama\.cpp has no sdpa attention"):
        check_job(LLAMA, h100, Job.from_options(LLAMA, engine="llama.cpp", quant="q4_k_m", attention="sdpa"))
    for name, attention in (("transformers", "eager"), ("transformers", "sdpa"), ("llama.cpp", "eager"),
                            ("vllm", None), ("ollama", None), ("tensorrt-llm", "flash")):
        quant = "q4_k_m" if name in ("llama.cpp", "ollama") else None
        check_job(LLAMA, h100, Job.from_options(LLAMA, engine=name, quant=quant, attention=attention))


def test_more_gpus_than_a_node_holds_are_refused(catalog) -> None:
    """16 per node, or the NVLink domain where the catalog names a larger one (GB200 NVL72); a two-die card's dies
    each count."""
    from gpufly.estimate.checks import node_limit, nvlink_domain

    with pytest.raises(GpuflyError, match=r"100,000,000 H100 SXM GPUs in one node: a node holds at most 16") as many:
        check_job(LLAMA, catalog.get("h100-sxm"), Job(gpus=100_000_000))
    assert "--nodes 6,250,000" in (many.value.hint or "")
    with pytest.raises(GpuflyError, match="at most 16"):
        check_job(LLAMA, catalog.get("h100-sxm"), Job(task="full", gpus=32, zero=3))
    assert nvlink_domain(catalog.get("gb200")) == 72 and nvlink_domain(catalog.get("h100-sxm")) == 0
    check_job(LLAMA, catalog.get("gb200"), Job(task="full", gpus=72, zero=3))
    assert node_limit(TWO_DIES) == 32
    check_job(LLAMA, TWO_DIES, Job(engine="vllm", gpus=32))


def test_llama_cpp_splits_layers_over_at_most_its_device_limit(catalog) -> None:
    gpt2 = load_model("gpt2")
    with pytest.raises(GpuflyError, match=r"over 16 GPUs: GPT-2 \(124M\) has 12 layers") as layers:
        check_job(gpt2, catalog.get("rtx-4090"), Job(engine="llama.cpp", quant="q8_0", gpus=16))
    assert (layers.value.hint or "").startswith("--gpu 12xrtx-4090")
    with pytest.raises(GpuflyError, match="at most 16 devices"):
        check_job(LLAMA, catalog.get("gb200"), Job(engine="ollama", quant="q4_k_m", flash_attention=False, gpus=24))
    check_job(LLAMA, catalog.get("rtx-4090"), Job(engine="llama.cpp", quant="q4_k_m", gpus=16))


def test_training_without_bf16_tensor_cores_says_how_it_is_counted(catalog) -> None:
    """On a T4 the mixed recipe runs fp16 autocast and pure bf16 runs at the FP32 rate: each says so; an A100
    says nothing."""
    from gpufly.models.resolve import load_model

    model = load_model("llama-3.2-1b")
    mixed = fit(model, catalog.get("t4"), Job(task="full", context=512))
    pure = fit(model, catalog.get("t4"), Job(task="full", context=512, master_weights=False))
    assert any("counted as fp16 autocast" in note for note in mixed.notes)
    assert any("pure-bf16 training runs its matmuls at the FP32 rate" in note for note in pure.notes)
    assert not any("tensor cores" in note for note in fit(model, catalog.get("a100 sxm4 80gb"),
                                                          Job(task="full", context=512)).notes)
