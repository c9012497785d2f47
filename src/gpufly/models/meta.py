"""Exact parameter counts for any architecture transformers knows, built on the meta device.

The meta device gives every tensor a shape and no storage, so a 405B model "loads" in seconds and
no memory. Used when transformers and torch are installed; otherwise gpufly counts in closed form.
"""

from __future__ import annotations

from typing import Any

from gpufly.errors import GpuflyError


def transformers_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("transformers", "torch"))


def count_on_meta(config: dict[str, Any], where: str) -> int:
    """Parameters of the model ``config`` describes, built with transformers on the meta device.

    The class is the config's first ``architectures`` entry (the head the checkpoint ships), else
    the causal-LM or bare model class. Shared (tied) parameters are counted once, as
    ``Module.parameters()`` yields them once.
    """
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    data = dict(config)
    model_type = data.pop("model_type", None)
    if model_type is None:
        raise GpuflyError(f"{where} lacks the field 'model_type'", hint="is this a Hugging Face config.json?")
    try:
        hf_config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError) as exc:
        raise GpuflyError(f"{where}: transformers does not know model_type '{model_type}' ({exc})",
                          hint="upgrade transformers, or use a preset") from exc
    named = [getattr(transformers, name) for name in config.get("architectures") or [] if hasattr(transformers, name)]
    with torch.device("meta"):
        if named:
            model = named[0]._from_config(hf_config)
        else:
            for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
                try:
                    model = auto.from_config(hf_config)
                    break
                except ValueError:
                    continue
            else:
                raise GpuflyError(f"{where}: transformers has no model class for '{model_type}'")
    return sum(parameter.numel() for parameter in model.parameters())
