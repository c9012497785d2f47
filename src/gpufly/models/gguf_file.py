"""Read a GGUF file's header into a ModelSpec: exact parameter and byte counts, no weights loaded.

``gguf.GGUFReader`` memory-maps the file and parses only the metadata and the tensor table; each
tensor's ``n_bytes`` follows from its element count and ggml's block size, so a 40 GB file reads in
a fraction of a second and no weight is ever copied into Python. Split models
(``name-0000k-of-0000n.gguf``) are read shard by shard and summed; their metadata lives in the first.

Rules where a file leaves room for choice:

- Per-layer arrays (``head_count_kv`` of a hybrid model) become the ceiling of their mean, so that
  ``layers x value`` matches the per-layer sum the KV cache is made of (over by less than one per layer).
- Sliding-window layers: a ``sliding_window_pattern`` array counts its true entries; an integer
  pattern N makes every Nth layer global (llama.cpp's rule); without a pattern gemma2 alternates
  (half the layers), gemma3 has llama.cpp's built-in period of 6, and any other family with a
  ``sliding_window`` key uses it on all layers.
- Routed-expert tensors are ``blk.N.ffn_{gate,up,down,gate_up}_exps`` (and the old per-expert
  ``blk.N.ffn_gate.E.weight`` of early Mixtral files); the weights of the unused experts are what
  ``active_params`` leaves out.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError
from gpufly.extras import require
from gpufly.models.spec import Attention, ModelSpec, MoE, RopeScaling
from gpufly.records import shown

if TYPE_CHECKING:
    from gguf import GGUFReader

_SHARD_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_BLOCK_TENSOR = re.compile(r"^blk\.(?P<layer>\d+)\.(?P<kind>.+)\.(?P<part>weight|bias)$")
_OLD_EXPERT = re.compile(r"^ffn_(?P<proj>gate|up|down)\.\d+$")
_EXPERT_KINDS = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps", "ffn_gate_up_exps"}
_LINEAR_NAMES = {
    "attn_q": "q_proj", "attn_k": "k_proj", "attn_v": "v_proj", "attn_output": "o_proj",
    "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj",
    "ffn_gate_exps": "experts.gate_proj", "ffn_up_exps": "experts.up_proj",
    "ffn_down_exps": "experts.down_proj",
    "attn_q_a": "q_a_proj", "attn_q_b": "q_b_proj", "attn_kv_a_mqa": "kv_a_proj_with_mqa",
    "attn_kv_b": "kv_b_proj",
}
_SMALL_ARRAY = 4096
"""Metadata arrays longer than this (the tokenizer's tokens, merges, scores) keep only their length:
decoding 150k token strings would cost more than the whole rest of the read."""
_SHARD_HINT = "keep every shard of a split model in one folder, named as gguf-split writes them"


@dataclass(frozen=True)
class _Tensor:
    """One entry of the tensor table; ``shape`` in ggml order (ne0, the input features, first)."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    n_elements: int
    n_bytes: int


@dataclass(frozen=True)
class _Header:
    """The metadata as plain Python values, so nothing keeps the memory map open after the read."""

    values: dict[str, Any]
    lengths: dict[str, int]
    where: str

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key)
        return default if value is None else value

    def need(self, key: str) -> Any:
        if key not in self.values:
            arch = self.values.get("general.architecture", "this")
            hint = ("this looks like a multimodal projector (mmproj) file: give the language model's .gguf"
                    if arch == "clip" else f"gpufly needs it to size a {arch} model; re-convert the file "
                    "with a recent llama.cpp convert_hf_to_gguf.py, or give the model's config.json")
            raise GpuflyError(f"{self.where} lacks the metadata key '{key}'", hint=hint)
        return self.values[key]


def read_gguf(path: str | Path) -> ModelSpec:
    """The ModelSpec of a GGUF model, from its header alone: exact params and weight bytes."""
    path = Path(path).expanduser()
    header, tensors = _read_model(path)
    try:
        return _spec(header, tensors, path)
    except (TypeError, ValueError, ArithmeticError) as exc:  # a header value of a kind no converter writes
        raise GpuflyError(f"{path}: a header value is not what a GGUF model holds ({type(exc).__name__}: {exc})",
                          hint="the file is corrupt or was not written by llama.cpp's converter; convert the "
                          "model again") from None


