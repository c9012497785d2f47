"""The engines beyond transformers, vLLM and llama.cpp: SGLang, TensorRT-LLM, exllamav2, MLC LLM and Ollama.

Each has its documented memory rule (the share of memory it claims, how it sizes its KV cache), refuses weights it
cannot run, and predicts speeds whose ranges are widened and say that no fit rows back them."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from gpufly.catalog import default_catalog
from gpufly.errors import GpuflyError
from gpufly.estimate.advise import fit, parse_gpu
from gpufly.estimate.engines import (
    ENGINES,
    GIB,
    MLC_GPU_MEMORY_UTILIZATION,
    SGLANG_MEM_FRACTION_STATIC,
    TRTLLM_KV_FREE_FRACTION,
    engine,
    ollama_context,
)
from gpufly.estimate.formats import weight_format
from gpufly.estimate.job import Job
from gpufly.estimate.memory import check_format, inference_memory
from gpufly.estimate.ranges import band_for, where
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.spec import ModelSpec

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
NEW = ("sglang", "tensorrt-llm", "exllamav2", "mlc-llm", "ollama")


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return spec_from_config(load_config_file(CONFIGS / "llama-3.1-8b"), "Llama 3.1 8B", "test")


@pytest.fixture(scope="module")
def h100():
    return parse_gpu("H100", default_catalog()).spec


@pytest.mark.parametrize("name", NEW)
def test_every_new_engine_is_a_first_class_choice(name: str) -> None:
    assert name in ENGINES
    assert engine(name).name == name


@pytest.mark.parametrize(("alias", "name"), [("trtllm", "tensorrt-llm"), ("exl2", "exllamav2"), ("mlc", "mlc-llm")])
def test_aliases(alias: str, name: str) -> None:
    assert engine(alias).name == name


def test_sglang_claims_its_mem_fraction_static(llama8b: ModelSpec, h100) -> None:
    verdict = fit(llama8b, h100, Job(engine="sglang"))
    assert SGLANG_MEM_FRACTION_STATIC == 0.88
    memory = verdict.memory
    outside = memory.total_bytes - memory.get("weights") - memory.get("kv_cache")
    assert verdict.capacity_bytes == int(min(h100.vram_gib * GIB, h100.vram_gib * GIB * 0.88 + outside))
    # the job fits exactly when weights and KV cache fit in 88% of the card
    assert verdict.fits == (memory.get("weights") + memory.get("kv_cache") <= 0.88 * h100.vram_gib * GIB)
    assert any("88%" in note for note in memory.notes)
    big = fit(llama8b, h100, Job(engine="sglang", context=131072, batch=4))
    assert not big.fits


def test_mlc_claims_its_gpu_memory_utilization(llama8b: ModelSpec, h100) -> None:
    verdict = fit(llama8b, h100, Job(engine="mlc-llm", quant="q4f16_1"))
    assert verdict.capacity_bytes == int(h100.vram_gib * GIB * MLC_GPU_MEMORY_UTILIZATION)


def test_tensorrt_llm_kv_cache_fits_in_its_share_of_free_memory(llama8b: ModelSpec, h100) -> None:
    verdict = fit(llama8b, h100, Job(engine="tensorrt-llm"))
    vram = h100.vram_gib * GIB
    rest = verdict.memory.total_bytes - verdict.memory.get("kv_cache")
    assert TRTLLM_KV_FREE_FRACTION == 0.9
    assert verdict.capacity_bytes == int(vram - 0.1 * (vram - rest))
    # the KV cache fits exactly when it is no more than 90% of what the rest leaves
    assert verdict.fits == (verdict.memory.get("kv_cache") <= 0.9 * (vram - rest))


def test_chunked_prefill_bounds_the_activation_peak(llama8b: ModelSpec) -> None:
    long = {name: inference_memory(llama8b, Job(engine=name, quant="int4" if name == "exllamav2" else "bf16",
                                                context=32768)).get("activations")
            for name in ("transformers", "sglang", "exllamav2")}
    assert long["exllamav2"] < long["sglang"] < long["transformers"]


def test_exllamav2_holds_the_kv_cache_for_the_whole_context(llama8b: ModelSpec) -> None:
    breakdown = inference_memory(llama8b, Job(engine="exllamav2", quant="exl2-4.65", context=8192, batch=2))
    assert breakdown.get("kv_cache") == 2 * GIB
    assert weight_format("exl2-4.65").bits_per_weight == 4.65


@pytest.mark.parametrize(("name", "quant", "able"), [
    ("sglang", "q4_k_m", "llama.cpp, ollama"),
    ("tensorrt-llm", "exl2", "exllamav2"),
    ("exllamav2", "fp8", "transformers"),
    ("mlc-llm", "bf16", "transformers"),
    ("ollama", "int4", "transformers"),
    ("transformers", "q4f16_1", "mlc-llm"),
    ("vllm", "exl2", "exllamav2"),
    ("exllamav2", "awq", "vllm"),
])
def test_a_format_the_engine_cannot_run_is_refused_naming_those_that_can(name: str, quant: str, able: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        check_format(engine(name), weight_format(quant))
    assert "does not run" in caught.value.message
    assert able in (caught.value.hint or "")
    assert name not in (caught.value.hint or "").split(": ", 1)[1].split(", ")


def test_the_refusal_comes_before_any_estimate(llama8b: ModelSpec) -> None:
    with pytest.raises(GpuflyError):
        Job.from_options(llama8b, engine="exllamav2", quant="q4_k_m")
    with pytest.raises(GpuflyError):
        inference_memory(llama8b, Job(engine="ollama", quant="bf16"))


@pytest.mark.parametrize(("name", "quant"), [("sglang", "int4"), ("tensorrt-llm", "fp8"), ("exllamav2", "exl2"),
                                             ("exllamav2", "gptq"), ("exllamav2", "int4"), ("vllm", "awq"),
                                             ("mlc-llm", "q4f16_1"), ("ollama", "q8_0")])
def test_formats_the_engine_runs_are_accepted(name: str, quant: str) -> None:
    check_format(engine(name), weight_format(quant))


@pytest.mark.parametrize("name", ["sglang", "tensorrt-llm", "exllamav2", "mlc-llm"])
def test_predictions_exist_with_wide_labelled_ranges(llama8b: ModelSpec, h100, name: str) -> None:
    quant = {"exllamav2": "exl2-4.65", "mlc-llm": "q4f16_1"}.get(name, "bf16")
    verdict = fit(llama8b, h100, Job(engine=name, quant=quant))
    assert verdict.speed.decode_tok_s and verdict.speed.prefill_tok_s
    decode = verdict.speed_ranges["decode_tok_s"]
    assert any(f"no fit rows for {name}: its constants come from its documentation" in why
               for why in decode.basis.widened)
    vllm = fit(llama8b, h100, Job(engine="vllm")).speed_ranges["decode_tok_s"]
    assert math.log(decode.high / decode.low) > 1.5 * math.log(vllm.high / vllm.low)
    assert verdict.memory_range is not None and verdict.memory_range.basis.widened


def test_graph_engines_pay_less_per_step_than_vllm(llama8b: ModelSpec, h100) -> None:
    speeds = {name: fit(llama8b, h100, Job(engine=name, context=512)).speed.decode_tok_s or 0.0
              for name in ("vllm", "sglang", "tensorrt-llm")}
    assert speeds["vllm"] < speeds["sglang"] < speeds["tensorrt-llm"]


def test_ollama_defaults(llama8b: ModelSpec) -> None:
    job = Job.from_options(llama8b, engine="ollama")
    assert job.quant == "q4_k_m" and job.flash_attention is False
    assert Job.from_options(llama8b, engine="ollama", quant="q8_0").quant == "q8_0"
    assert Job.from_options(llama8b, engine="mlc-llm").quant == "q4f16_1"
    assert Job.from_options(llama8b, engine="sglang").quant == "bf16"
    assert (ollama_context(8), ollama_context(24), ollama_context(80)) == (4096, 32768, 262144)


def test_ollama_is_llama_cpp_with_ollamas_defaults(llama8b: ModelSpec, h100) -> None:
    assert replace(engine("ollama"), name="llama.cpp", label="", runs_formats=(), default_quant="",
                   flash_attention_default=True, like="", documented_only=False) == engine("llama.cpp")
    job = Job.from_options(llama8b, engine="ollama", context=ollama_context(h100.vram_gib))
    ollama = fit(llama8b, h100, job)
    cpp = fit(llama8b, h100, job.with_(engine="llama.cpp"))
    assert ollama.memory.total_bytes == cpp.memory.total_bytes
    assert ollama.speed.decode_tok_s == cpp.speed.decode_tok_s
    assert ollama.speed.prefill_tok_s == cpp.speed.prefill_tok_s
    assert [i.bytes for i in ollama.memory.items] == [i.bytes for i in cpp.memory.items]


def test_ollama_borrows_llama_cpp_bands_widened_and_says_so(llama8b: ModelSpec, h100) -> None:
    job = Job(engine="ollama", quant="q4_k_m", flash_attention=False)
    cpp = band_for(where("decode", llama8b, h100, job.with_(engine="llama.cpp")))
    low, high, basis = band_for(where("decode", llama8b, h100, job))
    assert basis.group.startswith("llama.cpp decode")
    assert any("no fit rows for ollama" in why for why in basis.widened)
    assert high - low >= 2 * (cpp[1] - cpp[0]) - 1e-9


def test_each_engine_lists_the_hardware_it_runs_on() -> None:
    from gpufly.estimate.engines import ALL_VENDORS, ENGINE_VENDORS

    assert {name: runtime.vendors for name, runtime in ENGINES.items()} == ENGINE_VENDORS
    assert engine("tensorrt-llm").vendors == ("nvidia",) and engine("transformers").vendors == ALL_VENDORS
    assert "apple" not in engine("vllm").vendors and "gaudi" in engine("vllm").vendors
    assert not any("gaudi" in engine(name).vendors for name in ("llama.cpp", "ollama", "mlc-llm", "exllamav2"))


def test_exllamav2_holds_its_quantized_caches(llama8b: ModelSpec) -> None:
    """ExLlamaV2Cache_Q8/Q4 take q8_0's and q4_0's bytes per value; ExLlamaV2Cache_8bit is FP8."""
    assert {"q8_0", "q4_0", "fp8"} <= set(engine("exllamav2").kv_formats)
    cache = {kv: inference_memory(llama8b, Job(engine="exllamav2", quant="exl2", kv_format=kv)).get("kv_cache")
             for kv in ("fp16", "q8_0", "q4_0")}
    assert cache["q4_0"] < cache["q8_0"] < cache["fp16"]
