"""Closed-form parameter counts equal transformers' meta-device builds and the published figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.meta import count_on_meta, transformers_available
from gpufly.models.presets import PRESET_DIR, get_preset, presets
from gpufly.models.resolve import from_config, load_model

CONFIGS = Path(__file__).parent.parent / "fixtures" / "configs"
needs_transformers = pytest.mark.skipif(not transformers_available(), reason="needs transformers and torch")
# Meta builds of the largest presets take tens of seconds each; they are checked against their
# published counts instead.
LARGE = {"llama-3.1-405b", "deepseek-v3", "qwen3-235b-a22b"}


def test_llama_8b_from_its_config_json() -> None:
    spec = load_model(str(CONFIGS / "llama-3.1-8b"))
    assert spec.params == 8_030_261_248
    assert spec.layers == 32 and spec.attention.kv_heads == 8 and spec.attention.head_dim == 128


@needs_transformers
def test_llama_8b_on_the_meta_device() -> None:
    data = load_config_file(CONFIGS / "llama-3.1-8b")
    assert count_on_meta(data, "llama") == 8_030_261_248
    assert from_config(data, "l", "s", "w", exact=True).params_method == "meta device (transformers)"


def _config_presets() -> list[str]:
    return sorted(pid for pid, data in presets().items() if "config" in data)


@pytest.mark.parametrize("preset_id", _config_presets())
def test_preset_matches_its_published_count(preset_id: str) -> None:
    preset = get_preset(preset_id)
    spec = spec_from_config(preset["config"], preset["name"], "test")
    published = preset.get("published_params")
    if published is None:
        pytest.skip("no published count")
    tolerance = 0.02 if "published_params_note" in preset else 0.005
    assert spec.params == pytest.approx(published, rel=tolerance)


@needs_transformers
@pytest.mark.parametrize("preset_id", [p for p in _config_presets() if p not in LARGE])
def test_closed_form_equals_meta_device(preset_id: str) -> None:
    preset = get_preset(preset_id)
    spec = spec_from_config(preset["config"], preset["name"], "test")
    assert spec.params == count_on_meta(preset["config"], preset_id)


def test_preset_files_are_well_formed() -> None:
    ids, aliases = set(), set()
    for path in PRESET_DIR.glob("*.json"):
        data = json.loads(path.read_text())
        assert data["id"] == path.stem
        assert data["sources"] and all(url.startswith("https://") for url in data["sources"])
        assert ("config" in data) != ("factory" in data)
        ids.add(data["id"])
        for alias in data.get("aliases", []):
            assert alias.lower() not in aliases, f"alias {alias} used twice"
            aliases.add(alias.lower())


@pytest.mark.parametrize("typed, expected", [("qwen2.5-1.5b-instruct", "qwen2.5-1.5b"),
                                             ("Qwen/Qwen2.5-3B-Instruct", "qwen2.5-3b")])
def test_loose_model_names(typed: str, expected: str) -> None:
    assert get_preset(typed)["id"] == expected


def test_unknown_model_suggests() -> None:
    with pytest.raises(GpuflyError, match=r"unknown model 'qwen2.5-2b'; did you mean qwen2\.5"):
        load_model("qwen2.5-2b")


def test_config_errors_name_the_problem(tmp_path) -> None:
    with pytest.raises(GpuflyError, match="not valid JSON"):
        load_model(str(CONFIGS / "broken.json"))
    with pytest.raises(GpuflyError, match="lacks the field 'num_hidden_layers'"):
        load_model(str(CONFIGS / "missing_field.json"))
    odd = tmp_path / "config.json"
    odd.write_text('{"model_type": "mamba-9000", "hidden_size": 8}')
    with pytest.raises(GpuflyError, match="mamba-9000"):
        load_model(str(tmp_path))