def tensor_bytes_by_type(path: str | Path) -> dict[str, int]:
    """Bytes per ggml tensor type (Q4_K, Q6_K, F32...), largest first: what a quant mix is made of."""
    _, tensors = _read_model(Path(path).expanduser())
    totals: Counter[str] = Counter()
    for tensor in tensors:
        totals[tensor.type_name] += tensor.n_bytes
    return dict(totals.most_common())


def _read_model(path: Path) -> tuple[_Header, list[_Tensor]]:
    """The header and tensors of a model, all shards of a split one included."""
    header, tensors = _read_file(path)
    count = _size(header, "split.count", optional=True, least=0) or 1
    if count <= 1:
        return header, tensors
    shards = _shard_paths(path, count)
    read = {path.name: (header, tensors)}
    for shard in shards:
        if shard.name not in read:
            read[shard.name] = _read_file(shard)
    first = read[shards[0].name][0]
    everything = [tensor for shard in shards for tensor in read[shard.name][1]]
    expected = _size(first, "split.tensors.count", optional=True, least=0)
    if expected is not None and expected != len(everything):
        raise GpuflyError(f"the shards of {path} hold {len(everything)} tensors, not the {expected} "
                          "the first one announces", hint=_SHARD_HINT)
    return first, everything


def _shard_paths(path: Path, count: int) -> list[Path]:
    """All shards of the split model ``path`` belongs to, in order; each must exist."""
    match = _SHARD_NAME.match(path.name)
    if match is None or int(match["count"]) != count:
        raise GpuflyError(f"{path} is one of {count} shards, but its name does not say which "
                          "(name-0000k-of-0000n.gguf)", hint=_SHARD_HINT)
    shards = [path.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [shard.name for shard in shards if not shard.is_file()]
    if missing:
        raise GpuflyError(f"{path} is split in {count} shards and {', '.join(missing)} is missing",
                          hint=_SHARD_HINT)
    return shards


def _read_file(path: Path) -> tuple[_Header, list[_Tensor]]:
    """One GGUF file's header and tensor table; every failure becomes a GpuflyError."""
    _check_magic(path)
    gguf = require("gguf", "reading a .gguf file")
    try:
        reader = gguf.GGUFReader(path)
        header = _header(reader, str(path))
        tensors = _tensors(reader, path.stat().st_size)
    except GpuflyError:
        raise
    except Exception as exc:  # the reader signals short reads with IndexError, ValueError, mmap errors...
        raise GpuflyError(f"{path} is a truncated or corrupt GGUF file ({path.stat().st_size:,} bytes)",
                          hint="download it again and compare its size or checksum with the source's; if it "
                          f"is complete, it may use a tensor type newer than gguf {_gguf_version()} knows "
                          "(pip install -U gguf)") from exc
    return header, tensors


def _check_magic(path: Path) -> None:
    """Tell a missing path, a folder, a special file and a file of another kind apart before the reader guesses.
    A FIFO, socket or device is refused before it is opened: opening a FIFO would wait for a writer, and the reader
    would map /dev/zero as an endless file."""
    hint = "check the path; a model ref ending in .gguf must be a file"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise GpuflyError(f"no such GGUF file: {path}", hint=hint) from None
    except OSError as exc:
        raise GpuflyError(f"cannot read {path}: {exc.strerror or exc}", hint=hint) from None
    if stat.S_ISDIR(mode):
        raise GpuflyError(f"{path} is a folder, not a GGUF file", hint="give the .gguf file inside it")
    if not stat.S_ISREG(mode):
        raise GpuflyError(f"{path} is not a regular file (a device, pipe or socket)", hint=hint)
    try:
        with path.open("rb") as file:
            start = file.read(16)
    except OSError as exc:
        raise GpuflyError(f"cannot read {path}: {exc.strerror or exc}",
                          hint="check the file's permissions, or copy it somewhere readable") from exc
    if start[:4] != b"GGUF":
        raise GpuflyError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes)",
                          hint=_other_format_hint(start))


