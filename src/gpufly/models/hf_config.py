"""Read a Hugging Face config.json into a ModelSpec without transformers: closed-form counts.

Covers the decoder families gpufly ships presets for (llama, mistral, mixtral, qwen2, qwen3,
qwen3_moe, qwen2_moe, gemma2, gemma3, phi3, deepseek_v3), plus gpt2, bert and vit. The counts
follow each family's module layout in transformers; tests hold them to the publishers' figures.
With transformers installed, `models.meta` builds the model on the meta device instead, for any
architecture it knows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.jsonfile import read_json
from gpufly.models.spec import Attention, ModelSpec, MoE, RopeScaling
from gpufly.records import shown

LLAMA_STYLE = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "gemma",
               "gemma2", "gemma3_text", "phi3", "deepseek_v3", "deepseek_v2", "olmo2", "granite"}
ENCODERS = {"bert", "roberta", "vit"}
SUPPORTED = sorted(LLAMA_STYLE | ENCODERS | {"gpt2", "gemma3"})
PLAIN_MLP = {"gpt_neox", "gptj", "gpt_neo", "gpt_bigcode", "falcon", "bloom", "opt", "phi", "mpt", "codegen",
             "starcoder2", "biogpt", "xglm"}
"""Decoder families whose MLP is up, activation, down (no gate), for the generic reader."""

POSITIVE_FIELDS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
    "vocab_size", "head_dim", "n_embd", "n_layer", "n_head", "n_inner", "n_positions", "max_position_embeddings",
    "moe_intermediate_size", "num_experts_per_tok", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim",
    "image_size", "patch_size", "num_channels", "sliding_window_pattern", "decoder_sparse_step",
)
"""Sizes that must be whole numbers of at least 1 where a config gives them: a zero or negative one
would divide by zero or count negative parameters."""
COUNT_FIELDS = (
    "num_local_experts", "num_experts", "n_routed_experts", "n_shared_experts", "first_k_dense_replace",
    "q_lora_rank", "qk_nope_head_dim", "sliding_window", "type_vocab_size", "num_labels", "sliding_layers_count",
    "shared_expert_intermediate_size",
)
"""Sizes that may be 0 (no shared experts, no query compression, no sliding window) but not negative."""


LARGEST_SIZE = 2**31
"""No size field of a real model comes near this (the largest vocabularies and contexts are in the millions);
past it a typo would give a model of 10^30 parameters instead of an error."""


def check_sizes(data: dict[str, Any], where: str) -> None:
    """Refuse a size field that is not a whole number in range, naming it (null means absent), and the few
    fields whose type or relation to another is fixed."""
    for names, least in ((POSITIVE_FIELDS, 1), (COUNT_FIELDS, 0)):
        for name in names:
            value = data.get(name)
            if value is None:
                continue
            hint = f"fix '{name}' in the config.json (e.g. from the model's published config)"
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                kind = "a positive whole number" if least else "a whole number, 0 or more"
                raise GpuflyError(f"{where}: the field '{name}' must be {kind}, got {json.dumps(value)}", hint=hint)
            if value > LARGEST_SIZE:
                raise GpuflyError(f"{where}: the field '{name}' must be at most {LARGEST_SIZE:,}, got {value:,}",
                                  hint=hint)
    _check_types(data, where)


def _check_types(data: dict[str, Any], where: str) -> None:
    hint = "fix it in the config.json (e.g. from the model's published config)"
    model_type = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise GpuflyError(f"{where}: the field 'model_type' must be a string, got {json.dumps(model_type)}", hint=hint)
    tie = data.get("tie_word_embeddings")
    if tie is not None and not isinstance(tie, bool):
        raise GpuflyError(f"{where}: the field 'tie_word_embeddings' must be true or false, got {json.dumps(tie)}",
                          hint=hint)
    heads, kv_heads = data.get("num_attention_heads"), data.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv_heads, int) and (kv_heads > heads or heads % kv_heads):
        raise GpuflyError(f"{where}: num_key_value_heads ({kv_heads}) must divide num_attention_heads ({heads})",
                          hint="grouped-query attention shares each key/value head among a whole number of "
                               "query heads; " + hint)
    _check_lists(data, where, hint)
    _check_relations(data, where, hint)


LIST_FIELDS = {"mlp_only_layers": int, "layer_types": str, "architectures": str}
"""List fields the counts read, and the type of their items."""


def _check_lists(data: dict[str, Any], where: str, hint: str) -> None:
    for name, kind in LIST_FIELDS.items():
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(item, kind) and not isinstance(item, bool)
                                                  for item in value):
            what = "whole numbers" if kind is int else "strings"
            raise GpuflyError(f"{where}: the field '{name}' must be a list of {what}, got {shown(value)}", hint=hint)
    layers = data.get("num_hidden_layers")
    dense = data.get("mlp_only_layers") or []
    if isinstance(layers, int) and any(not 0 <= index < layers for index in dense):
        raise GpuflyError(f"{where}: mlp_only_layers {shown(dense)} names a layer outside 0..{layers - 1} "
                          f"(num_hidden_layers {layers})", hint=hint)


def _whole(data: dict[str, Any], name: str) -> int | None:
    value = data.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _check_relations(data: dict[str, Any], where: str, hint: str) -> None:
    """Fields that are each fine alone and impossible together: a model no framework would build."""
    hidden, heads = _whole(data, "hidden_size") or _whole(data, "n_embd"), \
        _whole(data, "num_attention_heads") or _whole(data, "n_head")
    if hidden and heads and data.get("head_dim") is None and hidden % heads:
        raise GpuflyError(f"{where}: hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})",
                          hint="each head takes an equal slice of the hidden size (or the config gives head_dim); "
                          + hint)
    experts = _whole(data, "num_local_experts") or _whole(data, "num_experts") or _whole(data, "n_routed_experts")
    active = _whole(data, "num_experts_per_tok")
    if experts and active and active > experts:
        raise GpuflyError(f"{where}: num_experts_per_tok ({active}) is more than the {experts} experts",
                          hint="a token is routed to some of the experts, never more than there are; " + hint)
    layers = _whole(data, "num_hidden_layers")
    sliding = _whole(data, "sliding_layers_count")
    if layers and sliding is not None and sliding > layers:
        raise GpuflyError(f"{where}: sliding_layers_count ({sliding}) is more than num_hidden_layers ({layers})",
                          hint=hint)
    types = data.get("layer_types")
    if layers and isinstance(types, list) and len(types) != layers:
        raise GpuflyError(f"{where}: layer_types names {len(types)} layers, but num_hidden_layers is {layers}",
                          hint="layer_types gives each layer's attention, one entry per layer; " + hint)
    dense_first = _whole(data, "first_k_dense_replace")
    if layers and dense_first is not None and dense_first > layers:
        raise GpuflyError(f"{where}: first_k_dense_replace ({dense_first}) is more than num_hidden_layers ({layers})",
                          hint=hint)


class Config:
    """A config dict that names the missing field when a needed one is absent, and a bad size."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        check_sizes(data, where)
        self.data = data
        self.where = where

    def need(self, *names: str) -> Any:
        for name in names:
            if self.data.get(name) is not None:
                return self.data[name]
        raise GpuflyError(f"{self.where} lacks the field '{names[0]}'",
                          hint=f"a {self.data.get('model_type', 'model')} config.json needs {', '.join(names)}")

    def get(self, name: str, default: Any = None) -> Any:
        value = self.data.get(name)
        return default if value is None else value


