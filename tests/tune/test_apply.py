"""gpufly.apply: a tuned configuration, loaded from the results file or a dict, applied to the user's own objects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import gpufly  # noqa: E402
from gpufly.errors import GpuflyError  # noqa: E402
from gpufly.tune import ResultsLog, TrialResult  # noqa: E402


def _objects() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.utils.data.DataLoader]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, drop_last=True)
    return model, torch.optim.Adam(model.parameters(), lr=3e-3), loader


def test_the_best_safe_trial_of_a_results_file_is_applied(tmp_path: Path) -> None:
    results = tmp_path / "trials.jsonl"
    log = ResultsLog(results)
    log.append(TrialResult("baseline", {}, "ok", throughput=100.0, speedup=1.0))
    log.append(TrialResult("amp=bf16", {"amp": "bf16"}, "unsafe", throughput=900.0, speedup=9.0))
    log.append(TrialResult("mix", {"optimizer_impl": "foreach", "batch_size": 32, "num_workers": 1, "sparse": True},
                           "ok", throughput=150.0, speedup=1.5))
    model, opt, loader = _objects()
    with pytest.warns(UserWarning, match="sparse is not among the knobs"):
        applied = gpufly.apply(results, model, opt, loader)
    assert applied.knobs["batch_size"] == 32, "the unsafe 9x trial is never chosen"
    assert applied.optimizer is not opt and applied.optimizer.param_groups[0]["foreach"] is True
    assert applied.optimizer.param_groups[0]["lr"] == 3e-3
    assert applied.loader.batch_size == 32 and applied.loader.num_workers == 1 and applied.loader.drop_last
    assert isinstance(applied.loader.sampler, torch.utils.data.RandomSampler)
    assert applied.todo == ["workload option sparse=True: set it in your own code"]
    x, y = next(iter(applied.loader))
    with applied.autocast():
        loss = torch.nn.functional.mse_loss(applied.model(x), y)
    loss.backward()
    applied.optimizer.step()
    assert applied.scaler is None


def test_a_dict_or_the_json_of_tune_works_and_amp_gives_an_autocast(tmp_path: Path) -> None:
    document = tmp_path / "best.json"
    document.write_text(json.dumps({"best": {"knobs": {"amp": "bf16", "ddp": 2}}}))
    model, _, _ = _objects()
    applied = gpufly.apply(document, model)
    with applied.autocast():
        out = applied.model(torch.randn(2, 8))
    assert out.dtype == torch.bfloat16
    assert applied.todo[0].startswith("launch with torchrun --nproc-per-node=2")
    assert gpufly.apply({"amp": "bf16"}, model).knobs == {"amp": "bf16"}


def test_serving_knobs_prune_the_model(tmp_path: Path) -> None:
    model, _, _ = _objects()
    applied = gpufly.apply({"task": "infer", "prune": 0.5}, model)
    zeros = float((applied.model[0].weight == 0).float().mean())
    assert 0.45 < zeros < 0.55 and not applied.model.training


def _broken_json(folder: Path) -> Path:
    path = folder / "broken.json"
    path.write_text("{not json")
    return path


def _all_failed(folder: Path) -> Path:
    path = folder / "failed.jsonl"
    ResultsLog(path).append(TrialResult("baseline", {}, "failed", error="boom"))
    return path


def _empty(folder: Path) -> Path:
    path = folder / "empty.jsonl"
    path.write_text("")
    return path


@pytest.mark.parametrize(("config", "message"), [
    (lambda folder: folder / "absent.jsonl", "no tune configuration"),
    (_broken_json, "is not valid JSON"),
    (_all_failed, r"holds 1 trials and none is safe \(1 failed\)"),
    (_empty, "holds no tune trials"),
    (lambda folder: {"amp": "fp16"}, "needs a CUDA GPU"),
    (lambda folder: {"compile": "reduce-overhead"}, "needs a CUDA GPU"),
    (lambda folder: {"task": "infer", "quantize": "int4_weight_only"}, "CUDA GPUs only"),
    (lambda folder: {"optimizer_impl": "fusd"}, "cannot rebuild the optimizer"),
], ids=["absent", "broken-json", "none-safe", "empty", "fp16-on-cpu", "cuda-graphs-on-cpu", "int4-on-cpu",
        "optimizer-typo"])
def test_bad_configurations_are_clear_errors(tmp_path: Path, config, message: str) -> None:  # type: ignore[no-untyped-def]
    model, opt, _ = _objects()
    with pytest.raises(GpuflyError, match=message) as info:
        gpufly.apply(config(tmp_path), model, opt)
    assert info.value.hint


def test_an_unknown_knob_is_not_silently_accepted() -> None:
    model, _, _ = _objects()
    with pytest.warns(UserWarning, match=r"nosuch is not among the knobs it applies \(amp, batch_size"):
        applied = gpufly.apply({"nosuch": 1}, model)
    assert applied.todo == ["workload option nosuch=1: set it in your own code"]
