"""read_gguf on small real GGUF files written with gguf.GGUFWriter: exact counts, hyperparameters, errors."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import LlamaFileType

from gpufly.errors import GpuflyError
from gpufly.models.gguf_file import read_gguf, tensor_bytes_by_type
from gpufly.models.spec import Attention, MoE, RopeScaling

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 2, 64, 4, 2, 128, 256
HEAD_DIM = HIDDEN // HEADS

TensorPlan = list[tuple[str, tuple[int, ...], Q]]
"""(name, numpy shape as Hugging Face stores it: (out, in), type) of each tensor to write."""


def write_gguf(path: Path, arch: str, tensors: TensorPlan, meta: Callable[[gguf.GGUFWriter], None],
               **writer_options: int) -> dict[str, int]:
    """Write a GGUF file of random weights; return the bytes each tensor's data took on disk."""
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, arch, **writer_options)
    meta(writer)
    written = {}
    for name, shape, qtype in tensors:
        data = rng.standard_normal(shape).astype(np.float32)
        if qtype in (Q.F32, Q.F16):
            array = data.astype(np.float16) if qtype == Q.F16 else data
            writer.add_tensor(name, array)
        else:
            array = gguf.quants.quantize(data, qtype)
            writer.add_tensor(name, array, raw_dtype=qtype)
        written[name] = array.nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


def llama_tensors(tied: bool = False) -> TensorPlan:
    kv = KV_HEADS * HEAD_DIM
    plan: TensorPlan = [("token_embd.weight", (VOCAB, HIDDEN), Q.F16),
                        ("output_norm.weight", (HIDDEN,), Q.F32)]
    if not tied:
        plan.append(("output.weight", (VOCAB, HIDDEN), Q.Q8_0))
    for i in range(LAYERS):
        plan += [
            (f"blk.{i}.attn_norm.weight", (HIDDEN,), Q.F32),
            (f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN), Q.Q8_0),
            (f"blk.{i}.attn_k.weight", (kv, HIDDEN), Q.Q8_0),
            (f"blk.{i}.attn_v.weight", (kv, HIDDEN), Q.F16),
            (f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN), Q.Q8_0),
            (f"blk.{i}.ffn_norm.weight", (HIDDEN,), Q.F32),
            (f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN), Q.Q8_0),
            (f"blk.{i}.ffn_up.weight", (FFN, HIDDEN), Q.Q8_0),
            (f"blk.{i}.ffn_down.weight", (HIDDEN, FFN), Q.F16),
        ]
    return plan


