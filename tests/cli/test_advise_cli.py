"""`gpufly fit` and `gpufly recommend` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_fit_without_a_gpu_here_shows_the_catalog(cli) -> None:
    result = cli("fit", LLAMA, "--json")
    data = json.loads(result.stdout)
    if data.get("gpus_on_this_machine") == 0:
        ids = [row["gpu"] for row in data["catalog"]]
        assert "rtx-4090" in ids and "h100-sxm" in ids


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
    (("recommend", LLAMA, "--budget", "-1"), "error: --budget must be positive"),
    (("recommend", LLAMA, "--prefer", "vibes"), "error: unknown preference 'vibes'"),
])
def test_bad_input_is_one_error_line_and_exit_2(cli, args, message) -> None:
    result = cli(*args)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr


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
