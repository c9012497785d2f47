"""The knob registry: what is offered where, the code each prints, and how each applies (the same in a trial and in
``gpufly.apply``): fused/foreach optimizers, compile modes, TF32, DDP, torchao weight-only quantization."""

from __future__ import annotations

import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gpufly.errors import GpuflyError  # noqa: E402
from gpufly.tune import KNOBS, Target, Workload, WorkloadOption, code_for, offered  # noqa: E402
from gpufly.tune.knobs import (  # noqa: E402
    WEIGHT_ONLY,
    WEIGHT_ONLY_ARGS,
    Quantize,
    Setup,
    apply_all,
    compiled,
    parse,
    with_implementation,
)


def _workload(model: torch.nn.Module | None = None, options: tuple[WorkloadOption, ...] = ()) -> Workload:
    return Workload(name="w", model=model or torch.nn.Linear(4, 1), dataset=[], loss=lambda m, b: b, batch_size=32,
                    options=options)


CONV = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten())


def test_every_knob_has_one_name_a_phase_and_a_line_to_paste() -> None:
    names = [knob.name for knob in KNOBS]
    assert len(names) == len(set(names)) and "task" not in names
    for knob in KNOBS:
        line = knob.code(True)
        assert line and "{" not in line.replace("{torch.nn.Linear}", ""), knob.name


def test_every_knob_class_is_in_the_registry() -> None:
    """A knob class left out of KNOBS would pass its name to the workload as an option; none is."""
    from gpufly.tune.knobs import DistributedKnob, GpuTrainingSwitch, Knob

    def leaves(cls: type) -> set[type]:
        subclasses = set(cls.__subclasses__())
        return {leaf for sub in subclasses for leaf in (leaves(sub) or {sub})}

    assert {type(knob) for knob in KNOBS} == leaves(Knob)
    assert not {DistributedKnob, GpuTrainingSwitch} & {type(knob) for knob in KNOBS}


@pytest.mark.parametrize(("target", "expected"), [
    (Target(_workload(), cuda=False), {"num_workers": [2], "batch_size": [128], "amp": ["bf16"],
                                       "optimizer_impl": ["foreach", "fused"]}),
    (Target(_workload(CONV), cuda=False), {"num_workers": [2], "batch_size": [128], "amp": ["bf16"],
                                           "optimizer_impl": ["foreach", "fused"], "channels_last": [True]}),
    (Target(_workload(), cuda=True), {"num_workers": [2], "batch_size": [128], "amp": ["bf16", "fp16"],
                                      "compile": ["default", "reduce-overhead"], "optimizer_impl": ["foreach", "fused"],
                                      "pin_memory": [True], "tf32": [True], "cudnn_benchmark": [True]}),
    (Target(_workload(), cuda=False, ddp=2), {"num_workers": [2], "batch_size": [128], "amp": ["bf16"], "ddp": [2],
                                              "ddp_hook": ["fp16", "powersgd"], "bucket_mb": [5, 100],
                                              "optimizer_impl": ["foreach", "fused"]}),
])
def test_the_knobs_offered_fit_the_device_the_model_and_ddp(target: Target, expected: dict[str, list[Any]]) -> None:
    """In the registry's order, which is the order the search tries them."""
    plan = offered(target)
    assert list(plan) == list(expected) and plan == expected


def test_on_a_gpu_with_ddp_bf16_compression_is_offered_too() -> None:
    assert offered(Target(_workload(), cuda=True, ddp=2))["ddp_hook"] == ["fp16", "powersgd", "bf16"]


@pytest.mark.parametrize(("cuda", "torchao", "expected"), [
    (False, False, ["int8_dynamic"]),
    (False, True, ["int8_dynamic", "int8_weight_only"]),
    (True, True, ["int8_weight_only", "int4_weight_only", "fp8_weight_only"]),
    (True, False, []),
])
def test_serving_offers_the_quantizations_this_machine_has_kernels_for(cuda: bool, torchao: bool,
                                                                      expected: list[str]) -> None:
    target = Target(_workload(), cuda=cuda, task="infer")
    assert Quantize(torchao_installed=lambda: torchao).offered(target) == expected


def test_serving_offers_no_training_knobs_and_the_workload_options_come_last() -> None:
    option = WorkloadOption("sparse", [False, True], "compute", "sparse gradients")
    plan = offered(Target(_workload(options=(option,)), cuda=False, task="infer"))
    assert {"optimizer_impl", "tf32", "ddp", "pin_memory"}.isdisjoint(plan)
    assert plan["prune"] == [0.3] and list(plan)[-1] == "sparse" and plan["sparse"] == [True]


def test_a_workload_option_named_like_a_knob_is_refused() -> None:
    option = WorkloadOption("amp", [None, "bf16"], "compute", "its own autocast")
    with pytest.raises(GpuflyError, match="workload option 'amp' has the name of a gpufly knob"):
        offered(Target(_workload(options=(option,)), cuda=False))


def test_a_configuration_is_parsed_once_into_knobs_in_phase_order_and_workload_options() -> None:
    config = parse({"compile": "default", "sparse": True, "ddp_hook": "fp16", "task": "infer", "bucket_mb": 5,
                    "prune": 0.3, "channels_last": True, "quantize": "int8_dynamic"})
    assert [knob.name for knob, _ in config.settings] == ["bucket_mb", "prune", "channels_last", "quantize",
                                                          "ddp_hook", "compile"]
    assert config.options == {"sparse": True} and config.task == "infer"


