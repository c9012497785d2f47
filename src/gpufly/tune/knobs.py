"""The tuner's knobs: one object per optimization, and the registry that lists them.

A knob owns everything about itself: its name, when it is offered (``applies``), the values the search
tries (``values``), how it changes a run (``apply``, the same code in a trial's process and in the user's
process through ``gpufly.apply``), what only the user can do about it (``instruction``, for DDP) and the
line a user pastes into a training script (``code``). Adding a knob is one class here and one line in
``KNOBS`` (plus its test); nothing else names it. A name the registry does not know is a workload option,
passed to the workload's factory, and ``parse`` tells which is which in one place.

Knobs apply in phases, whatever order a configuration lists them in: backend flags, then the model
(pruning, then memory format, then quantization), the optimizer, DDP, torch.compile, and last the training loop
(AMP, batch size, DataLoader settings). Torch is imported inside the methods that need it, so the search
and the CLI load this module without it.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from gpufly.tune.workload import Workload

TASK = "task"
"""The key that marks a serving configuration (``{"task": "infer"}``): fixed for a run, not a knob to try."""


class Phase(IntEnum):
    """When a knob applies: later phases see what earlier ones built (compile wraps the DDP model)."""

    BACKEND = 0
    WEIGHTS = 1
    LAYOUT = 2
    QUANTIZE = 3
    OPTIMIZER = 4
    DISTRIBUTED = 5
    COMPILE = 6
    LOOP = 7


@dataclass(frozen=True)
class Target:
    """What a knob is offered for: the workload, whether there is a GPU, the task, and the DDP processes."""

    workload: Workload
    cuda: bool
    task: str = "train"
    ddp: int = 0

    @property
    def training(self) -> bool:
        return self.task == "train"


@dataclass
class LoaderSettings:
    """The DataLoader arguments the knobs set; persistent workers by default, so no run pays to start them
    each epoch."""

    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None

    def arguments(self, cuda: bool) -> dict[str, Any]:
        """Keyword arguments for ``DataLoader`` (pinning only with a GPU to copy to).

        >>> LoaderSettings(num_workers=2, pin_memory=True).arguments(cuda=False)
        {'num_workers': 2, 'pin_memory': False, 'persistent_workers': True, 'prefetch_factor': 2}
        """
        settings: dict[str, Any] = {"num_workers": self.num_workers, "pin_memory": self.pin_memory and cuda}
        if self.num_workers:
            settings["persistent_workers"] = True if self.persistent_workers is None else self.persistent_workers
            settings["prefetch_factor"] = 2 if self.prefetch_factor is None else self.prefetch_factor
        return settings


@dataclass
class Setup:
    """A run as the knobs change it: the model, its optimizers and the loop's settings. A trial's process and
    ``gpufly.apply`` each build one, apply the configuration to it, then train or hand it back."""

    model: torch.nn.Module
    device: torch.device
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    world: int = 1
    """Processes in the run: a trial under torchrun has 2 or more; the user's process is 1 until they launch it."""
    in_trial: bool = True
    """False in the user's process, where DDP is an instruction rather than something done."""
    loader: LoaderSettings = field(default_factory=LoaderSettings)
    batch_size: int | None = None
    """The global batch size the configuration asks for; None keeps the run's own."""
    amp: str | None = None
    bucket_mb: float = 25.0
    todo: list[str] = field(default_factory=list)
    """What only the user can do (launch with torchrun, set a workload option)."""

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast(self) -> Any:
        """A fresh autocast context: bf16 or fp16 as configured, or a disabled one for fp32."""
        import torch

        dtype = torch.bfloat16 if self.amp == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.amp in ("bf16", "fp16"))

    def scaler(self) -> torch.amp.GradScaler | None:
        """A GradScaler for fp16 AMP; None otherwise."""
        import torch

        return torch.amp.GradScaler("cuda") if self.amp == "fp16" else None