def _other_format_hint(start: bytes) -> str:
    if not start:
        return "the file is empty: download it again"
    if start[8:10] in (b'{"', b"{'"):
        return "it looks like a safetensors file: give the model's config.json (or its folder) instead"
    if start[:2] == b"PK":
        return "it looks like a PyTorch checkpoint (zip): give the model's config.json instead"
    return "give a .gguf file as llama.cpp writes it, a config.json, or a preset name"


def _gguf_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gguf")
    except PackageNotFoundError:
        return "(unknown version)"


def _header(reader: GGUFReader, where: str) -> _Header:
    from gguf import GGUFValueType

    values: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types and field.types[0] == GGUFValueType.ARRAY:
            lengths[key] = len(field.data)
            if lengths[key] > _SMALL_ARRAY:
                continue
        values[key] = field.contents()
    return _Header(values, lengths, where)


def _tensors(reader: GGUFReader, file_size: int) -> list[_Tensor]:
    tensors = []
    for tensor in reader.tensors:
        if tensor.data_offset + tensor.n_bytes > file_size:
            raise ValueError(f"tensor {tensor.name} ends past the end of the file")
        tensors.append(_Tensor(tensor.name, tensor.tensor_type.name, tuple(int(d) for d in tensor.shape),
                               int(tensor.n_elements), int(tensor.n_bytes)))
    return tensors


def _spec(header: _Header, tensors: list[_Tensor], path: Path) -> ModelSpec:
    arch = header.need("general.architecture")

    def key(suffix: str) -> str:
        return f"{arch}.{suffix}"

    layers = _size(header, key("block_count"))
    hidden = _size(header, key("embedding_length"))
    heads = _size(header, key("attention.head_count"))
    if not tensors:
        raise GpuflyError(f"{header.where} holds no tensors: there is no model in it to size",
                          hint="give the model's .gguf file (a vocabulary-only or adapter file has no weights)")
    by_name = {tensor.name: tensor for tensor in tensors}
    params = sum(tensor.n_elements for tensor in tensors)
    moe, active_params = _moe(header, arch, tensors, params)
    linear_params, linear_shapes = _linears(tensors)
    embedding = by_name.get("token_embd.weight")
    intermediate_key = key("feed_forward_length") if header.get(key("feed_forward_length")) is not None \
        else key("expert_feed_forward_length")
    return ModelSpec(
        name=str(header.get("general.name") or _stem(path)), kind="decoder", source=f"gguf:{path}",
        params=params, params_method="gguf header", active_params=active_params, layers=layers, hidden=hidden,
        heads=heads, intermediate=_size(header, intermediate_key, optional=True, least=0),
        vocab=_vocab(header, arch, embedding), max_context=_size(header, key("context_length"), optional=True),
        rope_scaling=_rope_scaling(header, arch), tie_embeddings="output.weight" not in by_name,
        gated_mlp=_gated(tensors),
        attention=_attention(header, arch, layers, hidden, heads), moe=moe,
        embedding_params=embedding.n_elements if embedding else 0,
        linear_params=linear_params, linear_shapes=linear_shapes,
        weight_bytes=sum(tensor.n_bytes for tensor in tensors), weight_format=_weight_format(header, tensors),
        embedding_bytes=embedding.n_bytes if embedding else None,
    )


def _rope_scaling(header: _Header, arch: str) -> RopeScaling | None:
    """``{arch}.rope.scaling.type`` (none, linear, yarn, longrope), its factor and trained context, as llama.cpp's
    converter writes them; None for "none" or where the file has no such key."""
    kind = header.get(f"{arch}.rope.scaling.type")
    if not isinstance(kind, str) or kind in ("none", ""):
        return None
    factor = header.get(f"{arch}.rope.scaling.factor")
    original = header.get(f"{arch}.rope.scaling.original_context_length")
    return RopeScaling(kind=kind, factor=float(factor) if isinstance(factor, int | float) and factor > 0 else None,
                       original_context=int(original) if isinstance(original, int) and original > 0 else None)


