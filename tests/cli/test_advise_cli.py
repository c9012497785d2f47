"""`gpufly fit` and `gpufly recommend` as a user runs them."""

from __future__ import annotations

import importlib.util
import json
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
    result = cli("fit", LLAMA, "--gpu", "rtx 3060", "--task", "full", "--ctx", "2048", "--json")
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
    assert weights["bytes"] == sum(written.values()) == data["model"]["weight_bytes"]
    assert "exact bytes from the file" in weights["note"]
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
    assert zero3["weights"] == plain["weights"] // 4
    assert zero3["optimizer"] == plain["optimizer"] // 4


def test_when_nothing_fits_the_closest_option_is_shown(cli) -> None:
    result = cli("fit", "llama-3.1-405b", "--gpu", "4090")
    assert result.code == 1
    assert "no single change makes it fit; the closest is --gpu 8xRTX4090" in result.stdout
    assert "still short by" in result.stdout


def test_recommend_ranks_gpus_that_fit(cli) -> None:
    data = json.loads(cli("recommend", LLAMA, "--ctx", "8192", "--json").stdout)
    picks = data["picks"]
    assert picks and all(pick["fits"] for pick in picks)
    speeds = [pick["throughput"] for pick in picks]
    assert speeds == sorted(speeds, reverse=True)


def test_recommend_within_a_budget_only_priced_cards(cli) -> None:
    data = json.loads(cli("recommend", LLAMA, "--budget", "2000", "--prefer", "cost", "--json").stdout)
    assert data["picks"]
    assert all(pick["price_usd"] is not None and pick["price_usd"] <= 2000 for pick in data["picks"])
    per_dollar = [pick["per_dollar"] for pick in data["picks"]]
    assert per_dollar == sorted(per_dollar, reverse=True)


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
                 "transformers cannot build this mamba model (RuntimeError", marks=needs_transformers),
    (("fit", Config({**NEOX, "num_attention_heads": 0}), "--gpu", "4090"), "'num_attention_heads' must be a positive"),
    (("fit", LLAMA, "--gpu", "4090", "--task", "lora", "--lora-targets", "qproj"),
     "error: unknown LoRA target module 'qproj'; did you mean q_proj"),
    pytest.param(("fit", "resnet-50", "--gpu", "4090", "--task", "lora"), "has none of the default LoRA targets",
                 marks=needs_torch),
    (("fit", LLAMA, "--gpu", "4090", "--engine", "vllm", "--gpu-memory-utilization", "2"),
     "error: --gpu-memory-utilization must be within 0.05..1"),
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


def test_a_kv_format_the_engine_cannot_run_is_a_note(cli) -> None:
    llama = cli("fit", LLAMA, "--gpu", "4090", "--engine", "llama.cpp", "--kv", "fp8")
    assert llama.code == 0, llama.stderr
    assert "note: llama.cpp has no fp8 KV cache" in llama.stdout and "--kv q8_0 is its nearest" in llama.stdout
    vllm = cli("fit", LLAMA, "--gpu", "4090", "--engine", "vllm", "--kv", "q4_0")
    assert vllm.code == 0 and "note: vLLM has no q4_0 KV cache" in vllm.stdout