class Knob:
    """One optimization. Subclasses set ``name`` and ``phase`` and override what differs from these defaults."""

    name: ClassVar[str]
    phase: ClassVar[Phase]
    needs_ddp: ClassVar[bool] = False
    """Only meaningful under DDP: the search tries it together with the ``ddp`` knob."""
    template: ClassVar[str] = ""
    """The line to paste, with ``{v}`` for the value."""
    rebuilds_loader: ClassVar[bool] = False
    """Changes the DataLoader: ``gpufly.apply`` rebuilds the user's loader when a configuration sets it."""

    def applies(self, target: Target) -> bool:
        """Whether the search offers this knob for ``target``."""
        return True

    def values(self, target: Target) -> list[Any]:
        """The values the search tries (the baseline is the knob's absence)."""
        return []

    def offered(self, target: Target) -> list[Any]:
        return self.values(target) if self.applies(target) else []

    def apply(self, setup: Setup, value: Any) -> None:
        """Change the run; a ValueError says why the value cannot apply here (the trial records it)."""

    def instruction(self, value: Any) -> str | None:
        """What the user must do themselves, when the knob cannot be applied from inside their process."""
        return None

    def code(self, value: Any) -> str:
        return self.template.format(v=value)


class NumWorkers(Knob):
    rebuilds_loader = True
    name, phase, template = "num_workers", Phase.LOOP, "DataLoader(..., num_workers={v}, persistent_workers=True)"

    def values(self, target: Target) -> list[Any]:
        return [2]

    def apply(self, setup: Setup, value: Any) -> None:
        setup.loader.num_workers = int(value)


class BatchSize(Knob):
    rebuilds_loader = True
    name, phase, template = "batch_size", Phase.LOOP, "DataLoader(..., batch_size={v})"

    def values(self, target: Target) -> list[Any]:
        return [target.workload.batch_size * 4]

    def apply(self, setup: Setup, value: Any) -> None:
        setup.batch_size = int(value)