def load_config_file(path: Path) -> dict[str, Any]:
    """The parsed config.json at ``path`` (a file, or a folder holding one)."""
    target = path / "config.json" if path.is_dir() else path
    data = read_json(target, missing=f"no config.json at {target}",
                     hint="give a Hugging Face config.json or a folder holding one")
    if not isinstance(data, dict):
        raise GpuflyError(f"{target} is not a config.json object (it holds a JSON {type(data).__name__})",
                          hint='a config.json is one JSON object of fields: {"model_type": "llama", ...}')
    return data


@dataclass(frozen=True)
class _Layer:
    """Parameter count of one decoder layer and its LoRA-targetable matrices."""

    params: int
    linears: dict[str, tuple[int, int]]


def _mla_attention(c: Config, h: int, a: int) -> tuple[int, dict[str, tuple[int, int]], Attention]:
    q_rank = c.get("q_lora_rank")
    kv_rank = c.need("kv_lora_rank")
    nope, rope, v_dim = c.need("qk_nope_head_dim"), c.need("qk_rope_head_dim"), c.need("v_head_dim")
    linears: dict[str, tuple[int, int]] = {}
    if q_rank:
        linears["q_a_proj"] = (h, q_rank)
        linears["q_b_proj"] = (q_rank, a * (nope + rope))
        norms = q_rank
    else:
        linears["q_proj"] = (h, a * (nope + rope))
        norms = 0
    linears["kv_a_proj_with_mqa"] = (h, kv_rank + rope)
    linears["kv_b_proj"] = (kv_rank, a * (nope + v_dim))
    linears["o_proj"] = (a * v_dim, h)
    params = sum(i * o for i, o in linears.values()) + norms + kv_rank
    return params, linears, Attention(kind="mla", kv_lora_rank=kv_rank, rope_head_dim=rope)


