"""`gpufly gpus` as a user runs it: tables, JSON shape, the chart, and clean errors."""

from __future__ import annotations

import json

import pytest


def test_version_and_help(cli) -> None:
    version = cli("--version")
    assert version.code == 0 and version.stdout.strip() == "gpufly 0.1.0"
    helped = cli("--help")
    assert helped.code == 0
    assert "gpus" in helped.stdout and "report" in helped.stdout


def test_list_shows_a_table_of_every_gpu(cli, catalog) -> None:
    result = cli("gpus")
    assert result.code == 0
    assert f"{len(catalog)} GPUs" in result.stdout
    for name in ("RTX 4090", "H100 SXM", "Instinct MI300X", "M4 Max"):
        assert name in result.stdout


def test_at_80_columns_every_name_is_whole_and_the_ranked_column_is_kept(cli, catalog) -> None:
    result = cli("gpus", env={"COLUMNS": "80"})
    assert result.code == 0
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = {line.split("  ")[0].strip() for line in lines}
    assert {spec.name for spec in catalog} <= rows, "each GPU name starts a row, whole"
    assert "Not shown at this width: INT8" in " ".join(result.stdout.split())
    ranked = cli("gpus", "--sort", "tflops_per_usd", env={"COLUMNS": "80"})
    header = next(line for line in ranked.stdout.splitlines() if line.lstrip().startswith("GPU"))
    assert header.rstrip().endswith("TFLOPS/$1k") and len(header) <= 80
    assert "RTX 4090" in ranked.stdout
    int8 = cli("gpus", "--sort", "int8", env={"COLUMNS": "80"})
    assert "INT8" in next(line for line in int8.stdout.splitlines() if line.lstrip().startswith("GPU"))


def test_wide_terminals_show_every_column(cli) -> None:
    header = next(line for line in cli("gpus").stdout.splitlines() if line.lstrip().startswith("GPU"))
    assert header.split() == ["GPU", "Arch", "GiB", "GB/s", "FP32", "TF32", "FP16", "BF16", "FP8", "INT8", "W", "USD"]


def test_by_default_the_newest_architecture_comes_first_then_the_fastest(cli, catalog) -> None:
    data = json.loads(cli("gpus", "--vendor", "nvidia", "--json").stdout)
    assert data["sort"] is None and data["order"].startswith("ordered by architecture, newest first")
    by_id = {spec.id: spec for spec in catalog}
    architectures = list(dict.fromkeys(gpu["architecture"] for gpu in data["gpus"]))
    assert architectures == ["Blackwell", "Hopper", "Ada Lovelace", "Ampere", "Turing", "Volta", "Pascal"]
    hopper = [by_id[gpu["id"]].derived["peak_tflops"] for gpu in data["gpus"] if gpu["architecture"] == "Hopper"]
    assert hopper == sorted(hopper, reverse=True), "fastest first within an architecture"
    oldest = json.loads(cli("gpus", "--vendor", "nvidia", "--reverse", "--json").stdout)
    assert oldest["gpus"] == data["gpus"][::-1] and oldest["order"].endswith(", reversed")


def test_the_caption_says_the_order(cli) -> None:
    words = " ".join(cli("gpus", env={"COLUMNS": "120"}).stdout.split())
    assert "Ordered by architecture, newest first (by the year it first shipped), then dense FP16/BF16 rate" in words
    ranked = " ".join(cli("gpus", "--sort", "vram", env={"COLUMNS": "120"}).stdout.split())
    assert "ranked by memory" in ranked and "Ordered by architecture" not in ranked


def test_sort_by_pcie_lanes(cli) -> None:
    data = json.loads(cli("gpus", "--sort", "pcie_lanes", "--json").stdout)
    lanes = [gpu["pcie_lanes"] for gpu in data["gpus"] if gpu["pcie_lanes"] is not None]
    assert data["sort"] == "pcie_lanes" and lanes == sorted(lanes, reverse=True) and lanes


def test_sorted_list_ranks_best_first(cli) -> None:
    result = cli("gpus", "--sort", "vram", "--vendor", "nvidia", "--json")
    assert result.code == 0
    vram = [gpu["vram_gib"] for gpu in json.loads(result.stdout)["gpus"]]
    assert vram == sorted(vram, reverse=True)


def test_json_shape_is_stable(cli) -> None:
    data = json.loads(cli("gpus", "--has", "fp8", "--min-vram", "80", "--json").stdout)
    assert data["schema_version"] == 1
    assert data["count"] == len(data["gpus"]) > 0
    first = data["gpus"][0]
    for key in ("id", "name", "vram_gib", "memory_bandwidth_gbps", "fp8_tensor_tflops", "sources", "derived"):
        assert key in first
    assert set(first["derived"]) == {"peak_tflops", "tflops_per_usd", "tflops_per_watt", "gbps_per_usd",
                                     "vram_gib_per_usd"}
    assert all(gpu["vram_gib"] >= 80 and gpu["fp8_tensor_tflops"] for gpu in data["gpus"])


def test_derived_sort_in_json(cli) -> None:
    data = json.loads(cli("gpus", "--sort", "tflops-per-usd", "--json").stdout)
    assert data["sort"] == "tflops_per_usd"
    ratios = [gpu["derived"]["tflops_per_usd"] for gpu in data["gpus"]]
    known = [r for r in ratios if r is not None]
    assert known == sorted(known, reverse=True)
    assert ratios[: len(known)] == known, "GPUs without a price come last"