class Amp(Knob):
    name, phase = "amp", Phase.LOOP

    def values(self, target: Target) -> list[Any]:
        return ["bf16", "fp16"] if target.cuda else ["bf16"]

    def apply(self, setup: Setup, value: Any) -> None:
        if value not in ("bf16", "fp16"):
            raise ValueError(f"unknown amp {value!r}: bf16 or fp16")
        if value == "fp16" and not setup.cuda:
            raise ValueError("fp16 AMP needs a CUDA GPU (amp=bf16 runs on a CPU)")
        setup.amp = value

    def code(self, value: Any) -> str:
        dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(str(value), str(value))
        line = f"with torch.autocast(device.type, dtype=torch.{dtype}):  # around the forward pass and the loss"
        return line + ("; scaler = torch.amp.GradScaler('cuda') for the backward and step" if value == "fp16" else "")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile modes; ``reduce-overhead`` captures CUDA graphs, which need static shapes and a GPU."""


def compiled(model: torch.nn.Module, mode: Any, cuda: bool) -> torch.nn.Module:
    """torch.compile in the given mode (True means the default mode; a false value leaves the model as it is)."""
    if not mode:
        return model
    mode = "default" if mode is True else str(mode)
    if mode not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {mode!r}: {', '.join(COMPILE_MODES)}")
    if mode == "reduce-overhead" and not cuda:
        raise ValueError("compile=reduce-overhead captures CUDA graphs and needs a CUDA GPU")
    import torch

    return torch.compile(model, mode=mode)  # type: ignore[return-value]


class Compile(Knob):
    name, phase, template = "compile", Phase.COMPILE, "model = torch.compile(model, mode='{v}')"

    def applies(self, target: Target) -> bool:
        return target.cuda  # on a CPU, compiling takes tens of seconds a trial; reduce-overhead is CUDA graphs

    def values(self, target: Target) -> list[Any]:
        return ["default", "reduce-overhead"]

    def apply(self, setup: Setup, value: Any) -> None:
        setup.model = compiled(setup.model, value, setup.cuda)

    def code(self, value: Any) -> str:
        return self.template.format(v="default" if value is True else value)


class DistributedKnob(Knob):
    """A knob that means something only under DDP. The search offers it when the run asks for DDP processes; in a
    trial it changes the DDP setup (``apply_to_ddp``); in the user's process it is an instruction, since the user
    launches the processes themselves."""

    def applies(self, target: Target) -> bool:
        return target.training and target.ddp > 1

    def apply(self, setup: Setup, value: Any) -> None:
        self.check(value)
        if not setup.in_trial:
            setup.todo.append(self.instruction(value))
            return
        self.apply_to_ddp(setup, value)

    def check(self, value: Any) -> None:
        """A ValueError for a value the knob does not take (the trial records it)."""

    def apply_to_ddp(self, setup: Setup, value: Any) -> None:
        raise NotImplementedError

    def instruction(self, value: Any) -> str:
        return self.code(value)


class Ddp(DistributedKnob):
    """The parent launches the trial under torchrun with this many processes; in the trial, the model is wrapped
    in DistributedDataParallel with the bucket size the ``bucket_mb`` knob set."""

    name, phase = "ddp", Phase.DISTRIBUTED
    template = "torchrun --nproc-per-node={v} train.py, with model = DistributedDataParallel(model)"

    def values(self, target: Target) -> list[Any]:
        return [target.ddp]

    def apply_to_ddp(self, setup: Setup, value: Any) -> None:
        if setup.world > 1:
            import torch

            setup.model = torch.nn.parallel.DistributedDataParallel(setup.model, bucket_cap_mb=setup.bucket_mb)

    def instruction(self, value: Any) -> str:
        return f"launch with torchrun --nproc-per-node={value} and wrap the model in DistributedDataParallel"


class DdpHook(DistributedKnob):
    name, phase, needs_ddp = "ddp_hook", Phase.DISTRIBUTED, True
    template = "ddp_model.register_comm_hook(None, default_hooks.{v}_compress_hook)"

    def values(self, target: Target) -> list[Any]:
        return ["fp16", "powersgd", *(["bf16"] if target.cuda else [])]  # bf16 compression needs NCCL

    def check(self, value: Any) -> None:
        if value not in ("fp16", "bf16", "powersgd"):
            raise ValueError(f"unknown ddp_hook {value!r}: fp16, bf16 or powersgd")

    def apply_to_ddp(self, setup: Setup, value: Any) -> None:
        if setup.world > 1:
            register_comm_hook(setup.model, value)

    def instruction(self, value: Any) -> str:
        return f"register the {value} communication hook on the DistributedDataParallel model"


def register_comm_hook(model: Any, hook: str) -> None:
    """Gradient compression on a DistributedDataParallel model: fp16, bf16 or PowerSGD (rank 1)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        model.register_comm_hook(None, getattr(default_hooks, f"{hook}_compress_hook"))


class BucketMb(DistributedKnob):
    name, phase, needs_ddp = "bucket_mb", Phase.BACKEND, True
    template = "DistributedDataParallel(..., bucket_cap_mb={v})"

    def values(self, target: Target) -> list[Any]:
        return [5, 100]

    def apply_to_ddp(self, setup: Setup, value: Any) -> None:
        setup.bucket_mb = float(value)


class Prune(Knob):
    name, phase = "prune", Phase.WEIGHTS
    template = ("for m in linear_and_conv_layers: prune.l1_unstructured(m, 'weight', amount={v}); "
                "prune.remove(m, 'weight')")

    def applies(self, target: Target) -> bool:
        return not target.training

    def values(self, target: Target) -> list[Any]:
        return [0.3]

    def apply(self, setup: Setup, value: Any) -> None:
        """Magnitude pruning (L1, per layer) of every Linear and Conv2d weight, made permanent."""
        import torch
        from torch.nn.utils import prune

        for module in setup.model.modules():
            if isinstance(module, torch.nn.Linear | torch.nn.Conv2d):
                prune.l1_unstructured(module, "weight", amount=float(value))
                prune.remove(module, "weight")