def llama_meta(writer: gguf.GGUFWriter, name: str = "tiny-llama",
               file_type: int | None = LlamaFileType.MOSTLY_Q8_0,
               kv_heads: int | list[int] = KV_HEADS) -> None:
    writer.add_name(name)
    writer.add_block_count(LAYERS)
    writer.add_embedding_length(HIDDEN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(kv_heads)
    writer.add_feed_forward_length(FFN)
    writer.add_context_length(2048)
    writer.add_token_list([f"tok{i}" for i in range(VOCAB)])
    if file_type is not None:
        writer.add_file_type(file_type)


def expected_bytes(plan: TensorPlan) -> int:
    """Bytes from ggml's block table: a block of ``size`` weights takes ``type_size`` bytes."""
    total = 0
    for _, shape, qtype in plan:
        size, type_size = gguf.GGML_QUANT_SIZES[qtype]
        total += math.prod(shape) // size * type_size
    return total


@pytest.fixture
def llama_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-llama.Q8_0.gguf"
    write_gguf(path, "llama", llama_tensors(), llama_meta)
    return path


def test_counts_are_exact_and_hyperparameters_read_back(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    plan = llama_tensors()
    written = write_gguf(path, "llama", plan, llama_meta)

    spec = read_gguf(path)

    assert spec.params == sum(math.prod(shape) for _, shape, _ in plan)
    assert spec.params_method == "gguf header"
    assert spec.weight_bytes == expected_bytes(plan) == sum(written.values())
    assert spec.weight_format == "Q8_0"
    assert (spec.name, spec.kind, spec.source) == ("tiny-llama", "decoder", f"gguf:{path}")
    assert (spec.layers, spec.hidden, spec.heads, spec.intermediate) == (LAYERS, HIDDEN, HEADS, FFN)
    assert (spec.vocab, spec.max_context) == (VOCAB, 2048)
    assert spec.attention == Attention(kind="mha", kv_heads=KV_HEADS, head_dim=HEAD_DIM)
    assert spec.tie_embeddings is False
    assert spec.gated_mlp is True
    assert spec.moe is None and spec.active_params is None
    assert spec.embedding_params == VOCAB * HIDDEN


def test_linear_params_use_hugging_face_names(llama_file: Path) -> None:
    spec = read_gguf(llama_file)

    kv = KV_HEADS * HEAD_DIM
    assert spec.linear_params == {
        "q_proj": LAYERS * HIDDEN * HIDDEN, "k_proj": LAYERS * kv * HIDDEN, "v_proj": LAYERS * kv * HIDDEN,
        "o_proj": LAYERS * HIDDEN * HIDDEN, "gate_proj": LAYERS * FFN * HIDDEN,
        "up_proj": LAYERS * FFN * HIDDEN, "down_proj": LAYERS * HIDDEN * FFN,
    }
    assert spec.linear_shapes["k_proj"] == (HIDDEN, kv, LAYERS)
    assert spec.linear_shapes["down_proj"] == (FFN, HIDDEN, LAYERS)


def test_tensor_bytes_by_type_splits_the_mix(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    plan = llama_tensors()
    write_gguf(path, "llama", plan, llama_meta)

    by_type = tensor_bytes_by_type(path)

    for qtype in (Q.F32, Q.F16, Q.Q8_0):
        assert by_type[qtype.name] == expected_bytes([t for t in plan if t[2] == qtype])
    assert sum(by_type.values()) == read_gguf(path).weight_bytes
    assert list(by_type) == sorted(by_type, key=by_type.__getitem__, reverse=True)


def test_no_output_tensor_means_tied_embeddings_and_name_falls_back_to_the_stem(tmp_path: Path) -> None:
    path = tmp_path / "tied-model.gguf"
    write_gguf(path, "llama", llama_tensors(tied=True), lambda w: llama_meta(w, name=""))

    spec = read_gguf(path)

    assert spec.tie_embeddings is True
    assert spec.name == "tied-model"


@pytest.mark.parametrize(("file_type", "name"), [
    (LlamaFileType.MOSTLY_Q4_K_M, "Q4_K_M"), (LlamaFileType.MOSTLY_Q8_0, "Q8_0"),
    (LlamaFileType.MOSTLY_F16, "F16"), (LlamaFileType.MOSTLY_BF16, "BF16"), (LlamaFileType.ALL_F32, "F32"),
])
def test_weight_format_names_the_file_type(tmp_path: Path, file_type: LlamaFileType, name: str) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path, "llama", llama_tensors(), lambda w: llama_meta(w, file_type=file_type))

    assert read_gguf(path).weight_format == name


@pytest.mark.parametrize("file_type", [None, LlamaFileType.GUESSED])
def test_weight_format_falls_back_to_the_type_with_most_bytes(tmp_path: Path, file_type: int | None) -> None:
    path = tmp_path / "tiny.gguf"
    plan = llama_tensors()
    write_gguf(path, "llama", plan, lambda w: llama_meta(w, file_type=file_type))

    largest = max((Q.F32, Q.F16, Q.Q8_0), key=lambda q: expected_bytes([t for t in plan if t[2] == q]))
    assert read_gguf(path).weight_format == largest.name


def test_per_layer_kv_heads_become_the_ceiling_of_their_mean(tmp_path: Path) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(path, "llama", llama_tensors(), lambda w: llama_meta(w, kv_heads=[1, 2]))

    assert read_gguf(path).attention.kv_heads == 2


@pytest.mark.parametrize(("arch", "pattern", "sliding_layers"), [
    ("gemma2", None, LAYERS // 2),
    ("llama", None, LAYERS),
    ("gemma3", [True, False], 1),
    ("gemma3", 2, 1),
])
def test_sliding_window_layers(tmp_path: Path, arch: str, pattern: int | list[bool] | None,
                               sliding_layers: int) -> None:
    def meta(writer: gguf.GGUFWriter) -> None:
        llama_meta(writer)
        writer.add_sliding_window(512)
        if pattern is not None:
            writer.add_sliding_window_pattern(pattern)

    path = tmp_path / "tiny.gguf"
    write_gguf(path, arch, llama_tensors(), meta)

    attention = read_gguf(path).attention
    assert (attention.sliding_window, attention.sliding_layers) == (512, sliding_layers)


def test_vocab_of_a_large_tokenizer_is_its_length(tmp_path: Path) -> None:
    def meta(writer: gguf.GGUFWriter) -> None:
        llama_meta(writer)
        writer.add_token_list([f"t{i}" for i in range(5000)])

    path = tmp_path / "tiny.gguf"
    write_gguf(path, "llama", llama_tensors(), meta)

    assert read_gguf(path).vocab == 5000


EXPERTS, USED, EXPERT_FFN = 4, 2, 32


def moe_tensors() -> TensorPlan:
    kv = KV_HEADS * HEAD_DIM
    plan: TensorPlan = [("token_embd.weight", (VOCAB, HIDDEN), Q.F16),
                        ("output_norm.weight", (HIDDEN,), Q.F32), ("output.weight", (VOCAB, HIDDEN), Q.Q8_0)]
    for i in range(LAYERS):
        plan += [
            (f"blk.{i}.attn_norm.weight", (HIDDEN,), Q.F32),
            (f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN), Q.Q8_0),
            (f"blk.{i}.attn_k.weight", (kv, HIDDEN), Q.Q8_0),
            (f"blk.{i}.attn_v.weight", (kv, HIDDEN), Q.Q8_0),
            (f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN), Q.Q8_0),
            (f"blk.{i}.ffn_norm.weight", (HIDDEN,), Q.F32),
            (f"blk.{i}.ffn_gate_inp.weight", (EXPERTS, HIDDEN), Q.F32),
            (f"blk.{i}.ffn_gate_exps.weight", (EXPERTS, EXPERT_FFN, HIDDEN), Q.F16),
            (f"blk.{i}.ffn_up_exps.weight", (EXPERTS, EXPERT_FFN, HIDDEN), Q.F16),
            (f"blk.{i}.ffn_down_exps.weight", (EXPERTS, HIDDEN, EXPERT_FFN), Q.Q8_0),
        ]
    return plan


def moe_meta(writer: gguf.GGUFWriter) -> None:
    llama_meta(writer, name="tiny-moe")
    writer.add_expert_count(EXPERTS)
    writer.add_expert_used_count(USED)
    writer.add_expert_feed_forward_length(EXPERT_FFN)


def test_moe_active_params_leave_out_the_unused_experts(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"
    plan = moe_tensors()
    write_gguf(path, "qwen3moe", plan, moe_meta)

    spec = read_gguf(path)

    expert = 3 * EXPERT_FFN * HIDDEN
    params = sum(math.prod(shape) for _, shape, _ in plan)
    assert spec.params == params
    assert spec.weight_bytes == expected_bytes(plan)
    assert spec.moe == MoE(experts=EXPERTS, active=USED, shared=0, layers=LAYERS, expert_params=expert)
    assert spec.active_params == params - (EXPERTS - USED) * expert * LAYERS
    assert spec.linear_shapes["experts.down_proj"] == (EXPERT_FFN, HIDDEN, LAYERS * EXPERTS)


def test_old_per_expert_tensor_names_count_as_experts(tmp_path: Path) -> None:
    plan: TensorPlan = []
    for name, shape, qtype in moe_tensors():
        if "_exps" not in name:
            plan.append((name, shape, qtype))
            continue
        layer, kind = name.split(".")[1], name.split(".")[2].removesuffix("_exps")
        plan += [(f"blk.{layer}.{kind}.{e}.weight", shape[1:], qtype) for e in range(EXPERTS)]
    path = tmp_path / "old-mixtral.gguf"
    write_gguf(path, "llama", plan, moe_meta)

    spec = read_gguf(path)

    expert = 3 * EXPERT_FFN * HIDDEN
    assert spec.moe == MoE(experts=EXPERTS, active=USED, shared=0, layers=LAYERS, expert_params=expert)
    assert spec.active_params == spec.params - (EXPERTS - USED) * expert * LAYERS


def test_deepseek2_reads_as_multi_head_latent_attention(tmp_path: Path) -> None:
    rank, rope, nope, v_dim = 32, 8, 16, 16

    def meta(writer: gguf.GGUFWriter) -> None:
        llama_meta(writer, name="tiny-deepseek")
        writer.add_kv_lora_rank(rank)
        writer.add_rope_dimension_count(rope)
        writer.add_key_length(nope + rope)

    plan: TensorPlan = [("token_embd.weight", (VOCAB, HIDDEN), Q.F16),
                        ("output.weight", (VOCAB, HIDDEN), Q.F16)]
    for i in range(LAYERS):
        plan += [
            (f"blk.{i}.attn_q.weight", (HEADS * (nope + rope), HIDDEN), Q.F16),
            (f"blk.{i}.attn_kv_a_mqa.weight", (rank + rope, HIDDEN), Q.F16),
            (f"blk.{i}.attn_kv_a_norm.weight", (rank,), Q.F32),
            (f"blk.{i}.attn_kv_b.weight", (HEADS * (nope + v_dim), rank), Q.Q8_0),
            (f"blk.{i}.attn_output.weight", (HIDDEN, HEADS * v_dim), Q.Q8_0),
        ]
    path = tmp_path / "mla.gguf"
    write_gguf(path, "deepseek2", plan, meta)

    spec = read_gguf(path)

    assert spec.attention == Attention(kind="mla", kv_lora_rank=rank, rope_head_dim=rope)
    assert spec.linear_params["kv_a_proj_with_mqa"] == LAYERS * (rank + rope) * HIDDEN
    assert spec.linear_shapes["kv_b_proj"] == (rank, HEADS * (nope + v_dim), LAYERS)
    assert spec.params == sum(math.prod(shape) for _, shape, _ in plan)


def test_split_model_sums_its_shards(tmp_path: Path, llama_file: Path) -> None:
    write_gguf(tmp_path / "split.gguf", "llama", llama_tensors(), llama_meta, split_max_tensors=8)
    shards = sorted(tmp_path.glob("split-*-of-*.gguf"))
    assert len(shards) > 2
    whole = read_gguf(llama_file)

    for shard in (shards[0], shards[-1]):
        spec = read_gguf(shard)
        assert (spec.params, spec.weight_bytes, spec.layers, spec.name) == (
            whole.params, whole.weight_bytes, whole.layers, whole.name)
    assert tensor_bytes_by_type(shards[1]) == tensor_bytes_by_type(llama_file)

    shards[1].unlink()
    with pytest.raises(GpuflyError, match="missing"):
        read_gguf(shards[0])


# Errors: every bad input is a GpuflyError with a message that says what is wrong and a hint.

def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="no such GGUF file") as info:
        read_gguf(tmp_path / "nope.gguf")
    assert info.value.hint


@pytest.mark.parametrize(("content", "hint_word"), [
    (b"hello, this is a text file\n", ".gguf"),
    (b"", "empty"),
    (b"GG", ".gguf"),
    ((60).to_bytes(8, "little") + b'{"__metadata__": {}, "w": {"dtype": "F16"}}', "safetensors"),
])
def test_not_a_gguf_file(tmp_path: Path, content: bytes, hint_word: str) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(content)

    with pytest.raises(GpuflyError, match="not a GGUF file") as info:
        read_gguf(path)
    assert hint_word in info.value.hint


def test_a_folder_is_not_a_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(GpuflyError, match="folder"):
        read_gguf(tmp_path)


@pytest.mark.parametrize("keep", [0.5, 0.9, 6, 24, 100, 1000])
def test_truncated_file(tmp_path: Path, llama_file: Path, keep: float) -> None:
    data = llama_file.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep) if keep < 1 else int(keep)])

    with pytest.raises(GpuflyError, match="truncated or corrupt GGUF file") as info:
        read_gguf(cut)
    assert "download it again" in info.value.hint
    with pytest.raises(GpuflyError, match="truncated or corrupt GGUF file"):
        tensor_bytes_by_type(cut)


