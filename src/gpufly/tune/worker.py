"""One tuner trial, in its own process: build the workload, apply the knobs, train, measure, print JSON.

Reads ``{"workload": ..., "knobs": {...}, "steps": N, "device": "cpu" | "cuda" | null}`` on stdin and
prints one JSON line: throughput (the units of the measured steps over their wall time, warm-up steps
excluded, the device synchronized before each clock reading: a stall, a garbage collection or a wait for
data counts, since the user's run pays for it; the median of the per-step rates is kept beside it as
``median_step_throughput``, a diagnostic that a gap between the two points at stalls), the loss per step,
the probe loss after training, the workload's evaluation metric when it has one, peak memory and the share
of time spent waiting for data.
Every trial trains on the same samples in the same order: ``steps`` baseline-sized batches' worth; ``seed``
(0 unless the request gives one) sets the initial weights, so the tuner can train the baseline twice and see
how far the probe loss moves from the seed alone.
The knobs apply themselves (``gpufly.tune.knobs``); this module builds the run they change and times it.
Anything that goes wrong ends the process with the error on stderr, which the parent records.
Only the parent's ``python -m gpufly.tune.worker`` imports this module; torch is imported where it is used.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError
from gpufly.loading import die_with_parent
from gpufly.tune.energy import NO_NVML, EnergyWindow, GpuEnergy, per_gpu_total, per_unit
from gpufly.tune.knobs import BatchSize, Configuration, Setup, Target, apply_all, offered, parse
from gpufly.tune.trial import TUNER_PID
from gpufly.tune.workload import SearchSpace, Workload, build

if TYPE_CHECKING:
    import torch


def search_space(name: str, cuda: bool, task: str, ddp: int) -> SearchSpace:
    """What the tuner searches on workload ``name``: built here, in the child that
    ``gpufly.tune.workload.search_space`` starts, so that nothing the workload's code does can end or hang the
    tuner. Each way the build can fail is one GpuflyError naming the workload."""
    built = _build(name)
    knobs = offered(Target(built, cuda, task, ddp))
    try:
        json.dumps(knobs)
    except (TypeError, ValueError) as exc:
        raise GpuflyError(f"the workload {name} offers option values that are not JSON ({exc})",
                          "each trial gets its options as JSON: give WorkloadOption values that are numbers, "
                          "strings, booleans or lists of them") from None
    return SearchSpace(knobs, built.batch_sampler_dataset)


def _build(name: str) -> Workload:
    """The workload without options, or a GpuflyError that says what is wrong with it."""
    try:
        built = build(name, {})
    except GpuflyError:
        raise
    except SyntaxError as exc:
        where = f"{exc.filename}, line {exc.lineno}" if exc.filename else f"line {exc.lineno}"
        raise GpuflyError(f"the workload {name} has a syntax error: {exc.msg} ({where})",
                          f"fix the code there; `python -m py_compile {exc.filename or 'FILE'}` shows it") from None
    except Exception as exc:
        raise GpuflyError(f"the workload {name} failed to build: {type(exc).__name__}: {exc}",
                          "it must return a gpufly.tune.workload.Workload (see docs/tune.md)") from None
    if not isinstance(built, Workload):
        raise GpuflyError(f"the workload {name} returned {type(built).__name__}, not a Workload",
                          "it must return gpufly.tune.workload.Workload(model=..., dataset=..., loss=...)")
    return built


def to_device(batch: Any, device: torch.device, non_blocking: bool) -> Any:
    """A batch (tensor, dataclass, dict, list or tuple of them, or anything with ``to``) on ``device``."""
    if hasattr(batch, "to") and not dataclasses.is_dataclass(batch):
        return batch.to(device, non_blocking=non_blocking)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return dataclasses.replace(batch, **{f.name: to_device(getattr(batch, f.name), device, non_blocking)
                                             for f in dataclasses.fields(batch)})
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, list | tuple):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def step_rates(seconds: list[float], items: list[int]) -> tuple[float | None, float | None]:
    """(items over the summed time of the steps, median of the per-step rates): the first is the throughput,
    stalls included, as the user's run would get it; the median is a diagnostic that hides the stalls.

    >>> [round(r, 1) for r in step_rates([0.01, 0.01, 0.5, 0.01], [10, 10, 10, 10])]
    [75.5, 1000.0]
    """
    rates = [n / t for n, t in zip(items, seconds, strict=True) if t > 0]
    total = sum(seconds)
    if not rates or total <= 0:
        return None, None
    return sum(items) / total, statistics.median(rates)


@dataclass
class StepTimer:
    """Times each step from the end of the last one (so the wait for data is inside it), skipping the warm-up
    steps; ``clock`` is injectable so the timing logic is tested without sleeping."""

    warmup: int
    clock: Callable[[], float] = time.perf_counter
    seconds: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    waited: float = 0.0
    _last: float = 0.0
    _fetched: float | None = None

    def start(self) -> None:
        self._last = self.clock()

    def fetched(self) -> None:
        """The batch came from the loader: the time since the last step's end was spent waiting for it."""
        self._fetched = self.clock()

    def ended(self, step: int, items: int) -> None:
        """Step ``step`` ended (the device synchronized) having processed ``items`` units."""
        now = self.clock()
        if step >= self.warmup:
            self.seconds.append(now - self._last)
            self.counts.append(items)
            self.waited += (self._fetched or self._last) - self._last
        self._last, self._fetched = now, None

    def rates(self) -> tuple[float | None, float | None]:
        return step_rates(self.seconds, self.counts)

    def data_wait_share(self) -> float | None:
        total = sum(self.seconds)
        return self.waited / total if total > 0 else None