def _per_layer(value: Any) -> int:
    """One number for a value GGUF may store per layer (see the module docstring for why the mean)."""
    if isinstance(value, list):
        return math.ceil(sum(value) / len(value)) if value else 0
    return int(value)


LARGEST_SIZE = 2**31
"""No size in a real model's header comes near this; past it the file is corrupt or was written by hand."""


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(header: _Header, key: str, optional: bool = False, least: int = 1) -> Any:
    """A size from the header (a whole number, or one per layer), checked before it is counted with: a string, a
    float, a list of strings, a zero where a model needs at least one, a negative or an absurd number is one error
    naming the key (None for an optional key the file does not have)."""
    if optional and header.get(key) is None:
        return None
    value = header.need(key)
    items = value if isinstance(value, list) else [value]
    hint = "the file is corrupt or was not written by llama.cpp's converter; convert the model again"
    if not items or not all(_is_whole(item) for item in items):
        raise GpuflyError(f"{header.where}: '{key}' must be a whole number (or one per layer), got {shown(value)}",
                          hint=hint)
    if not all(least <= item <= LARGEST_SIZE for item in items):
        least_words = "at least 1" if least else "0 or more"
        raise GpuflyError(f"{header.where}: '{key}' must be {least_words} and at most {LARGEST_SIZE:,}, "
                          f"got {shown(value)}", hint=hint)
    return _per_layer(value)


def _stem(path: Path) -> str:
    match = _SHARD_NAME.match(path.name)
    return match["stem"] if match else path.stem


def _vocab(header: _Header, arch: str, embedding: _Tensor | None) -> int | None:
    if header.get(f"{arch}.vocab_size") is not None:
        return _size(header, f"{arch}.vocab_size")
    if "tokenizer.ggml.tokens" in header.lengths:
        return header.lengths["tokenizer.ggml.tokens"]
    return embedding.shape[1] if embedding and len(embedding.shape) == 2 else None


def _attention(header: _Header, arch: str, layers: int, hidden: int, heads: int) -> Attention:
    window = _size(header, f"{arch}.attention.sliding_window", optional=True, least=0) or None
    sliding = _sliding_layers(header, arch, layers) if window else 0
    if sliding > layers:
        raise GpuflyError(f"{header.where}: {arch}.attention.sliding_window_pattern marks {sliding} sliding-window "
                          f"layers, but the model has {layers} ({arch}.block_count)",
                          hint="the file is corrupt or was not written by llama.cpp's converter")
    kv_lora_rank = _size(header, f"{arch}.attention.kv_lora_rank", optional=True, least=0)
    if kv_lora_rank:
        rope = _size(header, f"{arch}.rope.dimension_count")
        return Attention(kind="mla", kv_lora_rank=kv_lora_rank, rope_head_dim=rope,
                         sliding_window=window, sliding_layers=sliding)
    kv_key = f"{arch}.attention.head_count_kv"
    kv_heads = heads if header.get(kv_key) is None else _size(header, kv_key, least=0)
    if kv_heads > heads:
        raise GpuflyError(f"{header.where}: '{kv_key}' ({kv_heads}) is more than the {heads} attention heads",
                          hint="grouped-query attention shares each key/value head among several query heads; "
                          "the file is corrupt or was not written by llama.cpp's converter")
    head_dim = _size(header, f"{arch}.attention.key_length", optional=True)
    if head_dim is None and hidden % heads:
        raise GpuflyError(f"{header.where}: the embedding length {hidden} is not divisible by the {heads} attention "
                          "heads, and the file gives no attention.key_length",
                          hint="the file is corrupt or was not written by llama.cpp's converter")
    return Attention(kind="mha", kv_heads=kv_heads, head_dim=head_dim or hidden // heads,
                     sliding_window=window, sliding_layers=sliding)


def _sliding_layers(header: _Header, arch: str, layers: int) -> int:
    pattern = header.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):
        return sum(1 for is_sliding in pattern if is_sliding)
    if isinstance(pattern, int) and pattern > 0:
        return layers - layers // pattern
    if arch == "gemma2":
        return layers // 2
    if arch == "gemma3":
        return layers - layers // 6
    return layers


