"""`gpufly fit` and `gpufly recommend` as a user runs them."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q
from gguf import LlamaFileType

from gpufly.models.meta import transformers_available
from tests.fakes.nvml import nvml_env
from tests.models.test_gguf_file import llama_meta, llama_tensors, write_gguf

LLAMA = str(Path(__file__).parent.parent / "fixtures" / "configs" / "llama-3.1-8b")
CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"


def test_fit_verdict_breakdown_and_speed(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "4090", "--ctx", "8192")
    assert result.code == 0, result.stderr
    assert "fits on RTX 4090, with" in result.stdout
    for item in ("weights", "kv_cache", "activations", "runtime", "total"):
        assert item in result.stdout
    assert "decode" in result.stdout and "tok/s" in result.stdout


def test_fit_that_fails_offers_changes_that_fit_and_exits_1(cli) -> None:
    """A 16 GB card: Unsloth's table fits 2,551 tokens of HF QLoRA on an 8B there (932 on 12 GB)."""
    result = cli("fit", LLAMA, "--gpu", "rtx 4080", "--task", "full", "--ctx", "2048", "--json")
    assert result.code == 1
    data = json.loads(result.stdout)
    verdict = data["results"][0]
    assert verdict["fits"] is False and verdict["free_bytes"] < 0
    assert verdict["changes"] and all(change["fits"] for change in verdict["changes"])


def test_fit_json_shape(cli) -> None:
    data = json.loads(cli("fit", LLAMA, "--gpu", "2xH100", "--json").stdout)
    assert data["schema_version"] == 1
    assert data["model"]["params"] == 8030261248
    result = data["results"][0]
    assert result["gpus"] == 2 and result["gpu"] == "h100-sxm"
    assert {item["name"] for item in result["memory"]["items"]} >= {"weights", "kv_cache", "activations"}
    assert result["speed"]["decode_tok_s"] > 0


def test_max_ctx_solves_for_the_longest_context(cli) -> None:
    data = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--max-ctx", "--json").stdout)
    longest = data["results"][0]["max_ctx"]
    assert 8192 < longest < 131072
    at_limit = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--ctx", str(longest), "--json").stdout)
    beyond = cli("fit", LLAMA, "--gpu", "4090", "--ctx", str(longest + 1), "--json")
    assert at_limit["results"][0]["fits"] is True
    assert json.loads(beyond.stdout)["results"][0]["fits"] is False
    bounds = data["results"][0]["max_ctx_range"]
    assert bounds["low"] < longest < bounds["high"] and bounds["coverage"] == 0.8, "the memory's range, carried over"
    text = cli("fit", LLAMA, "--gpu", "4090", "--max-ctx").stdout
    assert f"{longest:,} ({bounds['low']:,}-{bounds['high']:,}, 80% range" in text


NO_DRIVER = nvml_env("hw/no_driver.json")
TWO_GPUS = nvml_env("nvml_two_gpus.json")


def test_fit_without_a_gpu_here_shows_the_catalog(cli) -> None:
    result = cli("fit", LLAMA, "--json", env=NO_DRIVER)
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["gpus_on_this_machine"] == 0 and "results" not in data
    rows = {row["gpu"]: row for row in data["catalog"]}
    assert {"rtx-4090", "h100-sxm", "rtx-3060-12gb"} <= set(rows)
    assert rows["h100-sxm"]["fits"] is True and "max_ctx" not in rows["h100-sxm"]
    frees = [row["free_bytes"] for row in data["catalog"]]
    assert frees == sorted(frees, reverse=True)
    assert all((row["speed"] is None) == (not row["fits"]) for row in data["catalog"])
    assert all(row["speed_if_it_fit"]["decode_tok_s"] > 0 for row in data["catalog"] if not row["fits"])


def test_catalog_view_solves_max_ctx_and_max_batch_per_gpu(cli) -> None:
    result = cli("fit", LLAMA, "--max-ctx", "--max-batch", "--json", env=NO_DRIVER)
    rows = {row["gpu"]: row for row in json.loads(result.stdout)["catalog"]}
    single = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--max-ctx",
                                      "--max-batch", "--json", env=NO_DRIVER).stdout)["results"][0]
    assert rows["rtx-4090"]["max_ctx"] == single["max_ctx"] and rows["rtx-4090"]["max_batch"] == single["max_batch"]
    assert rows["h100-sxm"]["max_batch"] > rows["rtx-4090"]["max_batch"]
    too_small = [row for row in rows.values() if not row["fits"]]
    assert too_small and all(row["max_batch"] is None for row in too_small), "batch 1 does not fit there"
    text = cli("fit", LLAMA, "--max-ctx", env=NO_DRIVER)
    header = next(line for line in text.stdout.splitlines() if "GPU" in line and "VRAM" in line)
    assert "max ctx" in header and "max batch" not in header
    assert f"{single['max_ctx']:,}" in next(line for line in text.stdout.splitlines() if "RTX 4090 " in line)


