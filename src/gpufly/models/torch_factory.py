"""A user's PyTorch model as a ModelSpec, measured without allocating a single weight.

A *factory* is named ``package.module:function`` or ``path/to/file.py:function``, and is run in a child
process (``spec_from_factory``), so that nothing it does can end or hang gpufly. The function
takes no required arguments and returns either

- an ``nn.Module`` with a method ``example_inputs(batch_size: int, device) -> tuple[Tensor, ...]``, or
- a tuple ``(module, example_inputs)`` where ``example_inputs(batch_size, device)`` returns that tuple.

``module(*example_inputs(batch_size, device))`` must run a forward pass; the sum of its floating
outputs serves as the loss. Both functions are called under ``torch.device("meta")`` and under
``FakeTensorMode``, so they must create tensors with torch's factory functions (``torch.randn``,
``torch.randint``, ..., honouring ``device``) and must not read tensor values (``.item()``, data-dependent
shapes). ``gpufly.models.zoo`` holds examples.

What is measured, and how:

- parameters: exact, on the meta device (shapes, no storage); shared parameters count once;
- forward FLOPs: ``FlopCounterMode`` (2 per multiply-add in mm, bmm, conv, attention) on meta tensors,
  where attention falls back to countable matmuls; on CPU tensors the fused attention kernel counts 0;
- training activations: the storages autograd saves for backward (``saved_tensors_hooks``) during
  a forward on fake CPU tensors, each storage once, weights and buffers left out. That is what a
  real run keeps between forward and backward; temporaries freed inside the forward are not in it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gpufly.errors import GpuflyError
from gpufly.loading import load_function, one_line, split_ref
from gpufly.models.spec import ModelSpec

if TYPE_CHECKING:
    import torch
    from torch import nn

InputsFn = Callable[[int, Any], tuple[Any, ...]]

_FORMS = "an nn.Module with example_inputs(batch_size, device), or a tuple (module, example_inputs)"
_VALUE_HINT = "a forward that reads tensor values (.item(), data-dependent shapes) cannot run on fake tensors"


def _factory_function(ref: str) -> Callable[[], Any]:
    """The function ``ref`` names, through gpufly's one loader (``gpufly.loading.load_function``, as `tune` and
    `profile` resolve theirs); a syntax error in the user's file is one line naming the file and the line."""
    try:
        return load_function(ref, example="build_model")
    except SyntaxError as exc:
        raise GpuflyError(f"importing {split_ref(ref)[0]} failed: {one_line(exc)}",
                          hint=f"fix the code there; `python -m py_compile {exc.filename or 'FILE'}` shows it",
                          ) from None


def _build(factory: Callable[[], Any], ref: str, where: str) -> tuple[nn.Module, InputsFn]:
    """Call the factory and split what it returns into the module and its inputs function."""
    from torch import nn

    try:
        built = factory()
    except Exception as exc:
        raise GpuflyError(f"factory {ref} raised {one_line(exc)} ({where})",
                          hint="a factory takes no required arguments; call it yourself to see the traceback",
                          ) from exc
    if isinstance(built, tuple) and len(built) == 2:
        module, inputs_fn = built
        if isinstance(module, nn.Module) and callable(inputs_fn):
            return module, inputs_fn
    example_inputs = getattr(built, "example_inputs", None)
    if isinstance(built, nn.Module) and callable(example_inputs):
        return built, example_inputs
    raise GpuflyError(f"factory {ref} returned no model (type {type(built).__name__})",
                      hint=f"return {_FORMS}")


def _example_inputs(inputs_fn: InputsFn, batch_size: int, device: torch.device, ref: str) -> tuple[Any, ...]:
    import torch

    try:
        inputs = inputs_fn(batch_size, device)
    except Exception as exc:
        raise GpuflyError(f"example_inputs of {ref} raised {one_line(exc)} (on {device})",
                          hint="create inputs with torch.randn/torch.randint(..., device=device)") from exc
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if not inputs or not isinstance(inputs[0], torch.Tensor):
        raise GpuflyError(f"example_inputs of {ref} must return a tuple of tensors, batch first",
                          hint="e.g. return (torch.randn(batch_size, 3, 224, 224, device=device),)")
    return inputs


