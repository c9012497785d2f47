"""Odd input across the advisor and the catalog: each is one `error:` line and one `hint:` line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
         "max_position_embeddings": 131072}


def _config(tmp_path: Path, **changes: object) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **changes}))
    return str(path)


def _one_error(result, message: str) -> None:  # type: ignore[no-untyped-def]
    lines = result.stderr.strip().splitlines()
    assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), lines
    assert message in lines[0], lines[0]


@pytest.mark.parametrize(("changes", "message"), [
    ({"num_hidden_layers": 10**30}, "'num_hidden_layers' must be at most 2,147,483,648"),
    ({"num_key_value_heads": 64}, "num_key_value_heads (64) must divide num_attention_heads (32)"),
    ({"num_key_value_heads": 5}, "num_key_value_heads (5) must divide"),
    ({"tie_word_embeddings": "yes"}, "'tie_word_embeddings' must be true or false"),
    ({"model_type": 5}, "'model_type' must be a string, got 5"),
])
def test_config_values_out_of_shape(cli, tmp_path: Path, changes: dict, message: str) -> None:
    _one_error(cli("fit", _config(tmp_path, **changes), "--gpu", "4090"), message)


def test_a_context_past_the_maximum_without_rope_scaling_is_refused(cli, tmp_path: Path) -> None:
    config = _config(tmp_path, max_position_embeddings=2048)
    _one_error(cli("fit", config, "--gpu", "t4", "--ctx", "100000"),
               "--ctx 100,000 is beyond config's maximum context of 2,048 tokens (max_position_embeddings)")
    _one_error(cli("recommend", config, "--ctx", "4096"), "beyond config's maximum context of 2,048")


def test_unreadable_json_files_have_hints(cli, tmp_path: Path) -> None:
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    _one_error(cli("fit", str(binary), "--gpu", "4090"), "is not a text file")
    folder = tmp_path / "folder.json"
    folder.mkdir()
    _one_error(cli("report", "--profile", str(folder)), "is a folder, not a JSON file")


def test_a_factory_that_is_not_a_function_has_a_hint(cli, tmp_path: Path) -> None:
    module = tmp_path / "models.py"
    module.write_text("x = 3\n")
    _one_error(cli("fit", f"{module}:x", "--gpu", "4090"), "is not a function (type int)")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    _one_error(cli("fit", f"{broken}:f", "--gpu", "4090"), "failed")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_budget_and_memory_are_refused(cli, value: str) -> None:
    _one_error(cli("recommend", "llama-3.1-8b", "--budget", value), "--budget must be a number of dollars")
    _one_error(cli("gpus", "--min-vram", value), "--min-vram must be a number of GiB")


def test_year_and_compute_capability_print_as_written(cli) -> None:
    years = cli("gpus", "--sort", "launch_year", "--vendor", "nvidia")
    assert years.code == 0 and "2,02" not in years.stdout and " 2025 " in years.stdout
    ccs = cli("gpus", "--sort", "compute_capability", "--vendor", "nvidia")
    assert ccs.code == 0 and " 12.0 " in ccs.stdout and " 9.0 " in ccs.stdout


def test_when_no_single_gpu_fits_the_catalog_view_points_at_several(cli) -> None:
    result = cli("fit", "llama-3.1-405b")
    assert "no single GPU in the catalog fits this job" in result.stdout and "gpufly recommend" in result.stdout
    small = cli("fit", "llama-3.2-1b")
    assert "no single GPU" not in small.stdout