def test_fit_uses_this_machines_gpus(cli) -> None:
    result = cli("fit", LLAMA, "--ctx", "8192", "--max-ctx", "--json", env=TWO_GPUS)
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    assert "catalog" not in data
    assert [(row["gpu"], row["gpus"]) for row in data["results"]] == [("h100-sxm", 1), ("a100-sxm4-80gb", 1)]
    assert all(row["fits"] and row["max_ctx"] == 131072 for row in data["results"])
    text = cli("fit", LLAMA, env=TWO_GPUS)
    assert "fits on H100 SXM" in text.stdout and "fits on A100 80GB SXM" in text.stdout


def test_a_gguf_file_defaults_to_its_own_format_and_llama_cpp(cli, tmp_path) -> None:
    path = tmp_path / "tiny.Q8_0.gguf"
    written = write_gguf(path, "llama", llama_tensors(), llama_meta)
    data = json.loads(cli("fit", str(path), "--gpu", "4090", "--json").stdout)
    assert (data["job"]["quant"], data["job"]["engine"]) == ("q8_0", "llama.cpp")
    weights = next(item for item in data["results"][0]["memory"]["items"] if item["name"] == "weights")
    assert data["model"]["weight_bytes"] == sum(written.values())
    assert weights["bytes"] == sum(written.values()) - written["token_embd.weight"], "llama.cpp keeps it on the host"
    assert "exact bytes from the file" in weights["note"] and "stays in host memory" in weights["note"]
    as_bf16 = json.loads(cli("fit", str(path), "--gpu", "4090", "--quant", "bf16", "--engine", "transformers",
                             "--json").stdout)
    assert (as_bf16["job"]["quant"], as_bf16["job"]["engine"]) == ("bf16", "transformers")
    assert as_bf16["results"][0]["memory"]["items"][0]["bytes"] == 2 * data["model"]["params"]


@pytest.mark.parametrize("qtype, file_type, quant", [(Q.Q4_0, LlamaFileType.MOSTLY_Q4_0, "q4_0"),
                                                     (Q.Q5_0, LlamaFileType.MOSTLY_Q5_0, "q5_0"),
                                                     (Q.Q4_1, LlamaFileType.MOSTLY_Q4_1, "Q4_1")])
def test_legacy_gguf_types_read_in_their_own_format(cli, tmp_path, qtype, file_type, quant) -> None:
    plan = [(name, shape, qtype if kind == Q.Q8_0 else kind) for name, shape, kind in llama_tensors()]
    path = tmp_path / f"tiny.{quant}.gguf"
    written = write_gguf(path, "llama", plan, lambda writer: llama_meta(writer, file_type=file_type))
    result = cli("fit", str(path), "--gpu", "4090", "--quant", quant, "--json")
    assert result.code == 0, result.stderr
    weights = json.loads(result.stdout)["results"][0]["memory"]["items"][0]
    assert weights["bytes"] == sum(written.values()) - written["token_embd.weight"]


def test_llama_cpp_keeps_a_tied_embedding_on_the_gpu_as_the_output_layer(cli, tmp_path) -> None:
    path = tmp_path / "tied.Q8_0.gguf"
    written = write_gguf(path, "llama", llama_tensors(tied=True), llama_meta)
    weights = json.loads(cli("fit", str(path), "--gpu", "4090", "--json").stdout)["results"][0]["memory"]["items"][0]
    assert weights["bytes"] == sum(written.values())


def test_engine_and_format_mismatch_is_a_note_not_an_error(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "4090", "--engine", "llama.cpp", "--quant", "nf4")
    assert result.code == 0, result.stderr
    assert "note: llama.cpp does not run nf4 weights" in result.stdout
    vllm = cli("fit", LLAMA, "--gpu", "4090", "--engine", "vllm", "--quant", "q4_k_m")
    assert vllm.code == 0 and "note: vLLM's GGUF support is experimental" in vllm.stdout


def test_gpu_memory_utilization_sets_vllms_share(cli) -> None:
    half = json.loads(cli("fit", LLAMA, "--gpu", "h100", "--engine", "vllm", "--gpu-memory-utilization", "0.5",
                          "--json").stdout)["results"][0]
    assert half["capacity_bytes"] == 40 * 2**30
    assert "50%" in " ".join(half["memory"]["notes"])


def test_qlora_across_gpus_shards_with_zero_3_and_fsdp(cli) -> None:
    args = ("fit", "llama-3.1-70b", "--gpu", "4x4090", "--task", "qlora", "--checkpointing", "--ctx", "2048", "--json")

    def items(*extra: str) -> dict[str, int]:
        result = json.loads(cli(*args, *extra).stdout)["results"][0]
        return {item["name"]: item["bytes"] for item in result["memory"]["items"]}

    plain, zero3, fsdp = items(), items("--zero", "3"), items("--fsdp", "full_shard")
    assert zero3 == fsdp
    constants = round((70_553_706_496 - 2 * 128256 * 8192 - 1_318_912) * 0.127 / 8)
    assert zero3["weights"] == (plain["weights"] - constants) // 4 + constants, "NF4's constants stay whole"
    assert zero3["optimizer"] == plain["optimizer"] // 4


