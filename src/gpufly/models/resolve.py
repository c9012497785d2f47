"""Turn what the user typed after `gpufly fit` into a ModelSpec: preset, config.json, GGUF, factory."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.models.hf_config import load_config_file, spec_from_config
from gpufly.models.presets import find_preset, get_preset
from gpufly.models.spec import ModelSpec


def _looks_like_factory(ref: str) -> bool:
    module, sep, function = ref.rpartition(":")
    return bool(sep and module and function.isidentifier() and not Path(ref).exists())


def from_config(data: dict, name: str, source: str, where: str, exact: bool = False) -> ModelSpec:
    """The spec of a config.json: counted in closed form for the families gpufly knows (the tests
    hold those counts equal to transformers' meta-device builds), and built on the meta device
    through transformers for any other architecture, or for every one when ``exact``."""
    from gpufly.models.hf_config import SUPPORTED, check_sizes
    from gpufly.models.meta import transformers_available

    check_sizes(data, where)
    if isinstance(data.get("text_config"), dict):
        check_sizes(data["text_config"], f"{where} (text_config)")
    known = data.get("model_type") in SUPPORTED or "text_config" in data
    try:
        if not known and transformers_available():
            spec = _generic(data, name, source, where)
        else:
            spec = _known(data, name, source, where, exact and transformers_available())
        stored = checkpoint_format(data)
        if stored:
            return dataclasses.replace(spec, weight_format=stored)
        unread = unread_quantization(data)
        return dataclasses.replace(spec, unread_quantization=unread) if unread else spec
    except GpuflyError:
        raise
    except (TypeError, ValueError, ZeroDivisionError, KeyError, AttributeError, IndexError) as exc:
        raise GpuflyError(f"{where}: cannot read this config.json ({type(exc).__name__}: {exc})",
                          hint="compare its fields with the model's published config.json") from exc


QUANT_METHODS = {("gptq", 4): "gptq-int4", ("awq", 4): "awq", ("gptq", 8): "int8", ("fp8", 8): "fp8",
                 ("bitsandbytes", 4): "nf4", ("bitsandbytes", 8): "int8"}
"""A quantized checkpoint's ``quantization_config`` (its ``quant_method`` and bits) -> gpufly's --quant name."""


def checkpoint_format(data: dict) -> str | None:
    """The weight format a quantized checkpoint's config.json states (``quantization_config``), which `fit` takes
    when --quant is not given; None for a 16-bit checkpoint or a method gpufly does not model.

    >>> checkpoint_format({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}})
    'awq'
    >>> checkpoint_format({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}})
    'nf4'
    >>> checkpoint_format({"model_type": "llama"}) is None
    True
    """
    config = data.get("quantization_config")
    if not isinstance(config, dict):
        return None
    method = str(config.get("quant_method", "")).lower()
    bits = config.get("bits")
    if method == "bitsandbytes":
        bits = 4 if config.get("load_in_4bit") else 8 if config.get("load_in_8bit") else None
    elif method == "fp8":
        bits = 8
    return QUANT_METHODS.get((method, bits)) if isinstance(bits, int) else None


def unread_quantization(data: dict) -> str | None:
    """What a config.json's ``quantization_config`` states, in words, when ``checkpoint_format`` cannot map it to
    a format (a method gpufly does not model, bits missing or not a number, a value that is not a table); None
    without one. Counted at 16 bits, such a checkpoint's weights would be 2-4x too large, and nothing would say so.

    >>> unread_quantization({"quantization_config": {"quant_method": "hqq", "nbits": 4}})
    "quant_method 'hqq', bits not stated"
    >>> unread_quantization({"quantization_config": "gptq"})
    "a str, not a table: 'gptq'"
    >>> unread_quantization({"model_type": "llama"}) is None
    True
    """
    if "quantization_config" not in data or data["quantization_config"] is None:
        return None
    config = data["quantization_config"]
    if not isinstance(config, dict):
        return f"a {type(config).__name__}, not a table: {config!r:.40}"
    method = config.get("quant_method", "not stated")
    bits = config.get("bits", "not stated")
    return f"quant_method {method!r}, bits {bits}" if "bits" in config else f"quant_method {method!r}, bits not stated"


def _generic(data: dict, name: str, source: str, where: str) -> ModelSpec:
    """An architecture without a closed form: the meta-device build's count and linear layers, over
    the layout read from the fields most decoder configs share."""
    from gpufly.models.hf_config import spec_from_generic_config
    from gpufly.models.meta import build_on_meta

    built = build_on_meta(data, where)
    spec = spec_from_generic_config(data, name=name, source=source, where=where, gated=built.gated_mlp)
    linears: dict[str, Any] = ({"linear_shapes": built.linear_shapes, "linear_params": built.linear_params}
                               if built.linear_params else {})
    return dataclasses.replace(spec, params=built.params, active_params=None,
                               params_method="meta device (transformers)", **linears)


def _known(data: dict, name: str, source: str, where: str, exact: bool) -> ModelSpec:
    from gpufly.models.meta import count_on_meta

    spec = spec_from_config(data, name=name, source=source, where=where)
    if exact:
        params = count_on_meta(data, where)
        active = spec.active_params + (params - spec.params) if spec.active_params is not None else None
        spec = dataclasses.replace(spec, params=params, active_params=active,
                                   params_method="meta device (transformers)")
    return spec


HF_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
"""A Hugging Face repo id, owner/name (huggingface_hub's validate_repo_id allows letters, digits, '-', '_', '.');
one that names no local file is looked up in the Hugging Face cache."""


def cached_hf_config(repo_id: str) -> Path | None:
    """The config.json of ``repo_id`` in the local Hugging Face cache (huggingface_hub.try_to_load_from_cache, no
    network), or None where huggingface_hub is not installed or the file was never downloaded."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo_id, "config.json")
    return Path(found) if isinstance(found, str) else None


def load_model(ref: str, exact: bool = False) -> ModelSpec:
    """Resolve ``ref``: a .gguf file, a config.json or folder, module:function, a preset name, or a Hugging Face
    repo id whose config.json is in the local Hugging Face cache.

    ``exact`` asks for a meta-device count through transformers for config-based models (slower
    to start; presets are checked against their published counts by the tests instead).
    """
    path = Path(ref).expanduser()
    if ref.lower().endswith(".gguf"):
        from gpufly.models.gguf_file import read_gguf

        return read_gguf(path)
    if path.exists():
        data = load_config_file(path)
        return from_config(data, name=path.stem if path.is_file() else path.name, source=f"config:{path}",
                           where=str(path), exact=exact)
    if find_preset(ref) is None and _looks_like_factory(ref):
        from gpufly.models.torch_factory import spec_from_factory

        return spec_from_factory(ref)
    if find_preset(ref) is None and HF_REPO_ID.fullmatch(ref) and not ref.endswith(".json"):
        cached = cached_hf_config(ref)
        if cached is None:
            raise GpuflyError(f"'{ref}' is neither a preset nor a local file, and its config.json is not in the "
                              "Hugging Face cache (gpufly reads no network)",
                              hint=f"fetch it with `huggingface-cli download {ref} config.json` (then run this again), "
                              f"or save https://huggingface.co/{ref}/raw/main/config.json and give its path")
        return from_config(load_config_file(cached), name=ref.rpartition("/")[2], source=f"hf-cache:{ref}",
                           where=f"{ref} (Hugging Face cache: {cached})", exact=exact)
    if ref.endswith(".json") or ("/" in ref and not find_preset(ref)):
        raise GpuflyError(f"no such file: {ref}", hint="give a config.json, a folder holding one, or a preset name")
    preset = get_preset(ref)
    sources = tuple(preset.get("sources", ()))
    if "factory" in preset:
        from gpufly.models.torch_factory import spec_from_factory

        return dataclasses.replace(spec_from_factory(preset["factory"]), name=preset["name"],
                                   source=f"preset:{preset['id']}", sources=sources)
    spec = from_config(preset["config"], name=preset["name"], source=f"preset:{preset['id']}",
                       where=f"preset {preset['id']}", exact=exact)
    return dataclasses.replace(spec, sources=sources)