def test_missing_key_is_named(tmp_path: Path) -> None:
    def meta(writer: gguf.GGUFWriter) -> None:
        writer.add_embedding_length(HIDDEN)
        writer.add_head_count(HEADS)

    path = tmp_path / "tiny.gguf"
    write_gguf(path, "llama", llama_tensors(), meta)

    with pytest.raises(GpuflyError, match=r"lacks the metadata key 'llama\.block_count'") as info:
        read_gguf(path)
    assert info.value.hint


def test_a_vision_projector_gets_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "mmproj.gguf"
    write_gguf(path, "clip", [("v.patch_embd.weight", (HIDDEN, 48), Q.F16)], lambda w: None)

    with pytest.raises(GpuflyError, match=r"clip\.block_count") as info:
        read_gguf(path)
    assert "mmproj" in info.value.hint


def test_the_rope_scaling_in_the_header_is_kept(tmp_path: Path) -> None:
    def meta(writer: gguf.GGUFWriter) -> None:
        llama_meta(writer)
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(4.0)
        writer.add_rope_scaling_orig_ctx_len(512)

    path = tmp_path / "yarn.gguf"
    written = write_gguf(path, "llama", llama_tensors(), meta)
    spec = read_gguf(path)
    assert spec.rope_scaling == RopeScaling(kind="yarn", factor=4.0, original_context=512)
    assert spec.max_context == 2048 and spec.embedding_bytes == written["token_embd.weight"]
    plain = tmp_path / "plain.gguf"
    write_gguf(plain, "llama", llama_tensors(), llama_meta)
    assert read_gguf(plain).rope_scaling is None