def test_when_nothing_fits_the_closest_option_is_shown(cli) -> None:
    result = cli("fit", "llama-3.1-405b", "--gpu", "4090")
    assert result.code == 1
    assert "no single change makes it fit; the closest is --gpu 8xrtx-4090" in result.stdout
    assert "still short by" in result.stdout


def _ranked(picks: list[dict], key: str) -> bool:
    """Best first by ``key``, except inside a near-tie group, which is ordered by price (then power, headroom)."""
    leaders = [picks[0]] + [pick for before, pick in itertools.pairwise(picks)
                            if pick["tie_group"] is None or pick["tie_group"] != before["tie_group"]]
    values = [pick[key] for pick in leaders if pick["tie_group"] is None]
    return values == sorted(values, reverse=True)


def test_recommend_ranks_gpus_that_fit(cli) -> None:
    data = json.loads(cli("recommend", LLAMA, "--ctx", "8192", "--json").stdout)
    picks = data["picks"]
    assert picks and all(pick["fits"] and pick["speed"] and pick["speed_if_it_fit"] is None for pick in picks)
    assert _ranked(picks, "throughput")
    assert data["tie_break"] == "price, then power, then memory headroom" and 0 < data["error"] < 0.2


def test_recommend_within_a_budget_only_priced_cards(cli) -> None:
    data = json.loads(cli("recommend", LLAMA, "--budget", "2000", "--prefer", "cost", "--json").stdout)
    assert data["picks"]
    assert all(pick["price_usd"] is not None and pick["price_usd"] <= 2000 for pick in data["picks"])
    assert _ranked(data["picks"], "per_dollar")


BASE = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text())
needs_transformers = pytest.mark.skipif(not transformers_available(), reason="needs transformers and torch")
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
NEOX = {"model_type": "gpt_neox", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
        "num_attention_heads": 4, "intermediate_size": 256}


class Config:
    """A config.json the test writes to a temporary folder and passes in place of this marker."""

    def __init__(self, data: object) -> None:
        self.data = data


@pytest.mark.parametrize("args, message", [
    (("fit", "llama-9000b", "--gpu", "4090"), "error: unknown model 'llama-9000b'"),
    (("fit", LLAMA, "--gpu", "rtx 4009"), "error: unknown GPU 'rtx 4009'"),
    (("fit", LLAMA, "--gpu", "4090", "--batch", "0"), "error: --batch must be a positive whole number"),
    (("fit", LLAMA, "--gpu", "4090", "--ctx", "-5"), "error: --ctx must be a positive whole number"),
    (("fit", LLAMA, "--gpu", "4090", "--quant", "int3"), "error: unknown quantization 'int3'"),
    (("fit", str(CONFIGS / "broken.json"), "--gpu", "4090"), "error: "),
    (("fit", str(CONFIGS / "missing_field.json"), "--gpu", "4090"), "lacks the field 'num_hidden_layers'"),
    (("fit", "/nonexistent/config.json", "--gpu", "4090"), "error: no such file"),
    (("fit", str(CONFIGS.parent / "not_a_model.gguf"), "--gpu", "4090"), "not a GGUF file"),
    (("fit", "/nonexistent/model.gguf", "--gpu", "4090"), "error: "),
    (("fit", Config({**BASE, "hidden_size": "big"}), "--gpu", "4090"),
     "the field 'hidden_size' must be a positive whole number, got \"big\""),
    (("fit", Config({**BASE, "num_attention_heads": 0}), "--gpu", "4090"),
     "the field 'num_attention_heads' must be a positive whole number, got 0"),
    (("fit", Config({**BASE, "num_hidden_layers": -32}), "--gpu", "4090"), "'num_hidden_layers' must be a positive"),
    (("fit", Config({**BASE, "num_key_value_heads": 0}), "--gpu", "4090"), "'num_key_value_heads' must be a positive"),
    (("fit", Config({**BASE, "num_hidden_layers": 32.5}), "--gpu", "4090"), "got 32.5"),
    (("fit", Config([1, 2]), "--gpu", "4090"), "is not a config.json object"),
    (("fit", Config({"model_type": "mamba", "hidden_size": -1, "num_hidden_layers": 2, "vocab_size": 100}),
      "--gpu", "4090"), "the field 'hidden_size' must be a positive whole number, got -1"),
    pytest.param(("fit", Config({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100,
                                 "state_size": -3}), "--gpu", "4090"),
                 "transformers cannot build this mamba model (RuntimeError",
                 marks=[needs_transformers, pytest.mark.slow]),
    (("fit", Config({**NEOX, "num_attention_heads": 0}), "--gpu", "4090"), "'num_attention_heads' must be a positive"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "lora", "--lora-targets", "qproj"),
     "error: unknown LoRA target module 'qproj'; did you mean q_proj"),
    pytest.param(("fit", "resnet-50", "--gpu", "4090", "--task", "lora"), "has none of the default LoRA targets",
                 marks=[needs_torch, pytest.mark.slow]),
    (("fit", LLAMA, "--gpu", "5xH100 SXM", "--engine", "vllm"),
     "error: vLLM cannot split llama-3.1-8b's 32 attention heads and 8 KV heads across 5 GPUs"),
    (("fit", LLAMA, "--gpu", "4090", "--engine", "vllm", "--gpu-memory-utilization", "2"),
     "error: --gpu-memory-utilization must be within 0.05..1"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--precision", "fp16"), "error: unknown precision 'fp16'"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--fp32", "--precision", "bf16"),
     "error: --fp32 and --precision bf16 contradict each other"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--checkpointing-mode", "partial"),
     "error: unknown checkpointing mode 'partial'"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "lora", "--no-checkpointing", "--checkpointing-mode", "selective"),
     "error: --no-checkpointing and --checkpointing-mode selective contradict each other"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--attention", "flash3"), "error: unknown attention 'flash3'"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "lora", "--loss", "liger"), "error: unknown loss 'liger'"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--offload", "nvme"), "error: unknown offload 'nvme'"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--cuda-context", "-1"),
     "error: --cuda-context must be within 0..64 GiB"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "full", "--cuda-context", "nan"),
     "error: --cuda-context must be within 0..64 GiB"),
    (("recommend", LLAMA, "--budget", "-1"), "error: --budget must be positive"),
    (("recommend", LLAMA, "--prefer", "vibes"), "error: unknown preference 'vibes'"),
    (("recommend", LLAMA, "--max-gpus", "0"), "error: --max-gpus must be at least 1, got 0"),
    (("recommend", LLAMA, "--max-gpus", "-1"), "error: --max-gpus must be at least 1, got -1"),
    (("recommend", LLAMA, "--top", "-1"), "error: --top must be at least 1, got -1"),
])
def test_bad_input_is_one_error_line_a_hint_and_exit_2(cli, tmp_path, args, message) -> None:
    written = []
    for arg in args:
        if isinstance(arg, Config):
            path = tmp_path / "config.json"
            path.write_text(json.dumps(arg.data))
            arg = str(path)
        written.append(arg)
    result = cli(*written)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    hints = [line for line in result.stderr.splitlines() if line.startswith("hint: ")]
    assert len(hints) == 1 and len(hints[0]) > len("hint: "), result.stderr