class ChannelsLast(Knob):
    name, phase, template = "channels_last", Phase.LAYOUT, "model = model.to(memory_format=torch.channels_last)"

    def applies(self, target: Target) -> bool:
        """channels_last only helps convolutions."""
        model = getattr(target.workload, "model", None)
        return model is not None and any(type(m).__name__.startswith("Conv") for m in model.modules())

    def values(self, target: Target) -> list[Any]:
        return [True]

    def apply(self, setup: Setup, value: Any) -> None:
        if value:
            import torch

            setup.model = setup.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


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


def has_torchao() -> bool:
    """Weight-only quantization is offered only where torchao is installed (found without importing it)."""
    return importlib.util.find_spec("torchao") is not None


class Quantize(Knob):
    name, phase = "quantize", Phase.QUANTIZE
    template = "model = torch.ao.quantization.quantize_dynamic(model, {{torch.nn.Linear}}, dtype=torch.qint8)"

    def __init__(self, torchao_installed: Callable[[], bool] = has_torchao) -> None:
        self.torchao_installed = torchao_installed
        """Whether torchao can be imported; a test passes its own answer."""

    def applies(self, target: Target) -> bool:
        return not target.training

    def values(self, target: Target) -> list[Any]:
        found = [] if target.cuda else ["int8_dynamic"]  # torch's dynamic int8 kernels are CPU-only
        if self.torchao_installed():
            found += list(WEIGHT_ONLY) if target.cuda else ["int8_weight_only"]  # int4/fp8: GPU kernels only
        return found

    def apply(self, setup: Setup, value: Any) -> None:
        if value == "int8_dynamic":
            setup.model = quantize_dynamic(setup.model, setup.cuda)
        elif value in WEIGHT_ONLY:
            setup.model = quantize_weight_only(setup.model, value, setup.cuda)
        else:
            raise ValueError(f"unknown quantize {value!r}: int8_dynamic, {', '.join(WEIGHT_ONLY)}")

    def code(self, value: Any) -> str:
        if value not in WEIGHT_ONLY:
            return self.template.format(v=value)
        args = ", ".join(f"{k}={v!r}" for k, v in WEIGHT_ONLY_ARGS.get(value, {}).items())
        line = f"torchao.quantization.quantize_(model, torchao.quantization.{WEIGHT_ONLY[value]}({args}))"
        return ("model = model.to(torch.bfloat16); " + line) if value == "int4_weight_only" else line


def quantize_dynamic(model: torch.nn.Module, cuda: bool) -> torch.nn.Module:
    """torch's dynamic int8 quantization of the Linear layers (a CPU kernel)."""
    if cuda:
        raise ValueError("dynamic int8 quantization runs on the CPU; on a GPU use torchao weight-only int8")
    import warnings

    import torch
    from torch.ao.quantization import quantize_dynamic as quantize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao points to torchao; the CPU path still works and is measured
        return quantize(model, quantizable_layers(model), dtype=torch.qint8)


def quantizable_layers(model: torch.nn.Module) -> set[str]:
    """Linear layers by name, except inside Transformer layers, whose fast path reads ``linear.weight.device``
    (a quantized Linear's weight is a method), so quantizing them breaks the forward pass."""
    import torch

    fused = (torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer)
    inside = {name for name, m in model.named_modules() if isinstance(m, fused)}
    return {name for name, m in model.named_modules() if type(m) is torch.nn.Linear
            and not any(name.startswith(f"{parent}.") for parent in inside)}


def quantize_weight_only(model: torch.nn.Module, quantize: str, cuda: bool) -> torch.nn.Module:
    """torchao's ``quantize_`` with the weight-only config; int4 and fp8 have GPU kernels only. The int4
    kernel takes bf16 activations and weights, so the model is cast to bf16 first."""
    if quantize != "int8_weight_only" and not cuda:
        raise ValueError(f"quantize={quantize} has torchao kernels for CUDA GPUs only")
    try:
        import torchao.quantization as ao  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ValueError(f"quantize={quantize} needs torchao: pip install torchao") from None
    if quantize == "int4_weight_only":
        import torch

        model = model.to(torch.bfloat16)
    ao.quantize_(model, getattr(ao, WEIGHT_ONLY[quantize])(**WEIGHT_ONLY_ARGS.get(quantize, {})))
    return model