def device_for(device: str | None, rank: int = 0) -> torch.device:
    """The trial's device: the one asked for, else CUDA when there is one (each DDP rank on its own GPU)."""
    import torch

    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: cpu or cuda")
    cuda = torch.cuda.is_available() if device is None else device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ValueError("device cuda was asked for, but torch sees no CUDA GPU")
    return torch.device(f"cuda:{rank % torch.cuda.device_count()}" if cuda else "cpu")


def run(name: str, knobs: dict[str, Any], steps: int, device: str | None = None, seed: int = 0) -> dict[str, Any]:
    """One trial of workload ``name`` with ``knobs``: its measurement as the JSON the parent reads."""
    config = parse(knobs)
    if config.task == "infer":
        return run_inference(name, config, steps, device, seed)
    return run_training(name, config, steps, device, seed)


def run_training(name: str, config: Configuration, steps: int, device: str | None = None,
                 seed: int = 0) -> dict[str, Any]:
    """Train ``steps`` baseline-sized batches' worth of samples with the knobs applied, timing each step."""
    import torch

    torch.manual_seed(seed)
    probe_workload = build(name, config.options)
    base_batch = probe_workload.batch_size
    batch_size = int(config.value(BatchSize, base_batch))
    world, rank = _distributed(device)
    if batch_size % world:
        raise ValueError(f"batch size {batch_size} does not split over {world} processes")
    per_rank = batch_size // world
    workload = probe_workload
    if probe_workload.batch_sampler_dataset:
        torch.manual_seed(seed)  # the same initial weights as every other trial of this seed
        workload = build(name, {**config.options, "batch_size": per_rank})
    where = device_for(device, rank)
    model = workload.model.to(where)
    setup = apply_all(Setup(model, where, optimizers_of(workload, model), world=world), config)
    scaler = setup.scaler()
    loader = _training_loader(workload, setup, per_rank, rank)
    trial_steps = steps * base_batch // batch_size
    if trial_steps < 4:
        raise ValueError(f"batch {batch_size} leaves {trial_steps} steps of the {steps * base_batch} samples every "
                         f"trial trains on (4 at least, to time and judge it); give --steps "
                         f"{-(-4 * batch_size // base_batch)} or more to try it")
    timer = StepTimer(warmup=min(3, trial_steps // 4))
    energy = energy_window(setup.cuda, where)
    losses: list[float] = []
    non_blocking = loader.pin_memory
    timer.start()
    for step, batch in enumerate(loader):
        if step >= trial_steps:
            break
        timer.fetched()
        batch = to_device(batch, where, non_blocking)
        with setup.autocast():
            loss = workload.loss(setup.model, batch)
        _step(setup.optimizers, loss, scaler)
        losses.append(_mean_over_ranks(loss.detach(), world))
        if setup.cuda:
            torch.cuda.synchronize(where)
        timer.ended(step, count_items(workload, batch) * world)
        if step == timer.warmup - 1:  # the measured steps start here, as the timer's do
            energy.start()
    energy.stop()
    throughput, median_step = timer.rates()
    probe_model = model if world > 1 else setup.model  # under DDP, the module it wraps
    return {"throughput": throughput, "median_step_throughput": median_step, "unit": workload.unit, "losses": losses,
            "eval_loss": _probe_loss(probe_workload, probe_model, where, base_batch), "world_size": world,
            "nodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),
            "eval_metric": _evaluate(probe_workload, probe_model),
            "higher_is_better": probe_workload.higher_is_better, "data_wait_share": timer.data_wait_share(),
            "steps": len(losses), "peak_memory_bytes": _peak_memory(setup.cuda), "batch_size": batch_size,
            "device_memory_bytes": torch.cuda.get_device_properties(where).total_memory if setup.cuda else None,
            **energy_figures(energy, sum(timer.counts), world, setup.cuda, where)}


def _training_loader(workload: Workload, setup: Setup, per_rank: int, rank: int) -> torch.utils.data.DataLoader:
    """The workload's data with the knobs' loader settings. With DDP each process takes every world-th item
    (DistributedSampler, no shuffle), so one global step covers the same samples as one single-process step."""
    import torch
    from torch.utils.data import DataLoader

    arguments = setup.loader.arguments(setup.cuda)
    sampler: torch.utils.data.Sampler[int] | None = None
    if setup.world > 1:
        sampler = torch.utils.data.distributed.DistributedSampler(workload.dataset, num_replicas=setup.world,
                                                                  rank=rank, shuffle=False)
    if workload.batch_sampler_dataset:
        return DataLoader(workload.dataset, batch_size=None, sampler=sampler, **arguments)
    return DataLoader(workload.dataset, batch_size=per_rank, collate_fn=workload.collate, drop_last=True,
                      sampler=sampler, **arguments)


def _step(optimizers: list[torch.optim.Optimizer], loss: torch.Tensor, scaler: Any) -> None:
    """Backward and one optimizer step, through the GradScaler with fp16 AMP."""
    for opt in optimizers:
        opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        for opt in optimizers:
            opt.step()
        return
    scaler.scale(loss).backward()
    for opt in optimizers:
        scaler.step(opt)
    scaler.update()


def run_inference(name: str, config: Configuration, steps: int, device: str | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """Serving: train ``steps`` plain fp32 steps (the same in every trial), then apply the inference knobs
    (dynamic int8 quantization, magnitude pruning, autocast, batch size, channels_last) and time forward passes.
    The probe loss after the knobs is what they cost in accuracy."""
    import torch
    from torch.utils.data import DataLoader

    torch.manual_seed(seed)
    workload = build(name, config.options)
    if workload.batch_sampler_dataset:
        raise ValueError("inference trials need a per-sample dataset (batch size is the trial's knob)")
    where = device_for(device)
    model = workload.model.to(where)
    opts = optimizers_of(workload, model)
    train = DataLoader(workload.dataset, batch_size=workload.batch_size, collate_fn=workload.collate, drop_last=True)
    for step, batch in enumerate(train):
        if step >= steps:
            break
        _step(opts, workload.loss(model, to_device(batch, where, False)), None)
    setup = apply_all(Setup(model.eval(), where), config)
    batch_size = setup.batch_size or workload.batch_size
    serve = DataLoader(workload.dataset, batch_size=batch_size, collate_fn=workload.collate, drop_last=True,
                       **setup.loader.arguments(setup.cuda))
    batches = max(4, steps * workload.batch_size // batch_size)
    timer = StepTimer(warmup=1)  # the first forward pass warms up (and compiles)
    energy = energy_window(setup.cuda, where)
    with torch.inference_mode(), setup.autocast():
        timer.start()
        for step, batch in enumerate(serve):
            if step >= batches:
                break
            batch = to_device(batch, where, False)
            workload.loss(setup.model, batch)
            if setup.cuda:
                torch.cuda.synchronize(where)
            timer.ended(step, count_items(workload, batch))
            if step == timer.warmup - 1:
                energy.start()
        energy.stop()
        probe = _probe_loss(workload, setup.model, where, workload.batch_size)
        metric = None if workload.evaluate is None else float(workload.evaluate(setup.model))
    throughput, median_step = timer.rates()
    return {"throughput": throughput, "median_step_throughput": median_step, "unit": workload.unit, "losses": [],
            "eval_loss": probe, "eval_metric": metric, "higher_is_better": workload.higher_is_better,
            "steps": batches, "data_wait_share": None, "peak_memory_bytes": _peak_memory(setup.cuda),
            **energy_figures(energy, sum(timer.counts), 1, setup.cuda, where)}


def energy_window(cuda: bool, where: torch.device) -> EnergyWindow:
    """The trial GPU's energy counter to read around the measured steps, or why there is none: a CPU run has no
    NVML to read, and says so rather than guess."""
    if not cuda:
        return EnergyWindow(None, NO_NVML)
    from gpufly.hw.nvml import Nvml

    counter = GpuEnergy.open(Nvml(), gpu_uuid(where))
    return EnergyWindow(None, counter) if isinstance(counter, str) else EnergyWindow(counter.read_mj)


def gpu_uuid(where: torch.device) -> str | None:
    """The GPU's UUID as NVML spells it ("GPU-..."), from torch, whose index ``CUDA_VISIBLE_DEVICES`` renumbers."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(where), "uuid", None)
    return None if uuid is None else f"GPU-{uuid}"


def energy_figures(energy: EnergyWindow, units: int, world: int, cuda: bool, where: torch.device) -> dict[str, Any]:
    """The trial's joules (every rank's GPU, each once), per unit of the measured steps, or the reason for None.
    Under DDP every rank takes part in the gather, so all ranks call this."""
    joules = energy.joules
    if world > 1 and cuda:
        import torch

        torch.cuda.set_device(where)  # the gather's tensors go on this rank's own GPU under NCCL
        readings: list[Any] = [None] * world
        torch.distributed.all_gather_object(readings, (gpu_uuid(where), joules))
        joules = per_gpu_total(readings)
    return {"energy_j": joules, "joules_per_unit": per_unit(joules, units),
            "energy_note": None if joules is not None else energy.note or "not read on every rank's GPU"}


def optimizers_of(workload: Workload, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
    """The workload's optimizer(s) as a list; Adam(lr=1e-3) when it names none."""
    import torch

    opts = workload.optimizer(model) if workload.optimizer else torch.optim.Adam(model.parameters(), lr=1e-3)
    return opts if isinstance(opts, list) else [opts]


def _evaluate(workload: Workload, model: torch.nn.Module) -> float | None:
    """The workload's own metric on the trained model (eval mode, no gradients); None when it has none."""
    import torch

    if workload.evaluate is None:
        return None
    was_training = model.training
    model.eval()
    with torch.no_grad():
        metric = float(workload.evaluate(model))
    model.train(was_training)
    return metric


def _peak_memory(cuda: bool) -> int:
    """Peak GPU memory allocated, or the process's peak RSS on a CPU run."""
    import torch

    if cuda:
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _distributed(device: str | None = None) -> tuple[int, int]:
    """(world size, rank); under torchrun, joins the process group: NCCL with a GPU per process, else gloo (NCCL
    refuses two ranks on one GPU, so processes sharing a GPU talk through gloo)."""
    import torch

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


def _mean_over_ranks(value: torch.Tensor, world: int) -> float:
    if world > 1:
        import torch

        value = value.clone()
        torch.distributed.all_reduce(value)
        value /= world
    return float(value)


def count_items(workload: Workload, batch: Any) -> int:
    """The units of throughput in a batch: the workload's own count, else the batch's first dimension."""
    if workload.items is not None:
        return workload.items(batch)
    if hasattr(batch, "__len__") and not isinstance(batch, list | tuple | dict):
        return len(batch)
    first = batch[0] if isinstance(batch, list | tuple) else next(iter(batch.values()))
    return int(first.shape[0])


def _probe_loss(workload: Workload, model: torch.nn.Module, device: torch.device, batch_size: int,
                batches: int = 4) -> float:
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
        values = [float(workload.loss(model, to_device(b, device, False))) for b in probe]
    model.train()
    return sum(values) / len(values)


def die_with_launcher(tuner: int) -> None:
    """A torchrun rank: have the kernel SIGKILL it when its launcher dies.

    torchrun starts each rank in a session of its own (``start_new_session`` in torch's SubprocessHandler), so
    neither the kill of the trial's process group nor the launcher's own death signal reaches a rank; each arms
    its own. A launcher that is no longer the tuner's child (the tuner died while this rank was starting) is
    already on its way out, and so is the rank.
    """
    launcher = os.getppid()
    owner = parent_of(launcher)
    if owner is not None and owner != tuner:
        os._exit(1)
    die_with_parent(launcher)


def parent_of(pid: int) -> int | None:
    """The parent of process ``pid`` from /proc (None where there is no /proc to read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as proc:
            stat = proc.read()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])  # after "pid (name)": state, then the parent's pid


def main() -> None:
    """The request comes on stdin, or in GPUFLY_TUNE_REQUEST under torchrun (which does not pass stdin on)."""
    if "LOCAL_RANK" in os.environ and os.environ.get(TUNER_PID):
        die_with_launcher(int(os.environ[TUNER_PID]))
    request = json.loads(os.environ.get("GPUFLY_TUNE_REQUEST") or sys.stdin.read())
    result = run(request["workload"], request.get("knobs", {}), int(request.get("steps", 30)), request.get("device"),
                 int(request.get("seed", 0)))
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result), flush=True)
    import torch

    if torch.distributed.is_initialized():
        leave_process_group(torch)


def leave_process_group(torch: Any) -> None:
    """A rank's way out once the result is printed: every rank waits for the others, leaves the group, and ends
    without the interpreter's teardown.

    The teardown is where ranks crashed: on a busy 2-core machine about one DDP trial in twelve lost rank 1 to
    SIGABRT ("terminate called without an active exception", a C++ thread still joinable when the interpreter
    destroyed it) after rank 0 had printed its result, and torchrun then failed the whole trial. Nothing is left
    to do once the result is out, so the rank flushes its streams and ``os._exit(0)``s.
    """
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