def test_fsdp_and_lora_targets(cli) -> None:
    sharded = json.loads(cli("fit", LLAMA, "--gpu", "4xa100-80g", "--task", "full", "--fsdp", "full_shard",
                             "--json").stdout)
    zero3 = json.loads(cli("fit", LLAMA, "--gpu", "4xa100-80g", "--task", "full", "--zero", "3", "--json").stdout)
    assert sharded["results"][0]["memory"] == zero3["results"][0]["memory"]
    two = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--task", "lora", "--lora-targets", "q_proj,v_proj",
                         "--json").stdout)
    adapters = next(i for i in two["results"][0]["memory"]["items"] if i["name"] == "lora_adapters")
    assert adapters["bytes"] == 32 * 16 * ((4096 + 4096) + (4096 + 1024)) * 8
    bad = cli("fit", LLAMA, "--gpu", "4090", "--task", "full", "--fsdp", "full")
    assert bad.code == 2 and "unknown FSDP strategy 'full'; did you mean full_shard" in bad.stderr


def test_llama_cpp_is_offered_gguf_types_not_fp8(cli) -> None:
    result = cli("fit", LLAMA, "--engine", "llama.cpp", "--gpu", "4090", "--ctx", "32768", "--json")
    offered = [change["change"] for change in json.loads(result.stdout)["results"][0]["changes"]]
    assert offered and all(text.startswith("--quant q") for text in offered), offered


def test_a_kv_format_the_engine_cannot_run_is_refused_by_fit_and_recommend(cli) -> None:
    """llama.cpp's parser stops on --cache-type-k fp8 and vLLM's on --kv-cache-dtype q4_0: a real run refuses them,
    so fit and recommend do (recommend used to answer "no GPU fits" instead of the reason)."""
    for engine, kv in (("llama.cpp", "fp8"), ("vllm", "q4_0")):
        for command in (("fit", LLAMA, "--gpu", "rtx-4090"), ("recommend", LLAMA)):
            result = cli(*command, "--engine", engine, "--kv", kv)
            lines = result.stderr.strip().splitlines()
            assert result.code == 2 and f"has no {kv} KV cache" in lines[0], result.stderr
            assert lines[0].startswith("error: ") and lines[1].startswith("hint: ") and len(lines) == 2