def test_code_for_prints_each_knob_s_line_and_names_workload_options() -> None:
    assert code_for({"quantize": "int4_weight_only", "compile": "reduce-overhead", "task": "infer", "lr": 4e-3}) == [
        "model = model.to(torch.bfloat16); torchao.quantization.quantize_(model, torchao.quantization."
        "Int4WeightOnlyConfig(group_size=128, int4_packing_format='tile_packed_to_4d'))",
        "model = torch.compile(model, mode='reduce-overhead')",
        "workload option: lr=0.004"]
    assert code_for({"amp": "fp16", "compile": True})[0].endswith("GradScaler('cuda') for the backward and step")
    assert code_for({"compile": True}) == ["model = torch.compile(model, mode='default')"]
    assert code_for({"tf32": True}) == ["torch.backends.cuda.matmul.fp32_precision = 'tf32'; "
                                        "torch.backends.cudnn.conv.fp32_precision = 'tf32'"]


def test_tf32_is_switched_through_the_fp32_precision_api() -> None:
    matmul, conv = torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    try:
        apply_all(Setup(torch.nn.Linear(2, 2), torch.device("cpu")), parse({"tf32": True}))
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"
        assert torch.backends.cudnn.conv.fp32_precision == "tf32"
    finally:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = matmul, conv


def test_in_a_trial_ddp_knobs_configure_the_run_and_in_the_user_s_process_they_are_instructions() -> None:
    knobs = {"ddp": 2, "ddp_hook": "powersgd", "bucket_mb": 5}
    trial = apply_all(Setup(torch.nn.Linear(2, 2), torch.device("cpu"), world=1), parse(knobs))
    assert trial.bucket_mb == 5.0 and trial.todo == [] and isinstance(trial.model, torch.nn.Linear)
    user = apply_all(Setup(torch.nn.Linear(2, 2), torch.device("cpu"), in_trial=False), parse(knobs))
    assert user.todo == ["DistributedDataParallel(..., bucket_cap_mb=5)",
                         "launch with torchrun --nproc-per-node=2 and wrap the model in DistributedDataParallel",
                         "register the powersgd communication hook on the DistributedDataParallel model"]
    with pytest.raises(ValueError, match="fp16, bf16 or powersgd"):
        apply_all(Setup(torch.nn.Linear(2, 2), torch.device("cpu")), parse({"ddp_hook": "int3"}))


def test_the_loop_knobs_set_the_loader_the_batch_and_autocast() -> None:
    setup = apply_all(Setup(torch.nn.Linear(2, 2), torch.device("cpu")),
                      parse({"num_workers": 2, "pin_memory": True, "batch_size": 64, "amp": "bf16"}))
    assert setup.loader.arguments(cuda=False) == {"num_workers": 2, "pin_memory": False, "persistent_workers": True,
                                                  "prefetch_factor": 2}
    assert setup.batch_size == 64 and setup.scaler() is None
    with setup.autocast():
        assert setup.model(torch.randn(1, 2)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="fp16 AMP needs a CUDA GPU"):
        apply_all(Setup(torch.nn.Linear(2, 2), torch.device("cpu")), parse({"amp": "fp16"}))


def _steps(implementation: str | None) -> tuple[torch.optim.Optimizer, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-2}, {"params": model[2].parameters()}],
                            lr=1e-3, weight_decay=0.05)
    opt = with_implementation(opt, implementation)
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
    assert with_implementation(sparse, "fused") is sparse
    with pytest.raises(ValueError, match="foreach or fused"):
        with_implementation(sparse, "fusd")


@pytest.mark.parametrize(("mode", "message"), [
    ("reduce-overhead", "needs a CUDA GPU"),
    ("fastest", "unknown compile mode"),
])
def test_compile_modes_that_cannot_run_are_refused(mode: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        compiled(torch.nn.Linear(4, 4), mode, cuda=False)


def test_no_compile_mode_leaves_the_model_as_it_is() -> None:
    model = torch.nn.Linear(4, 4)
    assert compiled(model, None, cuda=False) is model


def _quantized(value: str, model: torch.nn.Module) -> torch.nn.Module:
    return apply_all(Setup(model, torch.device("cpu")), parse({"task": "infer", "quantize": value})).model


def test_weight_only_int8_through_torchao_keeps_the_output_close() -> None:
    pytest.importorskip("torchao")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).eval()
    x = torch.randn(16, 256)
    with torch.no_grad():
        reference = model(x)
        quantized = _quantized("int8_weight_only", model)
        out = quantized(x)
    assert type(quantized[0].weight) is not torch.nn.Parameter, "the weight is now a torchao quantized tensor"
    error = (out - reference).abs().max() / reference.abs().max()
    assert 0 < error < 0.02, "int8 weights change the output a little, not a lot"


def test_gpu_only_quantization_is_refused_on_a_cpu() -> None:
    with pytest.raises(ValueError, match="CUDA GPUs only"):
        _quantized("int4_weight_only", torch.nn.Linear(8, 8))


def test_weight_only_without_torchao_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)
    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(ValueError, match="pip install torchao"):
        _quantized("int8_weight_only", torch.nn.Linear(8, 8))


def test_the_int4_config_asks_for_the_layout_torchaos_own_cuda_kernel_runs() -> None:
    """torchao >= 0.15 defaults int4 to the plain layout, whose kernel needs fbgemm-gpu-genai."""
    ao = pytest.importorskip("torchao.quantization")
    from torchao.quantization.quantize_.workflows import Int4PackingFormat

    config = getattr(ao, WEIGHT_ONLY["int4_weight_only"])(**WEIGHT_ONLY_ARGS["int4_weight_only"])
    assert config.int4_packing_format == Int4PackingFormat.TILE_PACKED_TO_4D and config.group_size == 128
