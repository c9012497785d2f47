"""One tuner trial, in its own process: build the workload, apply the knobs, train, measure, print JSON.

Reads ``{"workload": ..., "knobs": {...}, "steps": N, "device": "cpu" | "cuda" | null}`` on stdin and
prints one JSON line: throughput (the median over the measured steps of each step's units per second,
warm-up steps excluded, the device synchronized before each clock reading, so one slow step, a
garbage collection or a neighbour's burst, does not move it; the mean over the whole loop is kept as
``mean_throughput``), the loss per step, the probe loss after training, the workload's evaluation
metric when it has one, peak memory and the share of time spent waiting for data.
Every trial trains on the same samples in the same order: ``steps`` baseline-sized batches' worth.
Anything that goes wrong ends the process with the error on stderr, which the engine records.
"""

from __future__ import annotations

import inspect
import json
import resource
import sys
import time
from typing import Any

GENERIC_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size", "amp", "tf32",
                 "channels_last", "compile", "cudnn_benchmark", "ddp", "ddp_hook", "bucket_mb", "task", "quantize",
                 "prune", "optimizer_impl")
"""Knobs the tuner applies itself; any other knob is passed to the workload's factory as an option."""

BUILTIN = {name: f"gpufly.tune.workloads.{name}:workload" for name in ("recsys", "cnn", "transformer")}


def load_factory(name: str) -> Any:
    from gpufly.errors import GpuflyError
    from gpufly.profile.attach import load_function

    target = BUILTIN.get(name, name)
    where, _, function = target.rpartition(":")
    if not where:
        raise GpuflyError(f"unknown workload {name!r}", f"built in: {', '.join(BUILTIN)}; or module:function")
    return load_function(where, function)


def build(name: str, options: dict[str, Any]) -> Any:
    factory = load_factory(name)
    takes_options = bool(inspect.signature(factory).parameters)
    if options and not takes_options:
        raise ValueError(f"{name} takes no options, but the trial sets {sorted(options)}")
    return factory(options) if takes_options else factory()