def test_max_ctx_puts_its_answer_first_and_exits_0_even_where_the_given_ctx_does_not_fit(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "4090", "--ctx", "131072", "--max-ctx")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("longest context that fits on RTX 4090: ")
    assert lines[1] == "at the given --ctx 131,072:"
    assert any(line.startswith("does not fit on RTX 4090") for line in lines)
    data = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--ctx", "131072", "--max-ctx", "--json").stdout)
    assert data["results"][0]["max_ctx"] > 8192 and data["results"][0]["fits"] is False


def test_max_batch_without_an_answer_exits_1(cli) -> None:
    result = cli("fit", "llama-3.1-70b", "--gpu", "4090", "--max-batch")
    assert result.code == 1
    assert result.stdout.splitlines()[0] == "largest batch on RTX 4090: none fits, even at 1"


def test_a_job_that_does_not_fit_shows_speed_only_as_if_it_fit(cli) -> None:
    result = cli("fit", "llama-3.1-70b", "--gpu", "4090")
    assert result.code == 1
    assert "speed if it fit (hypothetical: it does not fit): decode" in result.stdout
    assert not any(line.startswith("speed:") for line in result.stdout.splitlines())
    data = json.loads(cli("fit", "llama-3.1-70b", "--gpu", "4090", "--json").stdout)["results"][0]
    assert data["speed"] is None and data["speed_if_it_fit"]["decode_tok_s"] > 0


def test_a_context_stretched_by_rope_scaling_is_a_note(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "b200", "--ctx", "200000")
    assert result.code == 0, result.stderr
    assert "note: --ctx 200,000 is beyond llama-3.1-8b's max_position_embeddings (131,072)" in result.stdout
    assert "RoPE scaling (llama3, factor 8 over 8,192 trained tokens)" in result.stdout


def test_the_default_context_is_capped_at_the_models_maximum(cli) -> None:
    data = json.loads(cli("fit", "bert-base-uncased", "--gpu", "4090", "--json").stdout)
    assert data["job"]["context"] == 512


def test_qlora_and_lora_checkpoint_by_default_as_their_recipes_do(cli) -> None:
    def job(*extra: str) -> tuple[bool, list[str]]:
        data = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--ctx", "2048", *extra, "--json").stdout)
        return data["job"]["checkpointing"], data["results"][0]["memory"]["notes"]

    on, notes = job("--task", "qlora")
    assert on and "prepare_model_for_kbit_training" in notes[0]
    assert job("--task", "lora")[0] is True
    off, notes = job("--task", "qlora", "--no-checkpointing")
    assert off is False and "by --no-checkpointing" in notes[0]
    assert job("--task", "full")[0] is False
    text = cli("fit", LLAMA, "--gpu", "4090", "--task", "qlora").stdout
    assert "note: checkpointing on, the qlora recipe's default" in text


def test_recommend_says_which_setups_it_cannot_tell_apart_and_that_the_engine_is_the_limit(cli) -> None:
    result = cli("recommend", "qwen2.5-32b", "--quant", "int4", "--top", "5")
    assert result.code == 0, result.stderr
    assert "have predictions whose +-6% bands (the calibrated median error) overlap the first's: ordered by price, " \
           "then power, then memory headroom" in result.stdout
    assert "note: transformers is the limit, not the GPU" in result.stdout
    data = json.loads(cli("recommend", "qwen2.5-32b", "--quant", "int4", "--top", "5", "--json").stdout)
    assert data["ties"][0]["from"] == 1 and data["picks"][0]["tie_group"] == 1
    assert "transformers is the limit" in data["engine_limit"]


def test_an_ambiguous_gpu_name_says_what_it_assumed(cli, monkeypatch) -> None:
    import gpufly.catalog
    from gpufly.catalog.lookup import Catalog

    real = gpufly.catalog.default_catalog()
    sxm, pcie = real.get("a100 80gb sxm"), real.get("a100 80gb pcie")
    catalog = Catalog([replace(sxm, default_for=("a100",)), pcie])
    monkeypatch.setattr(gpufly.catalog, "default_catalog", lambda: catalog)
    result = cli("fit", LLAMA, "--gpu", "a100")
    assert result.code == 0, result.stderr
    assert result.stderr.startswith("note: assuming A100 80GB SXM") and "A100 80GB PCIe" in result.stderr
    data = json.loads(cli("fit", LLAMA, "--gpu", "a100", "--json").stdout)
    assert data["results"][0]["assumed"].startswith("assuming A100 80GB SXM")
    exact = json.loads(cli("fit", LLAMA, "--gpu", "a100 80gb pcie", "--json").stdout)
    assert exact["results"][0]["assumed"] is None