def _attention(c: Config, model_type: str) -> tuple[int, dict[str, tuple[int, int]], Attention]:
    h, a = c.need("hidden_size"), c.need("num_attention_heads")
    if model_type.startswith("deepseek"):
        return _mla_attention(c, h, a)
    k = c.get("num_key_value_heads", a)
    d = c.get("head_dim") or h // a
    linears = {"q_proj": (h, a * d), "k_proj": (h, k * d), "v_proj": (h, k * d), "o_proj": (a * d, h)}
    params = sum(i * o for i, o in linears.values())
    if model_type in ("qwen2", "qwen2_moe") or c.get("attention_bias", False):
        params += a * d + 2 * k * d
    if c.get("attention_bias", False):
        params += h
    if model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"):
        params += 2 * d if model_type != "olmo2" else a * d + k * d
    return params, linears, Attention(kind="mha", kv_heads=k, head_dim=d)


def _sliding(c: Config, model_type: str, layers: int) -> tuple[int | None, int]:
    """Sliding-window size and how many layers use it, from the family's published layout."""
    window = c.get("sliding_window")
    if not window:
        return None, 0
    types = c.get("layer_types")
    if isinstance(types, list):
        return window, sum(1 for t in types if t == "sliding_attention")
    if c.get("sliding_layers_count") is not None:
        return window, int(c.get("sliding_layers_count"))
    if model_type == "gemma2":
        return window, layers // 2
    if model_type == "gemma3_text":
        pattern = c.get("sliding_window_pattern", 6)
        return window, layers - layers // pattern
    if model_type in ("mistral", "mixtral") or c.get("use_sliding_window", False):
        return window, layers
    return None, 0


def _moe_layout(c: Config, model_type: str, layers: int) -> tuple[int, int, int, int, int] | None:
    """(routed experts, active per token, shared experts, MoE layers, expert width) or None."""
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts")
    if not experts:
        return None
    active = c.need("num_experts_per_tok")
    width = c.get("moe_intermediate_size") or c.need("intermediate_size")
    shared = c.get("n_shared_experts", 0)
    if model_type.startswith("deepseek"):
        moe_layers = layers - c.get("first_k_dense_replace", 0)
    else:
        step = c.get("decoder_sparse_step", 1)
        dense = set(c.get("mlp_only_layers", []) or [])
        moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    return experts, active, shared, moe_layers, width


def rope_scaling(data: dict[str, Any]) -> RopeScaling | None:
    """The config's ``rope_scaling`` (transformers writes ``rope_type``; older configs ``type``), or None where it
    is absent or declares no stretch ("default")."""
    scaling = data.get("rope_scaling")
    if not isinstance(scaling, dict):
        return None
    kind = scaling.get("rope_type") or scaling.get("type")
    if not isinstance(kind, str) or kind == "default":
        return None
    factor = scaling.get("factor")
    original = scaling.get("original_max_position_embeddings")
    return RopeScaling(kind=kind, factor=float(factor) if isinstance(factor, int | float) and factor > 0 else None,
                       original_context=original if isinstance(original, int) and original > 0 else None)


