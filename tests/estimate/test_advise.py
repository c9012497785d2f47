"""The changes `gpufly fit` offers: only ones that lower the total, only ones that apply to the model."""

from __future__ import annotations

import pytest

from gpufly.catalog import default_catalog
from gpufly.estimate.advise import _inference_changes, changes, fit
from gpufly.estimate.job import Job
from gpufly.models.resolve import load_model
from gpufly.models.spec import ModelSpec

CNN = ModelSpec(name="ResNet-50", kind="cnn", source="test", params=25_557_032, params_method="given",
                linear_params={"fc": 2_049_000}, linear_shapes={"fc": (2048, 1000, 1)},
                forward_flops_per_sample=8.18e9, activation_bytes_per_sample=180e6, sample_shape=(3, 224, 224))
"""ResNet-50 as its factory measures it (activations: the fake-tensor count at 224x224, fp32)."""
RECSYS = ModelSpec(name="DLRM", kind="recsys", source="test", params=69_000_000, params_method="given",
                   embedding_params=68_000_000, linear_params={"top_mlp.0": 1_000_000},
                   linear_shapes={"top_mlp.0": (415, 512, 1)}, forward_flops_per_sample=2e6,
                   activation_bytes_per_sample=60e3)


def _descriptions(found: list) -> list[str]:
    return [change.description for change in found]


def test_every_change_lowers_the_total(catalog) -> None:
    current = fit(CNN, catalog.get("4090"), Job(task="full", batch=256))
    found = changes(current)
    assert found and all(change.fit.memory.total_bytes < current.memory.total_bytes for change in found)
    assert "--checkpointing" not in _descriptions(found), "checkpointing is modelled for transformers only"


def test_lora_is_not_offered_for_a_model_without_its_targets(catalog) -> None:
    over = fit(CNN, catalog.get("rtx 3060"), Job(task="full", batch=1024))
    assert not over.fits
    assert not any("lora" in text for text in _descriptions(changes(over)))


@pytest.mark.parametrize("model", [CNN, RECSYS])
def test_llm_only_changes_are_not_offered_outside_llms(catalog, model: ModelSpec) -> None:
    found = _descriptions(changes(fit(model, catalog.get("4090"), Job())))
    assert not any("llama.cpp" in text or "--kv" in text or "int4" in text for text in found)


def test_llms_still_get_the_gguf_and_kv_changes(catalog) -> None:
    spec = load_model("llama-3.1-8b")
    found = _descriptions(changes(fit(spec, catalog.get("4090"), Job(context=16384, batch=2, engine="vllm"))))
    assert "--engine llama.cpp --quant q4_k_m" in found and "--kv fp8" in found


def _all_offers(spec: ModelSpec, job: Job) -> list[str]:
    """Every change offered when the job fits with room (changes() shows only the first four)."""
    return [text for text, _ in _inference_changes(spec, job, default_catalog().get("4090"))]


@pytest.mark.parametrize("engine", ["llama.cpp", "ollama"])
def test_llama_cpp_gets_gguf_quants_and_its_own_kv_types(engine: str) -> None:
    found = _all_offers(load_model("llama-3.1-8b"), Job(engine=engine, context=32768))
    assert not any(text in found for text in ("--quant fp8", "--quant int8", "--quant int4", "--kv fp8"))
    assert [text for text in found if text.startswith("--quant")] == [
        "--quant q8_0", "--quant q6_k", "--quant q5_k_m", "--quant q4_k_m", "--quant q3_k_m", "--quant q2_k"]
    assert [text for text in found if text.startswith("--kv")] == ["--kv q8_0", "--kv q4_0"]
    assert not any("--engine" in text for text in found)


def test_llama_cpp_offers_only_smaller_gguf_types_and_kv() -> None:
    found = _all_offers(load_model("llama-3.1-8b"), Job(engine="llama.cpp", quant="q4_k_m", kv_format="q8_0"))
    assert found == ["--quant q3_k_m", "--quant q2_k", "--kv q4_0"]


def test_kv_fp8_only_where_the_engine_has_it() -> None:
    spec = load_model("llama-3.1-8b")
    assert "--kv fp8" in _all_offers(spec, Job(engine="vllm"))
    assert not any(text.startswith("--kv") for text in _all_offers(spec, Job(engine="transformers")))
    assert "--quant fp8" in _all_offers(spec, Job(engine="vllm"))


def test_nothing_fits_gives_the_closest_option(catalog) -> None:
    spec = load_model("llama-3.1-405b")
    current = fit(spec, catalog.get("4090"), Job())
    found = changes(current)
    assert len(found) == 1 and not found[0].fit.fits
    assert found[0].fit.memory.total_bytes < current.memory.total_bytes
    assert found[0].description == "--gpu 8xRTX4090"


def test_qlora_across_gpus_is_offered_with_zero_3(catalog) -> None:
    spec = load_model("llama-3.1-70b")
    current = fit(spec, catalog.get("4090"), Job(task="qlora", checkpointing=True, context=2048))
    found = changes(current)
    assert not current.fits and found and all(change.fit.fits for change in found)
    assert all(text.endswith("--zero 3") for text in _descriptions(found))