def _unique_parameters(module: nn.Module, recurse: bool = True) -> list[nn.Parameter]:
    """Parameters, each shared one once (``parameters()`` dedupes by identity too; said here on purpose)."""
    return list({id(p): p for p in module.parameters(recurse=recurse)}.values())


def _model_kind(module: nn.Module) -> str:
    from torch import nn

    layers = list(module.modules())
    if any(isinstance(layer, nn.modules.conv._ConvNd) for layer in layers):
        return "cnn"
    if any(isinstance(layer, nn.EmbeddingBag) for layer in layers):
        return "recsys"
    return "other"


def _embedding_params(module: nn.Module) -> int:
    from torch import nn

    tables = {id(p): p for layer in module.modules() if isinstance(layer, (nn.Embedding, nn.EmbeddingBag))
              for p in layer.parameters(recurse=False)}
    return sum(p.numel() for p in tables.values())


def _linear_name(qualified: str) -> str:
    """The name LoRA tools match a layer by: ``blocks.0.attn.q_proj`` -> ``q_proj``.

    An index in a Sequential keeps its parent (``top_mlp.0``), or the MLPs of a model would merge.
    """
    parts = qualified.split(".")
    if parts[-1].isdigit() and len(parts) > 1:
        return ".".join(parts[-2:])
    return parts[-1] or "linear"


def _linear_params(module: nn.Module) -> dict[str, int]:
    """Parameters of the nn.Linear layers, summed by name: what LoRA adapters can target."""
    from torch import nn

    counts: dict[str, int] = {}
    for qualified, layer in module.named_modules():
        if isinstance(layer, nn.Linear):
            name = _linear_name(qualified)
            own = sum(p.numel() for p in _unique_parameters(layer, recurse=False))
            counts[name] = counts.get(name, 0) + own
    return counts


def _linear_shapes(module: nn.Module) -> dict[str, tuple[int, int, int]]:
    """(in_features, out_features, count) of the nn.Linear layers by name, where all layers of a
    name share one shape (what a LoRA adapter of rank r costs: r * (in + out) * count)."""
    from torch import nn

    shapes: dict[str, tuple[int, int, int]] = {}
    mixed: set[str] = set()
    for qualified, layer in module.named_modules():
        if isinstance(layer, nn.Linear):
            name = _linear_name(qualified)
            rows, cols, count = shapes.get(name, (layer.in_features, layer.out_features, 0))
            if (rows, cols) != (layer.in_features, layer.out_features):
                mixed.add(name)
            shapes[name] = (rows, cols, count + 1)
    return {name: shape for name, shape in shapes.items() if name not in mixed}


def _loss(output: Any, ref: str) -> torch.Tensor:
    """The sum of every floating output that needs a gradient: a loss whose backward reaches every weight."""
    import torch
    from torch.utils._pytree import tree_leaves

    parts = [leaf.sum() for leaf in tree_leaves(output)
             if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad]
    if not parts:
        raise GpuflyError(f"the forward pass of {ref} returned no floating tensor that needs a gradient",
                          hint="return the logits (or the loss) from forward")
    return torch.stack(parts).sum()


class SavedStorages:
    """Storages autograd keeps for backward, as ``saved_tensors_hooks`` hands them over.

    Each storage counts once (views and in-place results share one); the weights' storages are
    left out, being counted as weights elsewhere. Storages are held, so their ids stay unique.
    """

    def __init__(self, weights: Iterable[torch.Tensor]) -> None:
        self._weights = {id(s): s for s in (w.untyped_storage() for w in weights)}
        self._saved: dict[int, Any] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if id(storage) not in self._weights:
            self._saved.setdefault(id(storage), storage)
        return tensor

    @staticmethod
    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    @property
    def nbytes(self) -> int:
        return sum(storage.nbytes() for storage in self._saved.values())


def _forward(module: nn.Module, inputs: tuple[Any, ...], ref: str, where: str) -> Any:
    try:
        return module(*inputs)
    except Exception as exc:
        raise GpuflyError(f"the forward pass of {ref} failed on {where}: {one_line(exc)}",
                          hint=_VALUE_HINT) from exc