def _decoder(c: Config, model_type: str, name: str, source: str, gated: bool = True) -> ModelSpec:
    h, layers, vocab = c.need("hidden_size"), c.need("num_hidden_layers"), c.need("vocab_size")
    dense_width = c.need("intermediate_size")
    attn_params, attn_linears, attention = _attention(c, model_type)
    window, sliding_layers = _sliding(c, model_type, layers)
    if window:
        attention = Attention(**{**attention.__dict__, "sliding_window": window, "sliding_layers": sliding_layers})
    norms_per_layer = 4 * h if model_type.startswith("gemma") and model_type != "gemma" else 2 * h
    mlp_bias = c.get("mlp_bias", False)

    def mlp(width: int) -> int:
        return (3 if gated else 2) * h * width + ((2 * width + h) if mlp_bias else 0)

    moe_layout = _moe_layout(c, model_type, layers)
    moe = None
    total_layers = 0
    active_delta = 0
    shapes: dict[str, tuple[int, int, int]] = {n: (i, o, layers) for n, (i, o) in attn_linears.items()}
    if moe_layout is None:
        total_layers = layers * (attn_params + mlp(dense_width) + norms_per_layer)
        for n, (i, o) in {"gate_proj": (h, dense_width), "up_proj": (h, dense_width),
                          "down_proj": (dense_width, h)}.items():
            shapes[n] = (i, o, layers)
    else:
        experts, active, shared, moe_layers, width = moe_layout
        shared_width = c.get("shared_expert_intermediate_size") or (shared * width if shared else 0)
        expert = mlp(width)
        router = h * experts + (experts if model_type == "deepseek_v3" else 0)
        shared_params = mlp(shared_width) if shared_width else 0
        if model_type == "qwen2_moe" and shared_width:
            shared_params += h
        moe_mlp = experts * expert + router + shared_params
        dense_layers = layers - moe_layers
        total_layers = (layers * (attn_params + norms_per_layer) + moe_layers * moe_mlp
                        + dense_layers * mlp(dense_width))
        active_delta = moe_layers * (experts - active) * expert
        moe = MoE(experts=experts, active=active, shared=1 if shared_width else 0, layers=moe_layers,
                  expert_params=expert)
        shapes["experts.gate_proj"] = (h, width, moe_layers * experts)
        shapes["experts.up_proj"] = (h, width, moe_layers * experts)
        shapes["experts.down_proj"] = (width, h, moe_layers * experts)
        if dense_layers:
            for n, (i, o) in {"gate_proj": (h, dense_width), "up_proj": (h, dense_width),
                              "down_proj": (dense_width, h)}.items():
                shapes[n] = (i, o, dense_layers)
    tie = bool(c.get("tie_word_embeddings", model_type.startswith("gemma")))
    embedding = vocab * h
    params = total_layers + embedding + (0 if tie else vocab * h) + h
    return ModelSpec(
        name=name, kind="decoder", source=source, params=params, params_method="closed form (config.json)",
        active_params=params - active_delta if moe else None, layers=layers, hidden=h,
        heads=c.need("num_attention_heads"), intermediate=dense_width, vocab=vocab,
        max_context=c.get("max_position_embeddings"), rope_scaling=rope_scaling(c.data), tie_embeddings=tie,
        gated_mlp=gated,
        attention=attention, moe=moe, embedding_params=embedding,
        linear_params={n: i * o * count for n, (i, o, count) in shapes.items()}, linear_shapes=shapes,
    )