def with_implementation(opt: torch.optim.Optimizer, implementation: str | None) -> torch.optim.Optimizer:
    """The same optimizer (class, parameter groups, hyperparameters) rebuilt as ``foreach`` (one kernel per
    group of tensors) or ``fused`` (one kernel for the whole update); one without the option, such as
    SparseAdam, is kept as it is. Built before the first step, so no optimizer state is lost."""
    if implementation is None:
        return opt
    if implementation not in ("foreach", "fused"):
        raise ValueError(f"unknown optimizer_impl {implementation!r}: foreach or fused")
    accepted = inspect.signature(type(opt)).parameters
    if implementation not in accepted:
        return opt
    choice = {"fused": implementation == "fused", "foreach": implementation == "foreach"}
    groups = [{**group, **choice} for group in opt.param_groups]
    defaults = {k: v for k, v in opt.defaults.items() if k in accepted and k != "params"}
    return type(opt)(groups, **(defaults | choice))


class OptimizerImpl(Knob):
    name, phase = "optimizer_impl", Phase.OPTIMIZER
    template = "optimizer = YourOptimizer(params, ..., {v}=True)  # Adam, AdamW, SGD, Adagrad"

    def applies(self, target: Target) -> bool:
        return target.training

    def values(self, target: Target) -> list[Any]:
        return ["foreach", "fused"]

    def apply(self, setup: Setup, value: Any) -> None:
        try:
            setup.optimizers = [with_implementation(opt, value) for opt in setup.optimizers]
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"cannot rebuild the optimizer: {exc}") from None


class GpuTrainingSwitch(Knob):
    """A switch (tried as True) that only helps a training run on a GPU: pinned memory, TF32, cuDNN autotuning."""

    def applies(self, target: Target) -> bool:
        return target.training and target.cuda

    def values(self, target: Target) -> list[Any]:
        return [True]


class PinMemory(GpuTrainingSwitch):
    rebuilds_loader = True
    name, phase = "pin_memory", Phase.LOOP
    template = "DataLoader(..., pin_memory=True); batch.to(device, non_blocking=True)"

    def apply(self, setup: Setup, value: Any) -> None:
        setup.loader.pin_memory = bool(value)


def enable_tf32() -> None:
    """TF32 matmuls and convolutions through the ``fp32_precision`` API; the legacy ``allow_tf32`` flags only on a
    torch that lacks it (once a script uses the new API, the legacy getter raises, so the two are never mixed)."""
    import torch

    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"  # type: ignore[attr-defined]
    else:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True


class Tf32(GpuTrainingSwitch):
    name, phase = "tf32", Phase.BACKEND
    template = ("torch.backends.cuda.matmul.fp32_precision = 'tf32'; "
                "torch.backends.cudnn.conv.fp32_precision = 'tf32'")

    def apply(self, setup: Setup, value: Any) -> None:
        if value:
            enable_tf32()


class CudnnBenchmark(GpuTrainingSwitch):
    name, phase, template = "cudnn_benchmark", Phase.BACKEND, "torch.backends.cudnn.benchmark = True"

    def apply(self, setup: Setup, value: Any) -> None:
        if value:
            import torch

            torch.backends.cudnn.benchmark = True


class PrefetchFactor(Knob):
    """Not searched; a configuration may set it, and the loader takes it."""

    rebuilds_loader = True
    name, phase, template = "prefetch_factor", Phase.LOOP, "DataLoader(..., prefetch_factor={v})"

    def apply(self, setup: Setup, value: Any) -> None:
        setup.loader.prefetch_factor = int(value)


