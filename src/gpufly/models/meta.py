"""Exact parameter counts for any architecture transformers knows, built on the meta device.

The meta device gives every tensor a shape and no storage, so a 405B model "loads" in seconds and
no memory. Used when transformers and torch are installed; otherwise gpufly counts in closed form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError

if TYPE_CHECKING:
    from torch import nn

_GATE_FREE_MLP = {"dense_h_to_4h", "fc1", "c_fc", "fc_in", "up_proj"}
"""Linear layers that feed an MLP's activation: with no gate layer beside them, the MLP is not gated."""


@dataclass(frozen=True)
class MetaBuild:
    """What a meta-device build tells: the parameter count and the linear layers LoRA can adapt."""

    params: int
    linear_shapes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """(in_features, out_features, count) per layer name, where every layer of that name agrees."""
    linear_params: dict[str, int] = field(default_factory=dict)

    @property
    def gated_mlp(self) -> bool | None:
        """Whether the MLP has a gate projection (gate_proj, gate_up_proj; a bare ``gate`` is an MoE
        router), False for an up projection without one, None when the layer names do not say."""
        leaves = {name.rsplit(".", 1)[-1] for name in self.linear_params}
        if any("gate" in leaf and leaf != "gate" for leaf in leaves):
            return True
        return False if leaves & _GATE_FREE_MLP else None


def transformers_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("transformers", "torch"))


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _layer_name(qualified: str) -> str:
    """The name after the last layer index: ``model.layers.3.self_attn.q_proj`` -> ``self_attn.q_proj``,
    so that layers of one kind group together and LoRA targets match its end."""
    parts = qualified.split(".")
    indices = [i for i, part in enumerate(parts) if part.isdigit()]
    return ".".join(parts[indices[-1] + 1:]) if indices and indices[-1] < len(parts) - 1 else qualified


def _linear_layers(model: nn.Module) -> tuple[dict[str, tuple[int, int, int]], dict[str, int]]:
    """Linear layers by name (nn.Linear, and transformers' Conv1D, which stores its weight as (in, out))."""
    from torch import nn

    shapes: dict[str, tuple[int, int, int]] = {}
    params: dict[str, int] = {}
    mixed: set[str] = set()
    for qualified, layer in model.named_modules():
        if isinstance(layer, nn.Linear):
            rows, cols = layer.in_features, layer.out_features
        elif type(layer).__name__ == "Conv1D" and getattr(layer, "weight", None) is not None:
            rows, cols = layer.weight.shape
        else:
            continue
        name = _layer_name(qualified)
        seen = shapes.get(name, (rows, cols, 0))
        if seen[:2] != (rows, cols):
            mixed.add(name)
        shapes[name] = (seen[0], seen[1], seen[2] + 1)
        params[name] = params.get(name, 0) + sum(p.numel() for p in layer.parameters(recurse=False))
    return {name: shape for name, shape in shapes.items() if name not in mixed}, params


def _instantiate(config: dict[str, Any], where: str) -> nn.Module:
    """The model ``config`` describes, on the meta device; GpuflyError for whatever transformers refuses."""
    import logging

    # transformers imports torchao where it is installed, which warns about its CUDA-only kernels on a CPU build and
    # trips torch's pytree deprecation warnings: noise before a parameter count, not the user's to act on.
    for name in ("torchao", "torch.utils._pytree"):
        logging.getLogger(name).setLevel(logging.ERROR)
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
            return named[0]._from_config(hf_config)
        for auto in (transformers.AutoModelForCausalLM, transformers.AutoModel):
            try:
                return auto.from_config(hf_config)
            except ValueError:
                continue
    raise GpuflyError(f"{where}: transformers has no model class for '{model_type}'",
                      hint="use a preset, or a module:function factory that builds the model")


def build_on_meta(config: dict[str, Any], where: str) -> MetaBuild:
    """Build the model ``config`` describes with transformers on the meta device and read it.

    The class is the config's first ``architectures`` entry (the head the checkpoint ships), else
    the causal-LM or bare model class. Shared (tied) parameters are counted once, as
    ``Module.parameters()`` yields them once. Anything transformers raises on the way (a size it
    cannot build, a negative dimension) becomes one GpuflyError naming the config.
    """
    try:
        model = _instantiate(config, where)
    except GpuflyError:
        raise
    except Exception as exc:
        raise GpuflyError(f"{where}: transformers cannot build this {config.get('model_type')} model "
                          f"({_one_line(exc)})",
                          hint="check the config's sizes (each a positive whole number) against the model's "
                          "published config.json; --verbose shows the traceback") from exc
    shapes, params = _linear_layers(model)
    return MetaBuild(sum(parameter.numel() for parameter in model.parameters()), shapes, params)


def count_on_meta(config: dict[str, Any], where: str) -> int:
    """Parameters of the model ``config`` describes, built with transformers on the meta device."""
    return build_on_meta(config, where).params
