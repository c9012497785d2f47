"""The knobs the worker applies itself: fused/foreach optimizers, compile modes, torchao weight-only quantization."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from gpufly.tune.engine import code_for, default_knobs  # noqa: E402
from gpufly.tune.worker import _compiled, _for_inference, _with_implementation, build  # noqa: E402


def _steps(implementation: str | None) -> tuple[torch.optim.Optimizer, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-2}, {"params": model[2].parameters()}],
                            lr=1e-3, weight_decay=0.05)
    opt = _with_implementation(torch, opt, implementation)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return opt, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
def test_a_rebuilt_optimizer_keeps_its_groups_and_takes_the_same_steps(implementation: str) -> None:
    plain_opt, plain = _steps(None)
    opt, params = _steps(implementation)
    assert type(opt) is torch.optim.AdamW
    assert [g["lr"] for g in opt.param_groups] == [1e-2, 1e-3]
    assert all(g[implementation] is True and g["weight_decay"] == 0.05 for g in opt.param_groups)
    assert plain_opt.param_groups[0]["fused"] is None
    for a, b in zip(plain, params, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_an_optimizer_without_the_option_is_kept_and_a_typo_is_refused() -> None:
    embedding = torch.nn.Embedding(10, 4, sparse=True)
    sparse = torch.optim.SparseAdam(embedding.parameters())
    assert _with_implementation(torch, sparse, "fused") is sparse
    with pytest.raises(ValueError, match="foreach or fused"):
        _with_implementation(torch, sparse, "fusd")


def test_compile_modes() -> None:
    model = torch.nn.Linear(4, 4)
    assert _compiled(torch, model, None, cuda=False) is model
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        _compiled(torch, model, "reduce-overhead", cuda=False)
    with pytest.raises(ValueError, match="unknown compile mode"):
        _compiled(torch, model, "fastest", cuda=False)


def test_weight_only_int8_through_torchao_keeps_the_output_close() -> None:
    pytest.importorskip("torchao")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
    x = torch.randn(16, 256)
    with torch.no_grad():
        reference = model(x)
        quantized = _for_inference(torch, model, {"quantize": "int8_weight_only"}, cuda=False)
        out = quantized(x)
    assert type(quantized[0].weight) is not torch.nn.Parameter, "the weight is now a torchao quantized tensor"
    error = (out - reference).abs().max() / reference.abs().max()
    assert 0 < error < 0.02, "int8 weights change the output a little, not a lot"
    with pytest.raises(ValueError, match="CUDA GPUs only"):
        _for_inference(torch, torch.nn.Linear(8, 8), {"quantize": "int4_weight_only"}, cuda=False)


def test_weight_only_without_torchao_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)
    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(ValueError, match="pip install torchao"):
        _for_inference(torch, torch.nn.Linear(8, 8), {"quantize": "int8_weight_only"}, cuda=False)


def test_the_gpu_knob_list_has_compile_modes_and_weight_only_quantization(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpufly.tune.engine as engine

    monkeypatch.setattr(engine, "_has_torchao", lambda: True)
    transformer = build("transformer", {})
    train = default_knobs(transformer, cuda=True, ddp=0)
    assert train["compile"] == ["default", "reduce-overhead"] and train["optimizer_impl"] == ["foreach", "fused"]
    serve = default_knobs(transformer, cuda=True, ddp=0, task="infer")
    assert serve["quantize"] == ["int8_weight_only", "int4_weight_only", "fp8_weight_only"]
    monkeypatch.setattr(engine, "_has_torchao", lambda: False)
    cpu = default_knobs(transformer, cuda=False, ddp=0, task="infer")
    assert cpu["quantize"] == ["int8_dynamic"] and "compile" not in cpu
    assert code_for({"quantize": "int4_weight_only", "compile": "reduce-overhead"}) == [
        "model = model.to(torch.bfloat16); torchao.quantization.quantize_(model, torchao.quantization."
        "Int4WeightOnlyConfig(group_size=128, int4_packing_format='tile_packed_to_4d'))",
        "model = torch.compile(model, mode='reduce-overhead')"]


def test_the_int4_config_asks_for_the_layout_torchaos_own_cuda_kernel_runs() -> None:
    """torchao >= 0.15 defaults int4 to the plain layout, whose kernel needs fbgemm-gpu-genai."""
    ao = pytest.importorskip("torchao.quantization")
    from torchao.quantization.quantize_.workflows import Int4PackingFormat

    from gpufly.tune.worker import WEIGHT_ONLY, WEIGHT_ONLY_ARGS

    config = getattr(ao, WEIGHT_ONLY["int4_weight_only"])(**WEIGHT_ONLY_ARGS["int4_weight_only"])
    assert config.int4_packing_format == Int4PackingFormat.TILE_PACKED_TO_4D and config.group_size == 128


@pytest.mark.gpu
def test_cuda_graphs_and_weight_only_trials_run_on_a_gpu() -> None:
    from gpufly.tune.engine import Trial, run_in_subprocess

    graphs = run_in_subprocess("transformer", Trial("graphs", {"compile": "reduce-overhead"}), 600, steps=12)
    assert graphs.status == "ok", graphs.error
    recsys = run_in_subprocess("recsys", Trial("gpu", {"batched": True, "sparse": True, "fused": True}), 600,
                               steps=8, device="cuda")
    assert recsys.status == "ok" and recsys.eval_metric is not None, recsys.error
    pytest.importorskip("torchao")
    quantized = run_in_subprocess("transformer", Trial("int8", {"task": "infer", "quantize": "int8_weight_only"}),
                                  600, steps=8)
    assert quantized.status == "ok", quantized.error
    int4 = run_in_subprocess("transformer", Trial("int4", {"task": "infer", "quantize": "int4_weight_only"}), 600,
                             steps=8)
    assert int4.status == "ok", int4.error