def _layer_kind(name: str) -> tuple[int, str, str] | None:
    """(layer, kind, part) of a ``blk.N.kind.part`` tensor, old per-expert names folded into ``*_exps``."""
    match = _BLOCK_TENSOR.match(name)
    if match is None:
        return None
    kind = match["kind"]
    old = _OLD_EXPERT.match(kind)
    if old:
        kind = f"ffn_{old['proj']}_exps"
    return int(match["layer"]), kind, match["part"]


def _moe(header: _Header, arch: str, tensors: list[_Tensor], params: int) -> tuple[MoE | None, int | None]:
    experts = _size(header, f"{arch}.expert_count", optional=True, least=0) or 0
    if experts <= 0:
        return None, None
    active = _size(header, f"{arch}.expert_used_count")
    if active > experts:
        raise GpuflyError(f"{header.where}: {active} experts used per token ({arch}.expert_used_count), but only "
                          f"{experts} experts ({arch}.expert_count)",
                          hint="the file is corrupt or was not written by llama.cpp's converter")
    expert_total = 0
    moe_layers: set[int] = set()
    has_shared = False
    for tensor in tensors:
        parsed = _layer_kind(tensor.name)
        if parsed is None:
            continue
        layer, kind, _ = parsed
        has_shared = has_shared or kind.endswith("_shexp")
        if kind in _EXPERT_KINDS:
            expert_total += tensor.n_elements
            moe_layers.add(layer)
    shared = _size(header, f"{arch}.expert_shared_count", optional=True, least=0)
    shared = (1 if has_shared else 0) if shared is None else shared
    if not moe_layers:
        return MoE(experts=experts, active=active, shared=shared), None
    per_layer = expert_total // (experts * len(moe_layers))
    moe = MoE(experts=experts, active=active, shared=shared, layers=len(moe_layers), expert_params=per_layer)
    return moe, params - (experts - active) * expert_total // experts


def _linears(tensors: list[_Tensor]) -> tuple[dict[str, int], dict[str, tuple[int, int, int]]]:
    """LoRA-targetable weights under Hugging Face module names; a shape only where all layers agree."""
    params: Counter[str] = Counter()
    shapes: dict[str, set[tuple[int, int]]] = {}
    counts: Counter[str] = Counter()
    for tensor in tensors:
        parsed = _layer_kind(tensor.name)
        if parsed is None or parsed[2] != "weight" or parsed[1] not in _LINEAR_NAMES or len(tensor.shape) < 2:
            continue
        module = _LINEAR_NAMES[parsed[1]]
        params[module] += tensor.n_elements
        shapes.setdefault(module, set()).add((tensor.shape[0], tensor.shape[1]))
        counts[module] += math.prod(tensor.shape[2:])
    linear_shapes = {module: (*next(iter(seen)), counts[module])
                     for module, seen in shapes.items() if len(seen) == 1}
    return dict(params), linear_shapes


def _gated(tensors: list[_Tensor]) -> bool:
    """Gated (SwiGLU/GeGLU) unless the file has up and down projections but no gate."""
    kinds = {parsed[1] for tensor in tensors if (parsed := _layer_kind(tensor.name))}
    if not kinds & {"ffn_up", "ffn_up_exps"}:
        return True
    return bool(kinds & {"ffn_gate", "ffn_gate_exps", "ffn_gate_up_exps"})


def _weight_format(header: _Header, tensors: list[_Tensor]) -> str | None:
    """The quant mix llama.cpp names in ``general.file_type``, else the tensor type holding most bytes."""
    from gguf import LlamaFileType

    file_type = header.get("general.file_type")
    if file_type is not None:
        try:
            member = LlamaFileType(int(file_type))
        except ValueError:
            member = None
        if member is not None and member != LlamaFileType.GUESSED:
            return "F32" if member == LlamaFileType.ALL_F32 else member.name.removeprefix("MOSTLY_")
    totals: Counter[str] = Counter()
    for tensor in tensors:
        totals[tensor.type_name] += tensor.n_bytes
    return totals.most_common(1)[0][0] if totals else None
