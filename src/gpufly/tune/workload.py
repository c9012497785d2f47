"""What a tunable workload is: the contract between a user's code (or a built-in) and the tuner.

A workload is built by a *factory*: a function that takes the workload-specific options of one
trial (a dict, possibly empty) and returns a ``Workload``. The tuner applies the generic knobs
(DataLoader settings, batch size, AMP, TF32, channels_last, torch.compile, cudnn.benchmark, fused
optimizers, quantization, pruning, DDP) itself; options that only the workload can apply (sparse
embedding gradients, fused embedding bags, batched collation of a recommender's features) are
declared in ``Workload.options`` and passed back to the factory by name.

A user's factory may take no argument at all; the tuner then offers it no workload options.
Torch is imported only for type checking, so this module loads without it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpufly.i18n import gettext as _

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset


@dataclass(frozen=True)
class WorkloadOption:
    """A knob only the workload can apply: its values to try (the first is the baseline) and why."""

    name: str
    values: Sequence[Any]
    stage: Literal["data", "compute", "communication"]
    description: str
    risk: str = "none known"


@dataclass
class Workload:
    """One trainable (or servable) model with its data, as the tuner needs it.

    ``loss(model, batch)`` runs the forward pass on a batch already moved to the device and returns
    a scalar loss (training) or the output (inference). ``batch_size`` is the baseline batch size;
    ``collate`` is the DataLoader's collate_fn (None: torch's default). ``items(batch)`` counts the
    units of throughput in a batch (samples, or tokens for a language model); None counts samples by
    the first dimension of the batch's first tensor. ``evaluate(model)`` returns a metric of the
    trained model, called after training (in eval mode, without gradients), such as accuracy or a
    held-out loss; ``higher_is_better`` says which way is good (True: accuracy; False: a loss). The
    tuner marks a configuration unsafe when the metric moves the bad way by more than its tolerance
    (1% of the baseline's value), whatever its probe loss says.
    """

    name: str
    model: torch.nn.Module
    dataset: Dataset[Any]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    batch_size: int = 32
    collate: Callable[[list[Any]], Any] | None = None
    optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer | list[torch.optim.Optimizer]] | None = None
    """Builds the optimizer(s) for the model; None: Adam(lr=1e-3) over every parameter."""
    evaluate: Callable[[torch.nn.Module], float] | None = None
    higher_is_better: bool = True
    """The direction of ``evaluate``'s metric: True for an accuracy, False for a loss or an error rate."""
    task: Literal["train", "infer"] = "train"
    unit: str = "samples"
    items: Callable[[Any], int] | None = None
    options: Sequence[WorkloadOption] = field(default_factory=tuple)
    batch_sampler_dataset: bool = False
    """True when each dataset item is already a whole batch (batched collation); the DataLoader then
    does not batch, and the factory sizes the batches from ``options["batch_size"]``."""


@dataclass(frozen=True)
class SearchSpace:
    """What the tuner's own process needs of a workload it never builds itself: the knobs to try on it (name to
    values, ``gpufly.tune.knobs.offered``) and whether its dataset yields whole batches."""

    knobs: dict[str, list[Any]]
    batch_sampler_dataset: bool


WorkloadFactory = Callable[..., Workload]
"""``factory(options: dict[str, Any]) -> Workload``, or ``factory() -> Workload`` for user code."""

BUILTIN = {name: f"gpufly.tune.workloads.{name}:workload" for name in ("recsys", "cnn", "transformer")}
"""The built-in workloads by name; any other name is a user's ``module:function`` or ``file.py:function``."""


def load_factory(name: str) -> WorkloadFactory:
    """The factory a workload name points at, through gpufly's one loader of function references (whose hint, when
    the name is missing, names the function asked for)."""
    from gpufly.loading import load_function, split_ref

    check_name(name)
    target = BUILTIN.get(name, name)
    return load_function(target, example=split_ref(target)[1])


def search_space(name: str, cuda: bool, task: str, ddp: int, timeout_s: float) -> SearchSpace:
    """The search space of workload ``name``, built in a child process (``gpufly.tune.worker.search_space``) within
    ``timeout_s``, the trials' own limit: a trial builds the workload too, so a build that cannot finish within it
    could never be measured. A build that raises, exits, hangs or crashes is one GpuflyError, never the tuner's end.
    """
    from gpufly.loading import call_in_child

    check_name(name)
    space: SearchSpace = call_in_child("gpufly.tune.worker:search_space",
                                       {"name": name, "cuda": cuda, "task": task, "ddp": ddp},
                                       what=f"the workload {name}", timeout_s=timeout_s,
                                       hint="it must build within --timeout (every trial builds it too); call it "
                                            "yourself in python to see what it does")
    return space


def check_name(name: str) -> None:
    """A workload name that is neither a built-in nor a function reference is refused before anything starts."""
    from gpufly.errors import GpuflyError
    from gpufly.loading import split_ref

    target = BUILTIN.get(name, name)
    if ":" not in target:
        raise GpuflyError(f"unknown workload {name!r}", f"built in: {', '.join(BUILTIN)}; or module:function")
    where, function = split_ref(target)
    check_defined(where, function)


def check_defined(where: str, function: str) -> None:
    """Before a file is run (importing it runs the whole script): a ``file.py`` whose source binds no ``function``
    at module level is refused, naming the function asked for and the ones the file defines
    (``gpufly.loading.missing_function``: nothing of the file runs, and what it cannot tell is left to the import)."""
    import difflib

    from gpufly.errors import GpuflyError
    from gpufly.loading import missing_function

    functions = missing_function(where, function)
    if functions is None:
        return
    close = difflib.get_close_matches(function, functions, n=3)
    define = _("define def {function}(options): ... returning a Workload there").format(function=function)
    if close:
        hint = _("did you mean {names}? Or {define}").format(names=", ".join(close), define=define)
    elif functions:
        hint = _("{define}, or name one of its functions: {names}").format(define=define, names=", ".join(functions))
    else:
        hint = define
    raise GpuflyError(_("{where} has no function '{function}' (read without running it)").format(
        where=where, function=function), hint)


def build(name: str, options: dict[str, Any]) -> Workload:
    """The workload ``name`` with the trial's options; a factory that takes no argument gets none."""
    factory = load_factory(name)
    takes_options = bool(inspect.signature(factory).parameters)
    if options and not takes_options:
        raise ValueError(f"{name} takes no options, but the trial sets {sorted(options)}")
    return factory(options) if takes_options else factory()
