"""``gpufly.apply``: put a tuned configuration into the user's own training script.

The tuner measures each knob in a subprocess; this applies the winning knobs in the user's process,
the same way the worker applied them: backend flags, channels_last, the optimizer rebuilt as
fused/foreach, torch.compile, a DataLoader rebuilt with the tuned workers, pinning and batch size,
an autocast context (with a GradScaler for fp16), and, for serving, pruning and quantization.
Knobs that cannot be applied from inside one process (DDP, workload options) are returned as
instructions rather than silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError

INSTRUCTIONS = {"ddp": "launch with torchrun --nproc-per-node={v} and wrap the model in DistributedDataParallel",
                "ddp_hook": "register the {v} communication hook on the DistributedDataParallel model",
                "bucket_mb": "DistributedDataParallel(..., bucket_cap_mb={v})"}


@dataclass
class Applied:
    """What ``apply`` returns: use these in place of what was passed in."""

    model: Any
    optimizer: Any
    loader: Any
    knobs: dict[str, Any]
    autocast: Callable[[], Any]
    """A fresh autocast context for each forward pass (disabled when the configuration has no AMP)."""
    scaler: Any = None
    """A GradScaler for fp16 AMP (``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``)."""
    todo: list[str] = field(default_factory=list)
    """Knobs left to the user: DDP launch, the workload's own options."""


def load_knobs(config: str | Path | dict[str, Any]) -> dict[str, Any]:
    """The knobs of a configuration: a dict, a ``tune --json`` output or best-config JSON file, or a tune
    results file (.jsonl), whose best safe trial is taken."""
    if isinstance(config, dict):
        knobs = config.get("knobs", config)
        if "best" in config:
            knobs = (config["best"] or {}).get("knobs", {})
        return dict(knobs)
    path = Path(config)
    if not path.is_file():
        raise GpuflyError(f"no tune configuration at {path}", "pass the results file `gpufly tune` wrote, or a dict")
    if path.suffix == ".jsonl":
        from gpufly.tune.engine import ResultsLog

        return dict(ResultsLog(path).best_safe_or_error().knobs)
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GpuflyError(f"{path} is not valid JSON: {exc}", "pass a tune results .jsonl or a JSON of knobs") from None
    if not isinstance(data, dict):
        raise GpuflyError(f"{path} holds a {type(data).__name__}, not a configuration", 'e.g. {"amp": "bf16"}')
    return load_knobs(data)


def apply(config: str | Path | dict[str, Any], model: Any, optimizer: Any = None, loader: Any = None,
          device: Any = None) -> Applied:
    """Apply a tuned configuration to ``model`` (and its optimizer and DataLoader, when given).

    Call it before the first training step: the optimizer is rebuilt with its hyperparameters but no
    state. ``device`` defaults to the model's.
    """
    import torch

    from gpufly.tune.worker import GENERIC_KNOBS, _autocast, _compiled, _for_inference, _with_implementation

    knobs = load_knobs(config)
    device = torch.device(device) if device is not None else _device_of(torch, model)
    cuda = device.type == "cuda"
    todo = [INSTRUCTIONS[k].format(v=v) for k, v in knobs.items() if k in INSTRUCTIONS]
    own = [k for k in knobs if k not in GENERIC_KNOBS]
    todo += [f"workload option {k}={knobs[k]}: set it in your own code" for k in own]
    if own:  # a typo of a knob would otherwise pass silently as a "workload option"
        import warnings

        warnings.warn(f"gpufly.apply: {', '.join(own)} {'is' if len(own) == 1 else 'are'} not among the knobs it "
                      f"applies ({', '.join(sorted(GENERIC_KNOBS))}); left in applied.todo as workload options",
                      UserWarning, stacklevel=2)
    if knobs.get("tf32"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    if knobs.get("cudnn_benchmark"):
        torch.backends.cudnn.benchmark = True
    if optimizer is not None:
        try:
            optimizer = _with_implementation(torch, optimizer, knobs.get("optimizer_impl"))
        except (ValueError, RuntimeError) as exc:
            raise GpuflyError(f"cannot rebuild the optimizer: {exc}", "drop optimizer_impl from the config") from None
    try:  # the worker's own checks (an unknown mode, a GPU-only knob on a CPU, torchao missing) as one-line errors
        if knobs.get("task") == "infer":
            model = _for_inference(torch, model.eval(), knobs, cuda)
        elif knobs.get("channels_last"):
            model = model.to(memory_format=torch.channels_last)
        model = _compiled(torch, model, knobs.get("compile"), cuda)
    except ValueError as exc:
        raise GpuflyError(str(exc), "drop that knob from the configuration on this machine") from None
    amp = knobs.get("amp")
    if amp == "fp16" and not cuda:
        raise GpuflyError("this configuration uses fp16 AMP, which needs a CUDA GPU", "use amp=bf16 on a CPU")
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    return Applied(model, optimizer, _loader(torch, loader, knobs, cuda), knobs, lambda: _autocast(torch, device, amp),
                   scaler, todo)


def _device_of(torch: Any, model: Any) -> Any:
    parameter = next(iter(model.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _loader(torch: Any, loader: Any, knobs: dict[str, Any], cuda: bool) -> Any:
    """The same dataset, collate function, order and drop_last, with the tuned loader knobs."""
    keys = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "batch_size")
    if loader is None or not any(k in knobs for k in keys):
        return loader
    if loader.batch_size is None:
        raise GpuflyError("the DataLoader batches in its dataset (batch_size=None)",
                          "set the tuned loader knobs where the batches are made")
    from gpufly.tune.worker import loader_settings

    return torch.utils.data.DataLoader(
        loader.dataset, batch_size=int(knobs.get("batch_size", loader.batch_size)), collate_fn=loader.collate_fn,
        drop_last=loader.drop_last, shuffle=isinstance(loader.sampler, torch.utils.data.RandomSampler),
        **loader_settings(knobs, cuda, loader.num_workers, loader.pin_memory))