def test_a_hugging_face_repo_id_is_read_from_the_local_cache(cli, monkeypatch, tmp_path) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    missing = cli("fit", "mistralai/Mistral-Nemo-Instruct-2407", "--gpu", "4090")
    assert missing.code == 2
    assert "is neither a preset nor a local file" in missing.stderr
    assert "huggingface-cli download mistralai/Mistral-Nemo-Instruct-2407 config.json" in missing.stderr
    assert "https://huggingface.co/mistralai/Mistral-Nemo-Instruct-2407/raw/main/config.json" in missing.stderr
    repo = tmp_path / "models--acme--tiny-llama"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (snapshot / "config.json").write_text(json.dumps(BASE))
    found = json.loads(cli("fit", "acme/tiny-llama", "--gpu", "4090", "--json").stdout)
    assert found["model"]["params"] == 8030261248 and found["model"]["source"] == "hf-cache:acme/tiny-llama"


def test_fit_prints_each_number_with_its_80_percent_range_and_basis(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "a100-sxm4-80gb", "--quant", "q4_k_m")
    assert result.code == 0, result.stderr
    assert re.search(r"decode [\d,]+ tok/s \([\d,.]+-[\d,.]+, 80% range\)", result.stdout)
    assert re.search(r"total .*; [\d.]+-[\d.]+ GiB, 80% range", result.stdout)
    assert re.search(r"range: \d+ fit rows, llama.cpp decode, 1 GPU", result.stdout)


def test_fit_json_gives_value_low_high_coverage_and_basis(cli) -> None:
    data = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--json").stdout)
    decode = data["results"][0]["speed_ranges"]["decode_tok_s"]
    assert decode["low"] < decode["value"] < decode["high"] and decode["coverage"] == 0.8
    assert {"rows", "group", "widened", "widened_for", "text"} <= set(decode["basis"])


def test_a_job_that_does_not_fit_labels_its_ranged_speed_hypothetical(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "rtx 3060", "--task", "full", "--ctx", "2048")
    assert result.code == 1
    assert re.search(r"speed if it fit \(hypothetical: it does not fit\): .*80% range", result.stdout)


def test_recommend_shows_each_speed_with_its_range(cli) -> None:
    result = cli("recommend", LLAMA, "--engine", "vllm", "--top", "3")
    assert result.code == 0, result.stderr
    assert re.search(r"[\d,]+ tok/s \([\d,.]+-[\d,.]+, 80% range\)", result.stdout)


def test_calibrate_narrows_the_speed_ranges_and_says_by_how_much(cli, tmp_path) -> None:
    from gpufly.estimate.calibrate import TYPICAL_COPY_SHARE, TYPICAL_GEMM_SHARE
    from tests.estimate.test_calibrate import gpu_run

    run = gpu_run(TYPICAL_GEMM_SHARE * 209.5e12, TYPICAL_COPY_SHARE * 1792e9)
    run["device"].update(name="NVIDIA GeForce RTX 5090", catalog_id="rtx-5090")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(run))
    args = ("fit", LLAMA, "--gpu", "5090", "--engine", "vllm")
    datasheet = json.loads(cli(*args, "--json").stdout)["results"][0]["speed_ranges"]["decode_tok_s"]
    assert "no fit rows on Blackwell GPUs" in datasheet["basis"]["widened_for"]
    result = json.loads(cli(*args, "--json", "--calibrate", str(path)).stdout)["results"][0]
    decode = result["calibration"]["decode_tok_s"]
    assert decode["datasheet_low"] < decode["low"] and decode["high"] < decode["datasheet_high"]
    assert 0 < decode["narrower_by"] < 1
    assert result["speed_ranges"]["decode_tok_s"]["basis"]["narrowed"]
    text = cli(*args, "--calibrate", str(path)).stdout
    assert re.search(r"calibrated range: decode [\d.,]+-[\d.,]+ tok/s \(datasheet [\d.,]+-[\d.,]+\): \d+% narrower",
                     text)


def test_fit_across_nodes_splits_the_step_and_finds_where_nodes_stop_paying(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "8xH100", "--task", "full", "--zero", "3", "--nodes", "2",
                 "--internode", "eth-100")
    assert result.code == 0, result.stderr
    out = result.stdout
    assert "fits on 2 nodes of 8x H100 SXM" in out
    assert "Training step" in out and "data-parallel communication (exposed) [comm]" in out
    assert "--nics 1: one Ethernet NIC per node" in out, "the default taken is said"
    assert "adding nodes stops paying at 2 nodes" in out
    assert "no fit rows over a network without RDMA" in out, "the range says it is outside the calibrated region"


def test_fit_across_nodes_json_carries_the_step_and_the_scaling(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "8xH100", "--task", "full", "--nodes", "4", "--tp", "8", "--pp", "2",
                 "--global-batch", "64", "--json")
    assert result.code == 0, result.stderr
    verdict = json.loads(result.stdout)["results"][0]
    assert verdict["nodes"] == 4
    parts = {part["name"]: part for part in verdict["speed"]["step"]}
    assert {"compute", "tensor-parallel all-reduce", "pipeline bubble", "pipeline sends"} <= set(parts)
    assert parts["tensor-parallel all-reduce"]["communication"] is True
    assert verdict["speed"]["communication_s"] > 0 and verdict["speed"]["step_s"] > verdict["speed"]["communication_s"]
    scaling = verdict["scaling"]
    assert [p["nodes"] for p in scaling["points"]][:2] == [2, 4] and scaling["threshold"] == 0.5
    assert verdict["speed_ranges"]["train_tokens_s"]["basis"]["widened"] is True
    assert verdict["links"]["intra"]["kind"] == "nvlink" and verdict["links"]["inter"]["hop"] == "rdma"


