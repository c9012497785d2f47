"""benchmarks/estimate_accuracy.py reads every row it is given without crashing, and splits fit from check."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).parent.parent.parent / "benchmarks" / "estimate_accuracy.py"
HEADER = ("gpu,gpu_count,engine,model,params_b,quant,batch,prompt_tokens,gen_tokens,prefill_tok_s,decode_tok_s,"
          "vram_used_gb,source_url,notes\n")


@pytest.fixture(scope="module")
def accuracy() -> ModuleType:
    spec = importlib.util.spec_from_file_location("estimate_accuracy", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["estimate_accuracy"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("text", "value"), [("~500", 500.0), ("1,234.5", 1234.5), ("74.77 ± 0.10", 74.77),
                                             ("", None), (" 12 ", 12.0)])
def test_published_figures_read_as_numbers(accuracy, text, value) -> None:
    assert accuracy.number(text) == value


def test_a_row_that_is_not_a_number_is_skipped_and_counted(accuracy, tmp_path) -> None:
    url = "https://example.org/bench"
    (tmp_path / "llm_inference.csv").write_text(
        HEADER
        + f"RTX 4090 24GB,1,llama.cpp,Meta-Llama-3-8B,8.03,Q4_K_M,1,512,512,~5000,~120,,{url},a\n"
        + f"RTX 4090 24GB,1,llama.cpp,Meta-Llama-3-8B,8.03,Q4_K_M,1,512,512,OOM,n/a,,{url},b\n"
        + f"Some GPU,1,llama.cpp,Meta-Llama-3-8B,8.03,Q4_K_M,1,512,512,1,1,,{url},c\n")
    skipped = accuracy.Skipped()
    found = [c for c in accuracy.comparisons(tmp_path, accuracy.Lookup(), skipped)
             if not c.metric.endswith(accuracy.NAIVE) and "Meta-Llama-3-8B" in c.row and c.measured in (5000, 120)]
    assert {c.metric for c in found} == {"decode", "prefill"}
    assert any("ValueError" in why for why in skipped) and any("Some GPU" in why for why in skipped)


def test_a_model_on_a_gpu_of_a_source_lands_whole_on_one_side(accuracy) -> None:
    def row(gpu: str, model: str = "m", prompt: str = "512") -> dict[str, str]:
        return {"source_url": "https://example.org/a", "gpu": gpu, "model": model, "prompt_tokens": prompt}

    assert {accuracy.side(row(f"GPU {n}")) for n in range(30)} == {"fit", "check"}
    assert accuracy.side(row("GPU 1", prompt="512")) == accuracy.side(row(" GPU 1 ", prompt="8192"))


def test_prefill_is_also_one_line_over_one_gpu_and_several(accuracy) -> None:
    """Issue 17's prompt-processing target is one figure over both: the table prints it beside the two."""
    def made(label: str, error: float) -> object:
        return type("C", (), {"side": "check", "label": label, "engine": "llama.cpp", "error": error, "range": None})()

    found = [made("prefill", 0.05), made("prefill", 0.07), made("multi-GPU prefill", 0.5)]
    lines = {(metric, engine): (n, median) for _split, metric, engine, n, median, _p90, _inside
             in accuracy.accuracy_table(found)}
    assert lines[(accuracy.PROMPT_PROCESSING, "all")] == (3, 0.07)
    assert lines[("prefill", "all")][0] == 2 and lines[("multi-GPU prefill", "all")][0] == 1