def test_show_prints_every_field_with_sources(cli) -> None:
    result = cli("gpus", "show", "rtx4090")
    assert result.code == 0
    assert "NVIDIA GeForce RTX 4090" in result.stdout
    assert "images.nvidia.com" in result.stdout
    assert "82.6 TFLOPS" in result.stdout
    assert "103.3 TFLOPS/$1k" in result.stdout, "per $1k, as the table and the ladder give it"


def test_show_json(cli) -> None:
    result = cli("gpus", "show", "a100 80gb sxm", "--json")
    data = json.loads(result.stdout)
    assert data["gpu"]["id"] == "a100-sxm4-80gb" and data["assumed"] is None
    assert data["gpu"]["launch_price_usd"] is None
    assert data["gpu"]["interconnect_gbps"] == 600 and data["gpu"]["derivations"] == {}
    assert result.stderr == ""


def test_show_says_what_it_assumed_on_stderr_and_in_json(cli) -> None:
    shown = cli("gpus", "show", "a100")
    assert shown.code == 0
    assert shown.stderr.startswith("note: assuming A100 80GB SXM; also: A100 40GB SXM")
    assert "NVIDIA A100 80GB SXM4" in shown.stdout
    data = json.loads(cli("gpus", "show", "a100", "--json").stdout)
    assert data["assumed"].startswith("assuming A100 80GB SXM; also:") and data["gpu"]["id"] == "a100-sxm4-80gb"


def test_a_name_that_covers_variants_without_a_default_asks(cli) -> None:
    result = cli("gpus", "show", "4060 ti")
    assert result.code == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0] == "error: '4060 ti' matches several GPUs: RTX 4060 Ti 16GB, RTX 4060 Ti 8GB"


def test_a_partial_name_never_shows_another_product(cli) -> None:
    assert json.loads(cli("gpus", "show", "h20", "--json").stdout)["gpu"]["id"] == "h20"
    assert json.loads(cli("gpus", "show", "RTX 4070 Ti", "--json").stdout)["gpu"]["id"] == "rtx-4070-ti"


def test_derived_rates_are_marked_in_the_table_and_explained_in_show(cli) -> None:
    table = cli("gpus", "--sort", "fp16", "--vendor", "nvidia", env={"COLUMNS": "200"})
    row = next(line for line in table.stdout.splitlines() if line.startswith(" RTX 4070 SUPER "))
    assert "≈71.1" in row
    published = next(line for line in table.stdout.splitlines() if line.startswith(" RTX 4090 "))
    assert "≈" not in published
    assert "≈ = not published; derived from the architecture's dense ops/clock/SM" in " ".join(table.stdout.split())
    shown = cli("gpus", "show", "rtx 4070 super", env={"COLUMNS": "300"})
    assert "≈71.1 TFLOPS (derived)" in shown.stdout
    assert "512 dense FLOP/clock/SM (Ada Lovelace, GeForce;" in shown.stdout
    assert "x 56 SMs x 2480 MHz = 71.1 TFLOPS" in shown.stdout


def test_json_carries_the_derivations(cli) -> None:
    data = json.loads(cli("gpus", "--has", "bf16", "--json").stdout)
    by_id = {gpu["id"]: gpu for gpu in data["gpus"]}
    assert "rtx-3060-12gb" in by_id, "--has bf16 counts a derived BF16 rate"
    derivations = by_id["rtx-3060-12gb"]["derivations"]
    assert set(derivations) >= {"fp16_tensor_tflops", "bf16_tensor_tflops"}
    assert by_id["rtx-4090"]["derivations"] == {}


def test_the_ladder_marks_derived_bars(cli, tmp_path) -> None:
    path = tmp_path / "ladder.svg"
    result = cli("gpus", "--chart", str(path), "--vendor", "nvidia", "--segment", "consumer", "--arch", "ada")
    assert result.code == 0, result.stderr
    text = path.read_text()
    assert "≈71.1" in text and "Hatched bars" in text


def test_chart_writes_a_png(cli, tmp_path) -> None:
    path = tmp_path / "ladder.png"
    result = cli("gpus", "--chart", str(path), "--sort", "bandwidth", "--vendor", "amd")
    assert result.code == 0, result.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in result.stdout


@pytest.mark.parametrize("args, message", [
    (("gpus", "show", "rtx 4009"), "error: unknown GPU 'rtx 4009'; did you mean RTX 4090"),
    (("gpus", "--sort", "tflops_per_dollar"), "error: unknown metric 'tflops_per_dollar'"),
    (("gpus", "--min-vram", "-8"), "error: --min-vram must be a number of GiB, zero or more"),
    (("gpus", "--min-vram", "lots"), "error: Invalid value for '--min-vram'"),
    (("gpus", "--vendor", "intle"), "error: unknown vendor 'intle'; did you mean intel"),
    (("gpus", "--chart", "ladder.jpg"), "error: cannot draw a chart as '.jpg'"),
    (("gpus", "--frobnicate"), "error: No such option: --frobnicate"),
    (("gpus", "--chart", "/nonexistent-dir/ladder.png", "--vendor", "apple"),
     "error: cannot write --chart /nonexistent-dir/ladder.png"),
])
def test_bad_input_is_one_error_line_and_exit_2(cli, args, message) -> None:
    result = cli(*args)
    assert result.code == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(message), result.stderr
    assert result.stdout == ""