def test_fit_tensor_parallel_decode_shows_the_all_reduce_and_the_link(cli) -> None:
    pcie = cli("fit", LLAMA, "--gpu", "4xA100-PCIe-80GB", "--engine", "vllm")
    assert pcie.code == 0, pcie.stderr
    assert "--link pcie: the A100 80GB PCIe's default" in pcie.stdout
    assert "tensor-parallel all-reduce [comm]" in pcie.stdout and "PCIe 4.0 x16" in pcie.stdout
    assert "no fit rows for tensor parallelism over PCIe" in pcie.stdout
    bridged = cli("fit", LLAMA, "--gpu", "2xA100-PCIe-80GB", "--engine", "vllm", "--link", "nvlink", "--json")
    step = json.loads(bridged.stdout)["results"][0]["speed"]["step"]
    assert any("NVLink" in part["note"] for part in step)


@pytest.mark.parametrize(("args", "message"), [
    (("--nodes", "0"), "--nodes must be a positive whole number"),
    (("--task", "full", "--tp", "3"), "does not divide the 8 GPUs"),
    (("--task", "full", "--nodes", "2", "--internode", "ib-nd"), "did you mean"),
    (("--link", "nvlnk"), "did you mean nvlink"),
    (("--nodes", "2"), "not for transformers"),
    (("--task", "full", "--nodes", "2", "--global-batch", "100"), "whole number of micro-batches"),
])
def test_fit_refuses_multi_node_layouts_a_run_would_refuse(cli, args, message) -> None:
    result = cli("fit", LLAMA, "--gpu", "8xH100", *args)
    assert result.code == 2
    assert message in result.stderr and "hint:" in result.stderr and "Traceback" not in result.stderr


def test_fit_says_which_scale_options_one_node_ignores(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "8xH100", "--task", "full", "--zero", "3", "--internode", "ib-hdr")
    assert result.code == 0, result.stderr
    assert "--internode ib-hdr joins nodes; one node does not use it (ignored)" in result.stderr + result.stdout


def test_recommend_across_nodes_counts_every_gpu(cli) -> None:
    data = json.loads(cli("recommend", LLAMA, "--task", "full", "--nodes", "2", "--top", "3", "--json").stdout)
    pick = data["picks"][0]
    assert pick["nodes"] == 2 and data["job"]["nodes"] == 2


def test_fit_with_sglang_prints_a_range_labelled_outside_the_calibrated_region(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "H100", "--engine", "sglang", "--json")
    assert result.code == 0, result.stderr
    verdict = json.loads(result.stdout)["results"][0]
    assert verdict["speed"]["decode_tok_s"] > 0
    assert "no fit rows for sglang" in json.dumps(verdict)
    text = cli("fit", LLAMA, "--gpu", "H100", "--engine", "sglang")
    assert text.code == 0, text.stderr
    assert "80% range" in text.stdout and "no fit rows for sglang" in text.stdout
    assert "SGLang holds its weights and KV cache pool in 88%" in text.stdout + text.stderr


@pytest.mark.parametrize(("engine", "quant", "able"), [("exllamav2", "q4_k_m", "llama.cpp, ollama"),
                                                       ("sglang", "exl2", "exllamav2")])
def test_fit_refuses_a_format_the_engine_cannot_run(cli, engine, quant, able) -> None:
    result = cli("fit", LLAMA, "--gpu", "4090", "--engine", engine, "--quant", quant)
    assert result.code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "does not run" in errors[0]
    assert "hint: engines that run" in result.stderr and able in result.stderr
    assert "Traceback" not in result.stderr


def test_fit_with_ollama_takes_ollamas_defaults(cli) -> None:
    data = json.loads(cli("fit", LLAMA, "--gpu", "4090", "--engine", "ollama", "--json").stdout)
    job = data["results"][0]["job"] if "job" in data["results"][0] else data["job"]
    assert job["quant"] == "q4_k_m" and job["context"] == 32768 and job["flash_attention"] is False
    small = json.loads(cli("fit", LLAMA, "--gpu", "rtx 3060", "--engine", "ollama", "--json").stdout)
    assert (small["results"][0].get("job") or small["job"])["context"] == 4096