def _to(batch: Any, device: Any, non_blocking: bool) -> Any:
    import dataclasses

    if hasattr(batch, "to") and not dataclasses.is_dataclass(batch):
        return batch.to(device, non_blocking=non_blocking)
    if dataclasses.is_dataclass(batch):
        return dataclasses.replace(batch, **{f.name: _to(getattr(batch, f.name), device, non_blocking)
                                             for f in dataclasses.fields(batch)})
    if isinstance(batch, dict):
        return {k: _to(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(_to(v, device, non_blocking) for v in batch)
    return batch


def step_rates(seconds: list[float], items: list[int]) -> tuple[float | None, float | None]:
    """(median of the per-step rates, items over the summed time): the median is the throughput, since
    it ignores an outlier step; the mean says what the whole loop gave.

    >>> [round(r, 1) for r in step_rates([0.01, 0.01, 0.5, 0.01], [10, 10, 10, 10])]
    [1000.0, 75.5]
    """
    import statistics

    rates = [n / t for n, t in zip(items, seconds, strict=True) if t > 0]
    total = sum(seconds)
    if not rates or total <= 0:
        return None, None
    return statistics.median(rates), sum(items) / total


def _device(torch: Any, device: str | None, rank: int = 0) -> Any:
    """The trial's device: the one asked for, else CUDA when there is one (each DDP rank on its own GPU)."""
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: cpu or cuda")
    cuda = torch.cuda.is_available() if device is None else device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA GPU")
    return torch.device(f"cuda:{rank % torch.cuda.device_count()}" if cuda else "cpu")


def _evaluate(torch: Any, workload: Any, model: Any) -> float | None:
    """The workload's own metric on the trained model (eval mode, no gradients); None when it has none."""
    if workload.evaluate is None:
        return None
    was_training = model.training
    model.eval()
    with torch.no_grad():
        metric = float(workload.evaluate(model))
    model.train(was_training)
    return metric


def run(name: str, knobs: dict[str, Any], steps: int, device: str | None = None) -> dict[str, Any]:
    if knobs.get("task") == "infer":
        return run_inference(name, knobs, steps, device)
    import torch
    from torch.utils.data import DataLoader

    generic = {k: v for k, v in knobs.items() if k in GENERIC_KNOBS}
    options = {k: v for k, v in knobs.items() if k not in GENERIC_KNOBS}
    torch.manual_seed(0)
    probe_workload = build(name, options)
    base_batch = probe_workload.batch_size
    batch_size = int(generic.get("batch_size", base_batch))
    world, rank = _distributed(torch, device)
    if batch_size % world:
        raise ValueError(f"batch size {batch_size} does not split over {world} processes")
    per_rank = batch_size // world
    workload = probe_workload
    if probe_workload.batch_sampler_dataset:
        torch.manual_seed(0)  # the same initial weights as every other trial
        workload = build(name, {**options, "batch_size": per_rank})
    where = _device(torch, device, rank)
    cuda = where.type == "cuda"
    if generic.get("tf32"):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = bool(generic.get("cudnn_benchmark"))
    model = workload.model.to(where)
    if generic.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    implementation = generic.get("optimizer_impl")
    opts = [_with_implementation(torch, opt, implementation) for opt in _optimizers(torch, workload, model)]
    if world > 1:
        model = _ddp(torch, model, generic, cuda)
    runner = _compiled(torch, model, generic.get("compile"), cuda)
    amp = generic.get("amp")
    if amp == "fp16" and not cuda:
        raise ValueError("fp16 AMP needs a CUDA GPU")
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    loader_args = loader_settings(generic, cuda)
    # With DDP each process takes every world-th item (DistributedSampler, no shuffle), so one global step
    # covers the same samples as one single-process step.
    sampler = None
    if world > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(workload.dataset, num_replicas=world, rank=rank,
                                                                  shuffle=False)
    if workload.batch_sampler_dataset:
        loader = DataLoader(workload.dataset, batch_size=None, sampler=sampler, **loader_args)
    else:
        loader = DataLoader(workload.dataset, batch_size=per_rank, collate_fn=workload.collate, drop_last=True,
                            sampler=sampler, **loader_args)
    trial_steps = steps * base_batch // batch_size
    if trial_steps < 4:
        raise ValueError(f"batch {batch_size} leaves {trial_steps} steps of the {steps * base_batch} samples every "
                         f"trial trains on (4 at least, to time and judge it); give --steps "
                         f"{-(-4 * batch_size // base_batch)} or more to try it")
    warmup = min(3, trial_steps // 4)
    losses: list[float] = []
    seconds: list[float] = []
    counts: list[int] = []
    waited = 0.0
    fetch_started = time.perf_counter()
    for step, batch in enumerate(loader):
        if step >= trial_steps:
            break
        fetched = time.perf_counter()
        batch = _to(batch, where, non_blocking=loader_args["pin_memory"])
        with _autocast(torch, where, amp):
            loss = workload.loss(runner, batch)
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            for opt in opts:
                scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            for opt in opts:
                opt.step()
        losses.append(_mean_over_ranks(torch, loss.detach(), world))
        if cuda:
            torch.cuda.synchronize(where)
        ended = time.perf_counter()
        if step >= warmup:
            seconds.append(ended - fetch_started)
            counts.append((workload.items(batch) if workload.items else _count(batch)) * world)
            waited += fetched - fetch_started
        fetch_started = ended
    throughput, mean = step_rates(seconds, counts)
    probe_model = runner.module if world > 1 else runner
    return {"throughput": throughput, "mean_throughput": mean, "unit": workload.unit, "losses": losses,
            "eval_loss": _probe_loss(probe_workload, probe_model, where, base_batch), "world_size": world,
            "eval_metric": _evaluate(torch, probe_workload, probe_model),
            "higher_is_better": probe_workload.higher_is_better,
            "data_wait_share": waited / sum(seconds) if sum(seconds) > 0 else None, "steps": len(losses),
            "peak_memory_bytes": _peak_memory(torch, cuda), "batch_size": batch_size,
            "device_memory_bytes": torch.cuda.get_device_properties(where).total_memory if cuda else None}


def run_inference(name: str, knobs: dict[str, Any], steps: int, device: str | None = None) -> dict[str, Any]:
    """Serving: train ``steps`` plain fp32 steps (the same in every trial), then apply the inference knobs
    (dynamic int8 quantization, magnitude pruning, autocast, batch size, channels_last) and time forward passes.
    The probe loss after the knobs is what they cost in accuracy."""
    import torch
    from torch.utils.data import DataLoader

    generic = {k: v for k, v in knobs.items() if k in GENERIC_KNOBS}
    options = {k: v for k, v in knobs.items() if k not in GENERIC_KNOBS}
    torch.manual_seed(0)
    workload = build(name, options)
    if workload.batch_sampler_dataset:
        raise ValueError("inference trials need a per-sample dataset (batch size is the trial's knob)")
    where = _device(torch, device)
    cuda = where.type == "cuda"
    model = workload.model.to(where)
    opts = _optimizers(torch, workload, model)
    train = DataLoader(workload.dataset, batch_size=workload.batch_size, collate_fn=workload.collate, drop_last=True)
    for step, batch in enumerate(train):
        if step >= steps:
            break
        loss = workload.loss(model, _to(batch, where, False))
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss.backward()
        for opt in opts:
            opt.step()
    model = _compiled(torch, _for_inference(torch, model.eval(), generic, cuda), generic.get("compile"), cuda)
    amp = generic.get("amp")
    batch_size = int(generic.get("batch_size", workload.batch_size))
    serve = DataLoader(workload.dataset, batch_size=batch_size, collate_fn=workload.collate, drop_last=True,
                       num_workers=int(generic.get("num_workers", 0)))
    batches = max(4, steps * workload.batch_size // batch_size)
    seconds: list[float] = []
    counts: list[int] = []
    with torch.inference_mode(), _autocast(torch, where, amp):
        fetch_started = time.perf_counter()
        for step, batch in enumerate(serve):
            if step >= batches:
                break
            batch = _to(batch, where, False)
            workload.loss(model, batch)
            if cuda:
                torch.cuda.synchronize(where)
            ended = time.perf_counter()
            if step >= 1:  # the first forward pass warms up (and compiles)
                seconds.append(ended - fetch_started)
                counts.append(workload.items(batch) if workload.items else _count(batch))
            fetch_started = ended
        probe = _probe_loss(workload, model, where, workload.batch_size)
        metric = None if workload.evaluate is None else float(workload.evaluate(model))
    throughput, mean = step_rates(seconds, counts)
    return {"throughput": throughput, "mean_throughput": mean, "unit": workload.unit, "losses": [],
            "eval_loss": probe, "eval_metric": metric, "higher_is_better": workload.higher_is_better,
            "steps": batches, "data_wait_share": None, "peak_memory_bytes": _peak_memory(torch, cuda)}


def loader_settings(knobs: dict[str, Any], cuda: bool, workers: int = 0, pin_memory: bool = False) -> dict[str, Any]:
    """The DataLoader arguments the knobs set (pinning only with a GPU to copy to); ``workers`` and
    ``pin_memory`` are what the loader had before. Persistent workers by default: a trial or a training
    run should not pay for starting them each epoch."""
    workers = int(knobs.get("num_workers", workers))
    pin = bool(knobs.get("pin_memory", pin_memory)) and cuda
    settings: dict[str, Any] = {"num_workers": workers, "pin_memory": pin}
    if workers:
        settings["persistent_workers"] = bool(knobs.get("persistent_workers", True))
        settings["prefetch_factor"] = int(knobs.get("prefetch_factor", 2))
    return settings


def _optimizers(torch: Any, workload: Any, model: Any) -> list[Any]:
    """The workload's optimizer(s) as a list; Adam(lr=1e-3) when it names none."""
    opts = workload.optimizer(model) if workload.optimizer else torch.optim.Adam(model.parameters(), lr=1e-3)
    return opts if isinstance(opts, list) else [opts]


def _with_implementation(torch: Any, opt: Any, implementation: str | None) -> Any:
    """The same optimizer (class, parameter groups, hyperparameters) rebuilt as ``foreach`` (one kernel per
    group of tensors) or ``fused`` (one kernel for the whole update); one without the option, such as
    SparseAdam, is kept as it is. Built before the first step, so no optimizer state is lost."""
    if implementation is None:
        return opt
    if implementation not in ("foreach", "fused"):
        raise ValueError(f"unknown optimizer_impl {implementation!r}: foreach or fused")
    import inspect

    accepted = inspect.signature(type(opt)).parameters
    if implementation not in accepted:
        return opt
    choice = {"fused": implementation == "fused", "foreach": implementation == "foreach"}
    groups = [{**group, **choice} for group in opt.param_groups]
    defaults = {k: v for k, v in opt.defaults.items() if k in accepted and k != "params"}
    return type(opt)(groups, **(defaults | choice))


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile modes; ``reduce-overhead`` captures CUDA graphs, which need static shapes and a GPU."""


def _compiled(torch: Any, model: Any, mode: Any, cuda: bool) -> Any:
    """torch.compile in the trial's mode (True means the default mode)."""
    if not mode:
        return model
    mode = "default" if mode is True else str(mode)
    if mode not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {mode!r}: {', '.join(COMPILE_MODES)}")
    if mode == "reduce-overhead" and not cuda:
        raise ValueError("compile=reduce-overhead captures CUDA graphs and needs a CUDA GPU")
    return torch.compile(model, mode=mode)


def _autocast(torch: Any, device: Any, amp: str | None) -> Any:
    """The trial's autocast: bf16 or fp16, or a disabled context for fp32."""
    return torch.autocast(device.type, dtype=torch.bfloat16 if amp == "bf16" else torch.float16,
                          enabled=amp in ("bf16", "fp16"))


def _peak_memory(torch: Any, cuda: bool) -> int:
    """Peak GPU memory allocated, or the process's peak RSS on a CPU run."""
    if cuda:
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _for_inference(torch: Any, model: Any, generic: dict[str, Any], cuda: bool) -> Any:
    """Magnitude pruning (L1, per layer, made permanent), dynamic int8 quantization of Linear layers (CPU)."""
    fraction = generic.get("prune")
    if fraction:
        from torch.nn.utils import prune

        for module in model.modules():
            if isinstance(module, torch.nn.Linear | torch.nn.Conv2d):
                prune.l1_unstructured(module, "weight", amount=float(fraction))
                prune.remove(module, "weight")
    if generic.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    quantize = generic.get("quantize")
    if quantize == "int8_dynamic":
        if cuda:
            raise ValueError("dynamic int8 quantization runs on the CPU; on a GPU use torchao weight-only int8")
        import warnings

        from torch.ao.quantization import quantize_dynamic

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao points to torchao; the CPU path still works and is measured
            model = quantize_dynamic(model, _quantizable(torch, model), dtype=torch.qint8)
    elif quantize in WEIGHT_ONLY:
        model = _weight_only(model, quantize, cuda)
    elif quantize is not None:
        raise ValueError(f"unknown quantize {quantize!r}: int8_dynamic, {', '.join(WEIGHT_ONLY)}")
    return model


WEIGHT_ONLY = {"int8_weight_only": "Int8WeightOnlyConfig", "int4_weight_only": "Int4WeightOnlyConfig",
               "fp8_weight_only": "Float8WeightOnlyConfig"}
"""Weight-only quantization through torchao: the weights are stored low-precision and dequantized in
the matmul kernel, which pays off where decoding is bound by reading weights (GPUs, small batches)."""


WEIGHT_ONLY_ARGS: dict[str, dict[str, Any]] = {
    "int4_weight_only": {"group_size": 128, "int4_packing_format": "tile_packed_to_4d"}}
"""Since torchao 0.15, ``Int4WeightOnlyConfig()`` defaults to the ``plain`` packing, whose kernel comes from
fbgemm-gpu-genai; ``tile_packed_to_4d`` is the tinygemm layout that torchao's own CUDA kernel runs
(``Int4PackingFormat`` is a str enum, so the string is accepted in 0.15 to 0.18). Linear layers whose input
width is not a multiple of ``group_size`` are left in full precision by torchao."""


def _weight_only(model: Any, quantize: str, cuda: bool) -> Any:
    """torchao's ``quantize_`` with the weight-only config; int4 and fp8 have GPU kernels only. The int4
    kernel takes bf16 activations and weights, so the model is cast to bf16 first."""
    if quantize != "int8_weight_only" and not cuda:
        raise ValueError(f"quantize={quantize} has torchao kernels for CUDA GPUs only")
    try:
        import torchao.quantization as ao
    except ImportError:
        raise ValueError(f"quantize={quantize} needs torchao: pip install torchao") from None
    if quantize == "int4_weight_only":
        import torch

        model = model.to(torch.bfloat16)
    ao.quantize_(model, getattr(ao, WEIGHT_ONLY[quantize])(**WEIGHT_ONLY_ARGS.get(quantize, {})))
    return model


def _quantizable(torch: Any, model: Any) -> set[str]:
    """Linear layers by name, except inside Transformer layers, whose fast path reads ``linear.weight.device``
    (a quantized Linear's weight is a method), so quantizing them breaks the forward pass."""
    fused = (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer)
    inside = {name for name, m in model.named_modules() if isinstance(m, fused)}
    return {name for name, m in model.named_modules() if type(m) is torch.nn.Linear
            and not any(name.startswith(f"{parent}.") for parent in inside)}


def _distributed(torch: Any, device: str | None = None) -> tuple[int, int]:
    """(world size, rank); under torchrun, joins the process group: NCCL with a GPU per process, else gloo (NCCL
    refuses two ranks on one GPU, so processes sharing a GPU talk through gloo)."""
    import os

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        cuda = torch.cuda.is_available() if device is None else device == "cuda"
        gpus = torch.cuda.device_count() if cuda else 0
        torch.distributed.init_process_group(process_group_backend(cuda, world, gpus))
    return world, int(os.environ.get("RANK", "0"))


def process_group_backend(cuda: bool, world: int, gpus: int) -> str:
    """NCCL when every process has its own GPU, else gloo.

    >>> process_group_backend(True, 2, 8), process_group_backend(True, 2, 1), process_group_backend(False, 2, 0)
    ('nccl', 'gloo', 'gloo')
    """
    return "nccl" if cuda and gpus >= world else "gloo"


def _ddp(torch: Any, model: Any, generic: dict[str, Any], cuda: bool) -> Any:
    """DistributedDataParallel with the bucket size and gradient-compression hook the trial asks for."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=float(generic.get("bucket_mb", 25)))
    hook = generic.get("ddp_hook")
    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif hook is not None:
        raise ValueError(f"unknown ddp_hook {hook!r}: fp16, bf16 or powersgd")
    return ddp


def _mean_over_ranks(torch: Any, value: Any, world: int) -> float:
    if world > 1:
        value = value.clone()
        torch.distributed.all_reduce(value)
        value /= world
    return float(value)


def _count(batch: Any) -> int:
    if hasattr(batch, "__len__") and not isinstance(batch, list | tuple | dict):
        return len(batch)
    first = batch[0] if isinstance(batch, list | tuple) else next(iter(batch.values()))
    return int(first.shape[0])


def _probe_loss(workload: Any, model: Any, device: Any, batch_size: int, batches: int = 4) -> float:
    """The loss on the dataset's first samples at the baseline batch size, the same for every trial."""
    import torch

    dataset = workload.dataset
    if workload.batch_sampler_dataset:
        probe = [dataset[k] for k in range(batches)]
    else:
        probe = [(workload.collate or torch.utils.data.default_collate)(
            [dataset[i] for i in range(k * batch_size, (k + 1) * batch_size)]) for k in range(batches)]
    model.eval()
    with torch.no_grad():
        values = [float(workload.loss(model, _to(b, device, False))) for b in probe]
    model.train()
    return sum(values) / len(values)


def main() -> None:
    """The request comes on stdin, or in GPUFLY_TUNE_REQUEST under torchrun (which does not pass stdin on)."""
    import os

    request = json.loads(os.environ.get("GPUFLY_TUNE_REQUEST") or sys.stdin.read())
    result = run(request["workload"], request.get("knobs", {}), int(request.get("steps", 30)), request.get("device"))
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result), flush=True)
    import torch

    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
