"""The changes `gpufly fit` offers: only ones that lower the total, only ones that apply to the model."""

from __future__ import annotations

import dataclasses

import pytest

from gpufly.catalog import default_catalog
from gpufly.catalog.lookup import Catalog
from gpufly.catalog.spec import GpuSpec
from gpufly.estimate.advise import _inference_changes, changes, fit, largest, parse_gpu, recommend
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
    assert found[0].description == "--gpu 8xrtx-4090"


def test_qlora_across_gpus_is_offered_with_zero_3(catalog) -> None:
    spec = load_model("llama-3.1-70b")
    current = fit(spec, catalog.get("4090"), Job(task="qlora", checkpointing=True, context=2048))
    found = changes(current)
    assert not current.fits and found and all(change.fit.fits for change in found)
    assert all(text.endswith("--zero 3") for text in _descriptions(found))


def test_a_job_that_does_not_fit_keeps_its_speed_only_as_if_it_fit(catalog) -> None:
    verdict = fit(load_model("llama-3.1-70b"), catalog.get("rtx 4090"), Job())
    data = verdict.to_dict()
    assert not verdict.fits and data["speed"] is None
    assert data["speed_if_it_fit"]["decode_tok_s"] > 0
    fitting = fit(load_model("llama-3.2-1b"), catalog.get("rtx 4090"), Job()).to_dict()
    assert fitting["speed"]["decode_tok_s"] > 0 and fitting["speed_if_it_fit"] is None


def test_a_fit_within_the_estimates_error_says_so(catalog) -> None:
    model, gpu = load_model("llama-3.1-8b"), catalog.get("rtx 4090")
    longest = largest(model, gpu, Job(), "context", 131072)
    assert longest is not None
    edge = fit(model, gpu, Job(context=longest))
    assert edge.fits and edge.tight and "a real run may not fit" in edge.verdict
    assert not fit(model, gpu, Job(context=8192)).tight


def _card(name: str, price: float | None, watts: float | None) -> GpuSpec:
    return GpuSpec(id=name.lower(), name=name, full_name=name, vendor="nvidia", segment="consumer",
                   architecture="Ada", vram_gib=24, memory_type="GDDR6X", memory_bandwidth_gbps=1000,
                   launch_year=2023, sources=("https://example.org",), fp16_tensor_tflops=160, tdp_w=watts,
                   launch_price_usd=price)


def test_near_ties_are_ordered_by_price_then_power_never_by_catalog_order() -> None:
    cards = [_card("Dear", 2000, 300), _card("Unpriced", None, 200), _card("Cheap", 1000, 450),
             _card("Cheap Cool", 1000, 300)]
    ranking = recommend(load_model("llama-3.1-8b"), Job(engine="vllm"), cards)
    assert [pick.fit.gpu.name for pick in ranking.picks] == ["Cheap Cool", "Cheap", "Dear", "Unpriced"]
    assert ranking.groups == ((0, 4),) and ranking.error == 0.11
    assert ranking.engine_limit is None
    assert ranking.to_dict()["ties"] == [{"from": 1, "to": 4, "count": 4}]


def test_a_host_bound_engine_is_named_as_the_limit(catalog) -> None:
    ranking = recommend(load_model("qwen2.5-32b"), Job(quant="int4"), catalog)
    assert ranking.engine_limit and "transformers is the limit, not the GPU" in ranking.engine_limit
    assert "--engine vllm" in ranking.engine_limit
    assert ranking.groups and ranking.groups[0][0] == 0
    leaders = ranking.picks[:ranking.groups[0][1]]
    prices = [pick.price_usd for pick in leaders if pick.price_usd is not None]
    assert prices == sorted(prices)
    gguf = recommend(load_model("qwen2.5-32b"), Job(quant="q4_k_m", engine="transformers"), catalog)
    assert gguf.engine_limit is None or "--engine llama.cpp would separate them" in gguf.engine_limit


def test_parse_gpu_says_what_it_assumed() -> None:
    sxm = dataclasses.replace(_card("A100 80GB SXM", None, 400), id="a100-sxm", default_for=("a100",))
    pcie = dataclasses.replace(_card("A100 80GB PCIe", None, 300), id="a100-pcie")
    choice = parse_gpu("2xA100", Catalog([sxm, pcie]))
    assert (choice.spec.id, choice.count) == ("a100-sxm", 2)
    assert choice.assumed and "A100 80GB SXM" in choice.assumed and "A100 80GB PCIe" in choice.assumed
    assert parse_gpu("a100 80gb pcie", Catalog([sxm, pcie])).assumed is None


def test_a_full_fine_tune_that_does_not_fit_is_offered_the_lighter_recipes(catalog) -> None:
    """Pure bf16, the optimizer in backward, 8-bit states and host offload each lower the total, and are offered
    where they make it fit; eager attention is offered flash."""
    from gpufly.estimate.advise import _training_changes

    spec = load_model("qwen2.5-1.5b")
    job = Job.from_options(spec, task="full", context=2048)
    offered = dict(_training_changes(spec, job))
    assert {"--precision bf16", "--optimizer-in-backward", "--optimizer adamw8bit", "--offload optimizer"} <= set(
        offered)
    assert offered["--precision bf16"].precision == "bf16" and offered["--offload optimizer"].offload == "optimizer"
    eager = Job.from_options(spec, task="full", context=2048, attention="eager")
    assert dict(_training_changes(spec, eager))["--attention flash"].attention == "flash"
    shown = {c.description for c in changes(fit(spec, catalog.get("4090"), job))}
    assert {"--precision bf16", "--offload optimizer"} <= shown


def test_kv_changes_are_ones_the_engine_runs() -> None:
    """Ollama quantizes its KV cache only with flash attention on (off by default): the offer turns it on. ExLlamaV2
    has Q8 and Q4 caches. A move to llama.cpp leaves attention and KV settings llama.cpp does not have behind."""
    spec = load_model("llama-3.1-8b")
    ollama = _all_offers(spec, Job(engine="ollama", flash_attention=False, context=32768))
    assert [t for t in ollama if "--kv" in t] == ["--attention flash --kv q8_0", "--attention flash --kv q4_0"]
    assert {"--kv q8_0", "--kv q4_0"} <= set(_all_offers(spec, Job(engine="exllamav2", quant="exl2")))
    moved = dict(_inference_changes(spec, Job(engine="transformers", sdpa=True, flash_attention=False,
                                              kv_format="fp8"), default_catalog().get("4090")))
    to_llama = moved["--engine llama.cpp --quant q4_k_m"]
    assert (to_llama.sdpa, to_llama.flash_attention, to_llama.kv_format) == (False, True, "fp16")


def test_the_optimizer_in_backward_is_not_offered_to_a_job_that_accumulates(catalog) -> None:
    """Stepping in backward frees each gradient as it is made: a job that accumulates (a --global-batch over its
    ranks' micro-batches) cannot take it, and the change that would be refused is not offered."""
    from gpufly.estimate.advise import _training_changes

    spec = load_model("llama-3.1-8b")
    offered = [text for text, _job in _training_changes(spec, Job(task="full", gpus=8, global_batch=64))]
    assert "--optimizer-in-backward" not in offered
    assert "--optimizer-in-backward" in [text for text, _job in _training_changes(spec, Job(task="full", gpus=8))]