def test_training_recipes_are_options_and_items(cli) -> None:
    def items(*extra: str) -> dict[str, int]:
        data = json.loads(cli("fit", LLAMA, "--gpu", "h100 sxm", "--task", "full", "--ctx", "2048", *extra,
                              "--json").stdout)
        memory = data["results"][0]["memory"]
        return {item["name"]: item["bytes"] for item in memory["items"]} | {"host": memory["host_bytes"]}

    mixed, bf16 = items(), items("--precision", "bf16")
    assert bf16["optimizer"] == mixed["optimizer"] // 3 and bf16["weights"] == mixed["weights"]
    assert items("--optimizer-in-backward")["gradients"] == 2 * 128256 * 4096
    offloaded = items("--offload", "optimizer")
    assert offloaded["optimizer"] == 0 and offloaded["host"] > mixed["optimizer"]
    assert items("--cuda-context", "1.25")["runtime"] == round(1.25 * 2**30)
    assert items("--attention", "eager")["activations"] > items("--attention", "sdpa")["activations"]
    assert items("--loss", "fused")["activations"] == items()["activations"] - 14 * 2048 * 128256
    text = cli("fit", LLAMA, "--gpu", "h100 sxm", "--task", "full", "--offload", "optimizer").stdout
    assert "host memory for --offload optimizer" in text


def test_recommend_says_it_assumed_zero_3_and_skips_gpus_the_engine_refuses(cli) -> None:
    training = cli("recommend", "qwen2.5-7b", "--task", "full", "--precision", "bf16", "--json")
    document = json.loads(training.stdout)
    assert document["assumed"] and "ZeRO-3" in document["assumed"][0]
    served = json.loads(cli("recommend", "llama-3.2-3b", "--engine", "vllm", "--json", "--top", "400").stdout)
    assert served["picks"] and not any(pick["gpu"].startswith(("v100", "t4")) for pick in served["picks"]), \
        "vLLM refuses bf16 below compute capability 8.0"


def test_scaling_over_nodes_gives_ranges_and_labels_what_does_not_fit(cli) -> None:
    args = ("fit", "llama-3.1-70b", "--task", "full", "--gpu", "8xh100-sxm", "--nodes", "2", "--tp", "8", "--pp",
            "2", "--global-batch", "64")
    text = cli(*args).stdout
    assert "* hypothetical: the setup does not fit" in text and "if it fit: adding nodes" in text
    point = json.loads(cli(*args, "--json").stdout)["results"][0]["scaling"]["points"][0]
    assert point["hypothetical"] is not point["fits"]
    assert point["samples_s_low"] < point["samples_s"] < point["samples_s_high"]


def test_two_systems_on_a_chip_in_one_node_are_refused(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "2xm3-ultra", "--task", "lora")
    assert result.code == 2 and "is a system on a chip, one GPU per machine" in result.stderr
    assert "--nodes 2" in result.stderr and "Traceback" not in result.stderr
    picks = json.loads(cli("recommend", LLAMA, "--json", "--top", "400").stdout)["picks"]
    assert not any(pick["gpu"].startswith("m3") and pick["gpus"] > 1 for pick in picks)


def test_training_on_apple_silicon_says_its_runtime_figures_are_cuda_stand_ins(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "m3-ultra", "--task", "lora")
    assert "on Apple silicon PyTorch runs on MPS: there is no CUDA context" in result.stdout + result.stderr


def test_a_cnn_has_no_context_and_no_kv_cache(cli) -> None:
    text = cli("fit", "resnet-50", "--gpu", "4090").stdout
    assert "ResNet-50" in text and "ctx" not in text.splitlines()[0] and "kv_cache" not in text
    document = json.loads(cli("fit", "resnet-50", "--gpu", "4090", "--json").stdout)
    assert "kv_cache" not in {item["name"] for item in document["results"][0]["memory"]["items"]}


def test_an_inference_engine_named_for_training_sets_nothing(cli) -> None:
    result = cli("fit", LLAMA, "--gpu", "4090", "--task", "lora", "--engine", "ollama", "--json")
    document = json.loads(result.stdout)
    job = document["results"][0].get("job") or document["job"]
    assert job["context"] == 4096 and job["engine"] == "transformers", "Ollama's context default is for serving"
    assert "--engine ollama serves inference" in result.stderr


def test_fit_prefills_the_prompt_not_the_whole_context(cli) -> None:
    whole = json.loads(cli("fit", "qwen2.5-7b", "--gpu", "4090", "--ctx", "8192", "--json").stdout)
    short = json.loads(cli("fit", "qwen2.5-7b", "--gpu", "4090", "--ctx", "8192", "--prompt", "1024",
                           "--json").stdout)

    def activations(document: dict) -> int:
        return next(item["bytes"] for item in document["results"][0]["memory"]["items"]
                    if item["name"] == "activations")

    assert short["job"]["prompt"] == 1024 and activations(short) < activations(whole) / 4


def test_decode_over_a_batch_says_it_is_the_batchs_total_and_per_sequence(cli) -> None:
    text = " ".join(cli("fit", LLAMA, "--gpu", "h100 sxm", "--engine", "vllm", "--batch", "8").stdout.split())
    assert "over the batch of 8 (" in text and "tok/s per sequence)" in text, text
    assert "over the batch" not in cli("fit", LLAMA, "--gpu", "h100 sxm", "--engine", "vllm").stdout
