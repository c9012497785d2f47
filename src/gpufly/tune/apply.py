"""``gpufly.apply``: put a tuned configuration into the user's own training script.

The tuner measures each knob in a subprocess; this applies the winning knobs in the user's process with the
same knob objects (``gpufly.tune.knobs``): backend flags, channels_last, the optimizer rebuilt as
fused/foreach, torch.compile, a DataLoader rebuilt with the tuned workers, pinning and batch size, an
autocast context (with a GradScaler for fp16), and, for serving, pruning and quantization. What cannot be
applied from inside one process (the DDP launch, the workload's own options) is returned as instructions
rather than silently dropped.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError
from gpufly.tune.knobs import Setup, apply_all, names, parse

if TYPE_CHECKING:
    import torch


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
        from gpufly.tune.results import ResultsLog

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

    knobs = load_knobs(config)
    parsed = parse(knobs)
    if parsed.options:  # a typo of a knob would otherwise pass silently as a "workload option"
        own = ", ".join(parsed.options)
        warnings.warn(f"gpufly.apply: {own} {'is' if len(parsed.options) == 1 else 'are'} not among the knobs it "
                      f"applies ({', '.join(names())}); left in applied.todo as workload options",
                      UserWarning, stacklevel=2)
    device = torch.device(device) if device is not None else _device_of(model)
    setup = Setup(model.eval() if parsed.task == "infer" else model, device,
                  [optimizer] if optimizer is not None else [], in_trial=False)
    if loader is not None:
        setup.loader.num_workers, setup.loader.pin_memory = loader.num_workers, loader.pin_memory
    try:  # the knobs' own checks (an unknown mode, a GPU-only knob on a CPU, torchao missing) as one-line errors
        apply_all(setup, parsed)
    except ValueError as exc:
        raise GpuflyError(str(exc), "drop that knob from the configuration on this machine") from None
    setup.todo += [f"workload option {k}={v}: set it in your own code" for k, v in parsed.options.items()]
    rebuilt = _loader(loader, setup) if parsed.rebuilds_loader else loader
    return Applied(setup.model, setup.optimizers[0] if setup.optimizers else optimizer, rebuilt, knobs,
                   setup.autocast, setup.scaler(), setup.todo)


def _device_of(model: torch.nn.Module) -> torch.device:
    import torch

    parameter = next(iter(model.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _loader(loader: Any, setup: Setup) -> Any:
    """The same dataset, collate function, order and drop_last, with the tuned loader knobs."""
    if loader is None:
        return None
    if loader.batch_size is None:
        raise GpuflyError("the DataLoader batches in its dataset (batch_size=None)",
                          "set the tuned loader knobs where the batches are made")
    import torch

    return torch.utils.data.DataLoader(
        loader.dataset, batch_size=setup.batch_size or loader.batch_size, collate_fn=loader.collate_fn,
        drop_last=loader.drop_last, shuffle=isinstance(loader.sampler, torch.utils.data.RandomSampler),
        **setup.loader.arguments(setup.cuda))