def _meta_flops(module: nn.Module, inputs: tuple[Any, ...]) -> int | None:
    """Forward FLOPs on meta tensors, or None where an op has no meta kernel (the fake pass counts then)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            module(*inputs)
    except Exception:
        return None
    return counter.get_total_flops()


def _fake_pass(factory: Callable[[], Any], ref: str, batch_size: int,
               training: bool) -> tuple[int, int | None]:
    """Forward (and, when training, backward) on fake CPU tensors: (FLOPs, saved activation bytes)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    # Real tensors a factory keeps at module level are taken in as fake ones.
    with FakeTensorMode(allow_non_fake_inputs=True):
        module, inputs_fn = _build(factory, ref, "on fake tensors")
        module.train(training)
        inputs = _example_inputs(inputs_fn, batch_size, torch.device("cpu"), ref)
        counter = FlopCounterMode(display=False)
        if not training:
            with torch.no_grad(), counter:
                _forward(module, inputs, ref, "fake tensors")
            return counter.get_total_flops(), None
        saved = SavedStorages([*module.parameters(), *module.buffers()])
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack), counter:
            output = _forward(module, inputs, ref, "fake tensors")
        loss = _loss(output, ref)
        try:
            loss.backward()
        except Exception as exc:
            raise GpuflyError(f"the backward pass of {ref} failed on fake tensors: {one_line(exc)}",
                              hint=_VALUE_HINT) from exc
        return counter.get_total_flops(), saved.nbytes


FACTORY_TIMEOUT_S = 300.0
"""How long a factory's model may take to build and be measured on meta and fake tensors (seconds): minutes for
the largest models gpufly has met, which allocate nothing; beyond it a factory is taken to hang."""


def spec_from_factory(ref: str, batch_size: int = 1, training: bool = True,
                      timeout_s: float = FACTORY_TIMEOUT_S) -> ModelSpec:
    """Measure the model a factory builds: exact parameters, forward FLOPs and activation bytes per sample.

    The factory runs in a child process (``gpufly.loading.call_in_child``), so one that hangs, exits, is
    interrupted or crashes the interpreter is one error line after at most ``timeout_s``, never the end of
    gpufly; its prints go to stderr. ``training`` and ``batch_size`` are as for ``measure``, which the child runs.
    """
    from gpufly.loading import call_in_child, run_it_yourself

    if batch_size < 1:
        raise GpuflyError(f"batch size must be at least 1, not {batch_size}", hint="for example --batch 8")
    spec: ModelSpec = call_in_child("gpufly.models.torch_factory:measure",
                                    {"ref": ref, "batch_size": batch_size, "training": training},
                                    what=f"the factory {ref}", timeout_s=timeout_s,
                                    hint=f"run it yourself to see what it does: {run_it_yourself(ref)}")
    return spec


def measure(ref: str, batch_size: int = 1, training: bool = True) -> ModelSpec:
    """``spec_from_factory`` in this process: what the child runs (and tests call, for speed).

    ``training`` puts the module in train mode (dropout, batch-norm statistics) and measures what
    autograd saves; ``training=False`` runs an eval-mode forward only, and leaves the activations None.
    ``batch_size`` is the batch the passes run at; the results are divided by it.
    """
    factory = _factory_function(ref)  # before torch: a reference that is not there fails fast
    import torch

    with torch.device("meta"):
        module, inputs_fn = _build(factory, ref, "on the meta device")
    module.train(training)
    inputs = _example_inputs(inputs_fn, batch_size, torch.device("meta"), ref)
    meta_flops = _meta_flops(module, inputs)
    fake_flops, activation_bytes = _fake_pass(factory, ref, batch_size, training)
    flops = meta_flops if meta_flops is not None else fake_flops
    return ModelSpec(
        name=ref.rpartition(":")[2],
        kind=_model_kind(module),
        source=f"torch:{ref}",
        params=sum(p.numel() for p in _unique_parameters(module)),
        params_method="meta device",
        embedding_params=_embedding_params(module),
        linear_params=_linear_params(module),
        linear_shapes=_linear_shapes(module),
        forward_flops_per_sample=flops / batch_size,
        activation_bytes_per_sample=activation_bytes / batch_size if activation_bytes is not None else None,
        sample_shape=tuple(inputs[0].shape[1:]),
    )