class PersistentWorkers(Knob):
    """Not searched (on by default with workers); a configuration may turn it off."""

    rebuilds_loader = True
    name, phase, template = "persistent_workers", Phase.LOOP, "DataLoader(..., persistent_workers={v})"

    def apply(self, setup: Setup, value: Any) -> None:
        setup.loader.persistent_workers = bool(value)


KNOBS: tuple[Knob, ...] = (
    NumWorkers(), BatchSize(), Amp(), Compile(), Ddp(), DdpHook(), BucketMb(), Prune(), Quantize(),
    OptimizerImpl(), PinMemory(), Tf32(), CudnnBenchmark(), ChannelsLast(), PrefetchFactor(), PersistentWorkers(),
)
"""Every knob, in the order the search tries them."""

BY_NAME: dict[str, Knob] = {knob.name: knob for knob in KNOBS}


@dataclass(frozen=True)
class Configuration:
    """A configuration's names resolved once: the task, the knobs in the order they apply, the workload options."""

    task: str
    settings: tuple[tuple[Knob, Any], ...]
    options: dict[str, Any]

    @property
    def rebuilds_loader(self) -> bool:
        return any(knob.rebuilds_loader for knob, _ in self.settings)

    def value(self, kind: type[Knob], default: Any = None) -> Any:
        """The value this configuration gives the knob of class ``kind``, or ``default``."""
        return next((value for knob, value in self.settings if isinstance(knob, kind)), default)


def parse(knobs: dict[str, Any]) -> Configuration:
    """Split a configuration into its task, its knobs (sorted by phase) and the workload's own options.

    >>> config = parse({"sparse": True, "compile": "default", "tf32": True, "task": "train"})
    >>> [knob.name for knob, _ in config.settings], config.options
    (['tf32', 'compile'], {'sparse': True})
    """
    settings = [(BY_NAME[name], value) for name, value in knobs.items() if name in BY_NAME]
    settings.sort(key=lambda setting: setting[0].phase)
    options = {name: value for name, value in knobs.items() if name not in BY_NAME and name != TASK}
    return Configuration(str(knobs.get(TASK, "train")), tuple(settings), options)


def apply_all(setup: Setup, config: Configuration) -> Setup:
    """Apply every knob of ``config`` to ``setup``, phase by phase."""
    for knob, value in config.settings:
        knob.apply(setup, value)
    return setup


def processes(knobs: dict[str, Any]) -> int:
    """How many processes a trial of this configuration runs on (the ``ddp`` knob; 1 without it)."""
    return int(knobs.get(Ddp.name) or 1)


def offered(target: Target) -> dict[str, list[Any]]:
    """What the search tries on ``target``: each knob that applies with its values, then the workload's options
    (their values after the first, which is the baseline). An option that reuses a knob's name is refused: it
    would never reach the workload."""
    from gpufly.errors import GpuflyError

    plan = {knob.name: values for knob in KNOBS if (values := knob.offered(target))}
    for option in target.workload.options:
        if option.name in BY_NAME or option.name == TASK:
            raise GpuflyError(f"the workload option {option.name!r} has the name of a gpufly knob",
                              "rename the option in the workload's WorkloadOption list")
        plan[option.name] = list(option.values[1:])
    return plan


def code_for(knobs: dict[str, Any]) -> list[str]:
    """A configuration as lines to paste into the training script; workload options as they are named.

    >>> for line in code_for({"amp": "bf16", "num_workers": 2, "sparse": True}):
    ...     print(line)
    with torch.autocast(device.type, dtype=torch.bfloat16):  # around the forward pass and the loss
    DataLoader(..., num_workers=2, persistent_workers=True)
    workload option: sparse=True
    """
    return [BY_NAME[name].code(value) if name in BY_NAME else f"workload option: {name}={value}"
            for name, value in knobs.items() if name != TASK]


def names() -> list[str]:
    """Every knob's name, sorted (for messages)."""
    return sorted(BY_NAME)
