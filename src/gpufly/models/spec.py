"""ModelSpec: what the estimators need to know about a model, whichever source it came from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("decoder", "encoder", "vision", "cnn", "recsys", "other")


@dataclass(frozen=True)
class Attention:
    """How a transformer's attention stores its KV cache.

    ``kind`` is "mha" (multi-head or grouped-query: ``kv_heads`` K and V heads of ``head_dim``),
    or "mla" (DeepSeek's multi-head latent attention: one compressed latent of ``kv_lora_rank``
    plus a shared RoPE key of ``rope_head_dim`` per token and layer, no factor 2).
    ``sliding_window`` tokens cap the cache on ``sliding_layers`` of the layers (Gemma 2/3, Mistral).
    """

    kind: str = "mha"
    kv_heads: int = 0
    head_dim: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    sliding_window: int | None = None
    sliding_layers: int = 0


@dataclass(frozen=True)
class MoE:
    """Mixture of experts: ``experts`` routed experts per MoE layer, ``active`` used per token."""

    experts: int
    active: int
    shared: int = 0
    layers: int = 0
    expert_params: int = 0
    """Parameters of one routed expert (all its matrices), per MoE layer."""


@dataclass(frozen=True)
class RopeScaling:
    """The RoPE scaling a config declares (``rope_scaling`` in config.json, ``rope.scaling.*`` in GGUF): how the
    model stretches its positions past the context it was trained at. ``kind`` is the rope_type (linear, dynamic,
    yarn, llama3, longrope...), ``factor`` the stretch, ``original_context`` the trained length when given."""

    kind: str
    factor: float | None = None
    original_context: int | None = None

    @property
    def described(self) -> str:
        """'yarn, factor 4 over 32,768 trained tokens' for messages."""
        factor = f", factor {self.factor:g}" if self.factor else ""
        trained = f" over {self.original_context:,} trained tokens" if self.original_context else ""
        return f"{self.kind}{factor}{trained}"


@dataclass(frozen=True)
class ModelSpec:
    """A model as the memory and speed estimators see it.

    ``params`` is exact where the source allows (meta-device build, GGUF header) and a closed-form
    count otherwise; ``params_method`` says which. Transformer fields are None for other models.
    """

    name: str
    kind: str
    source: str
    params: int
    params_method: str
    active_params: int | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    intermediate: int | None = None
    vocab: int | None = None
    max_context: int | None = None
    """max_position_embeddings (or the GGUF context_length): the longest context the model takes."""
    rope_scaling: RopeScaling | None = None
    """The RoPE scaling the config declares, if any: a context past max_context is then a warning, not an error."""
    tie_embeddings: bool = False
    gated_mlp: bool = True
    attention: Attention | None = None
    moe: MoE | None = None
    embedding_params: int = 0
    """Parameters in embedding tables (token embeddings; a recommender's sparse tables)."""
    linear_params: dict[str, int] = field(default_factory=dict)
    """Parameters per LoRA-targetable module name (q_proj, k_proj, ... down_proj), summed over layers."""
    linear_shapes: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    """(in_features, out_features, count) per module name: what a LoRA adapter of rank r costs,
    r * (in + out) * count parameters."""
    weight_bytes: int | None = None
    """Exact weight bytes when a file states them (GGUF), else None: computed from the format."""
    weight_format: str | None = None
    """The format those bytes are in (e.g. Q4_K_M), when the source fixes it."""
    unread_quantization: str | None = None
    """A ``quantization_config`` the checkpoint states that gpufly cannot map to a format (its method and bits, as
    read): `fit` asks for --quant rather than count such weights at 16 bits."""
    embedding_bytes: int | None = None
    """Exact bytes of the token embedding table when a file states them (GGUF), in ``weight_format``."""
    forward_flops_per_sample: float | None = None
    """Measured (FlopCounterMode) forward FLOPs for one sample, for non-transformers."""
    activation_bytes_per_sample: float | None = None
    """Measured bytes autograd saves for backward, per sample, for non-transformers."""
    sample_shape: tuple[int, ...] | None = None
    sources: tuple[str, ...] = ()

    @property
    def is_transformer(self) -> bool:
        return self.layers is not None and self.hidden is not None and self.attention is not None

    @property
    def params_per_token(self) -> int:
        """Parameters that touch each token: active experts only for MoE."""
        return self.active_params if self.active_params is not None else self.params

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["sources"] = list(self.sources)
        return data