def _gpt2(c: Config, name: str, source: str) -> ModelSpec:
    h, layers, vocab = c.need("n_embd"), c.need("n_layer"), c.need("vocab_size")
    heads, positions = c.need("n_head"), c.get("n_positions", 1024)
    inner = c.get("n_inner") or 4 * h
    per_layer = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * inner + inner) + (inner * h + h)
    params = vocab * h + positions * h + layers * per_layer + 2 * h
    shapes = {"c_attn": (h, 3 * h, layers), "c_proj": (h, h, layers), "c_fc": (h, inner, layers),
              "mlp.c_proj": (inner, h, layers)}
    return ModelSpec(
        name=name, kind="decoder", source=source, params=params, params_method="closed form (config.json)",
        layers=layers, hidden=h, heads=heads, intermediate=inner, vocab=vocab, max_context=positions,
        tie_embeddings=True, gated_mlp=False, attention=Attention(kind="mha", kv_heads=heads, head_dim=h // heads),
        embedding_params=vocab * h + positions * h,
        linear_params={n: i * o * k for n, (i, o, k) in shapes.items()}, linear_shapes=shapes,
    )


def _encoder(c: Config, model_type: str, name: str, source: str) -> ModelSpec:
    h, layers = c.need("hidden_size"), c.need("num_hidden_layers")
    heads, inner = c.need("num_attention_heads"), c.need("intermediate_size")
    per_layer = 4 * (h * h + h) + 2 * h + (h * inner + inner) + (inner * h + h) + 2 * h
    shapes = {"query": (h, h, layers), "key": (h, h, layers), "value": (h, h, layers),
              "attention.output.dense": (h, h, layers), "intermediate.dense": (h, inner, layers),
              "output.dense": (inner, h, layers)}
    if model_type == "vit":
        image, patch, channels = c.need("image_size"), c.need("patch_size"), c.get("num_channels", 3)
        patches = (image // patch) ** 2
        embeddings = channels * patch * patch * h + h + h + (patches + 1) * h
        labels = c.get("num_labels") or len(c.get("id2label", {})) or 2  # transformers' default: 2
        head = h * labels + labels
        params = embeddings + layers * per_layer + 2 * h + head
        kind, context, vocab, embedding_params = "vision", patches + 1, None, 0
    else:
        vocab, positions = c.need("vocab_size"), c.get("max_position_embeddings", 512)
        types = c.get("type_vocab_size", 2)
        embeddings = vocab * h + positions * h + types * h + 2 * h
        masked_lm = any("MaskedLM" in name for name in c.get("architectures", []))
        head = (h * h + h + 2 * h + vocab) if masked_lm else (h * h + h)  # MLM transform + bias, or pooler
        params = embeddings + layers * per_layer + head
        kind, context, embedding_params = "encoder", positions, vocab * h + positions * h + types * h
    return ModelSpec(
        name=name, kind=kind, source=source, params=params, params_method="closed form (config.json)",
        layers=layers, hidden=h, heads=heads, intermediate=inner, vocab=vocab, max_context=context,
        gated_mlp=False, attention=Attention(kind="mha", kv_heads=heads, head_dim=h // heads),
        embedding_params=embedding_params,
        linear_params={n: i * o * k for n, (i, o, k) in shapes.items()}, linear_shapes=shapes,
    )


def spec_from_config(data: dict[str, Any], name: str, source: str, where: str = "config.json") -> ModelSpec:
    """A ModelSpec from a config.json dict; unknown families and missing fields fail by name."""
    if "text_config" in data and data.get("model_type") in ("gemma3", "llava", "mistral3"):
        data = {**data["text_config"], "model_type": data["text_config"].get("model_type", "gemma3_text")}
    model_type = data.get("model_type")
    if not model_type:
        raise GpuflyError(f"{where} lacks the field 'model_type'", hint="is this a Hugging Face config.json?")
    c = Config(data, where)
    if model_type in LLAMA_STYLE:
        return _decoder(c, model_type, name, source)
    if model_type == "gpt2":
        return _gpt2(c, name, source)
    if model_type in ENCODERS:
        return _encoder(c, model_type, name, source)
    raise GpuflyError(f"{where}: model_type '{model_type}' is not one gpufly can count without transformers",
                      hint="pip install transformers to count any architecture on the meta device; "
                      f"built in: {', '.join(SUPPORTED)}")


def spec_from_generic_config(data: dict[str, Any], name: str, source: str, where: str,
                             gated: bool | None = None) -> ModelSpec:
    """The layout of a decoder family gpufly has no closed form for, read from the fields most
    configs share (its parameter count and linear layers are then replaced by a meta-device build).
    ``gated``: whether the MLP has a gate, as the built model's layers tell; None falls back to the
    family (PLAIN_MLP), since every LLAMA_STYLE family gates (SwiGLU or GeGLU)."""
    if gated is None:
        gated = data.get("model_type") not in PLAIN_MLP
    return _decoder(Config(data, where), "llama", name, source, gated=gated)