def _llama_with(writer: gguf.GGUFWriter, **overrides: object) -> None:
    """llama_meta, then some keys written again with another value (or type)."""
    llama_meta(writer)
    for key, value in overrides.items():
        full = f"llama.{key}"
        del writer.kv_data[0][full]
        if isinstance(value, str):
            writer.add_string(full, value)
        elif isinstance(value, list):
            writer.add_array(full, value)
        elif isinstance(value, float):
            writer.add_float32(full, value)
        else:
            writer.add_int64(full, value)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"block_count": "32"}, "'llama.block_count' must be a whole number (or one per layer), got \"32\""),
    ({"block_count": ["a", "b"]}, "'llama.block_count' must be a whole number"),
    ({"embedding_length": 64.5}, "'llama.embedding_length' must be a whole number"),
    ({"block_count": 0}, "'llama.block_count' must be at least 1"),
    ({"block_count": -2}, "'llama.block_count' must be at least 1"),
    ({"attention.head_count": 0}, "'llama.attention.head_count' must be at least 1"),
    ({"embedding_length": 2**40}, "at most 2,147,483,648"),
    ({"attention.head_count_kv": 8}, "'llama.attention.head_count_kv' (8) is more than the 4 attention heads"),
    ({"attention.head_count": 3, "attention.head_count_kv": 3}, "64 is not divisible by the 3 attention heads"),
])
def test_impossible_header_values_are_one_error_naming_the_key(tmp_path: Path, overrides: dict, message: str) -> None:
    path = tmp_path / "odd.gguf"
    write_gguf(path, "llama", llama_tensors(), lambda w: _llama_with(w, **overrides))
    with pytest.raises(GpuflyError) as info:
        read_gguf(path)
    assert message in info.value.message and info.value.hint


def test_more_experts_used_than_there_are_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "moe.gguf"

    def meta(writer: gguf.GGUFWriter) -> None:
        llama_meta(writer)
        writer.add_expert_count(4)
        writer.add_expert_used_count(8)

    write_gguf(path, "llama", llama_tensors(), meta)
    with pytest.raises(GpuflyError, match=r"8 experts used per token .* but only 4 experts"):
        read_gguf(path)


def test_a_file_without_tensors_is_not_a_model_of_zero_parameters(tmp_path: Path) -> None:
    path = tmp_path / "vocab-only.gguf"
    write_gguf(path, "llama", [], llama_meta)
    with pytest.raises(GpuflyError, match="holds no tensors"):
        read_gguf(path)


def test_special_files_are_refused_before_they_are_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GpuflyError, match="not a regular file"):
        read_gguf(fifo)
    with pytest.raises(GpuflyError, match="not a regular file"):
        read_gguf("/dev/zero")
