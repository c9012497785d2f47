"""A factory's model measured on meta and fake tensors, held against what real CPU tensors do; and a factory that
exits, hangs, crashes or prints, which can end neither `fit` nor its --json.

The measurements are checked in this process (``measure``); ``spec_from_factory`` runs the same in a child."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufly.errors import GpuflyError

torch = pytest.importorskip("torch")

from gpufly.loading import load_function  # noqa: E402
from gpufly.models import zoo  # noqa: E402
from gpufly.models.torch_factory import measure, spec_from_factory  # noqa: E402

LINEAR_FILE = '''
import torch
from torch import nn


def linear():
    layer = nn.Linear(64, 32)
    return layer, lambda batch_size, device: (torch.randn(batch_size, 64, device=device),)


def not_a_model():
    return 42


def broken():
    raise RuntimeError("weights are missing\\nsecond line")


def needs_arguments(width):
    return nn.Linear(width, width)


NUMBER = 3
'''


@pytest.fixture
def factory_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_models.py"
    path.write_text(LINEAR_FILE)
    return path


def real_saved_bytes(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    """Bytes autograd really keeps on CPU: storages told apart by address, weights and buffers left out."""
    weights = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        output = module(*inputs)
    output.sum().backward()
    return sum(saved.values())


@pytest.mark.parametrize("name", ["small_cnn", "small_transformer"])
def test_fake_activation_bytes_match_a_real_cpu_run(name: str) -> None:
    batch = 4
    spec = measure(f"gpufly.models.zoo:{name}", batch_size=batch)
    torch.manual_seed(0)
    module = getattr(zoo, name)()
    real = real_saved_bytes(module, module.example_inputs(batch, torch.device("cpu")))
    assert spec.activation_bytes_per_sample * batch == pytest.approx(real, rel=0.05)


def test_linear_flops_are_two_per_multiply_add(factory_file: Path) -> None:
    spec = spec_from_factory(f"{factory_file}:linear", batch_size=8)
    assert spec.forward_flops_per_sample * 8 == 2 * 8 * 64 * 32
    assert spec.params == 64 * 32 + 32
    assert spec.params_method == "meta device"
    assert spec.name == "linear"
    assert spec.source == f"torch:{factory_file}:linear"
    assert spec.sample_shape == (64,)


def test_a_file_factory_loads(factory_file: Path) -> None:
    module, inputs_fn = load_function(f"{factory_file}:linear")()
    assert isinstance(module, torch.nn.Linear)
    assert inputs_fn(2, torch.device("cpu"))[0].shape == (2, 64)


def test_shared_weights_count_once() -> None:
    spec = measure("gpufly.models.zoo:small_transformer", batch_size=1)
    module = zoo.small_transformer()
    assert spec.params == sum(p.numel() for p in module.parameters())
    assert spec.params < sum(p.numel() for _, p in module.named_parameters(remove_duplicate=False))
    assert spec.embedding_params == (1000 + 64) * 128
    assert spec.linear_params["qkv_proj"] == 2 * (128 * 384 + 384)


def test_eval_mode_leaves_activations_out() -> None:
    spec = measure("gpufly.models.zoo:small_cnn", batch_size=2, training=False)
    assert spec.activation_bytes_per_sample is None
    assert spec.forward_flops_per_sample > 0


@pytest.mark.parametrize(("ref", "message"), [
    ("gpufly.models.zoo", "not a function reference: 'gpufly.models.zoo'"),
    ("gpufly.no_such_module:f", "module not found: gpufly.no_such_module"),
    ("no/such/file.py:f", "no such file: no/such/file.py"),
    ("gpufly.models.zoo:resnet51", "gpufly.models.zoo has no function 'resnet51'"),
    ("gpufly.models.zoo:DLRM_POOLING_FACTOR", "gpufly.models.zoo:DLRM_POOLING_FACTOR is not a function (type int)"),
])
def test_bad_references_say_what_is_wrong(ref: str, message: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        measure(ref)
    assert caught.value.message == message and caught.value.hint


def test_a_misspelt_function_gets_a_suggestion() -> None:
    with pytest.raises(GpuflyError) as caught:
        spec_from_factory("gpufly.models.zoo:resnet51")
    assert caught.value.hint == "did you mean resnet50?"


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "typo.py"
    path.write_text("def build(:\n    pass\n")
    with pytest.raises(GpuflyError) as caught:
        measure(f"{path}:build")
    assert caught.value.message == f"importing {path} failed: SyntaxError: invalid syntax (typo.py, line 1)"
    assert caught.value.hint == f"fix the code there; `python -m py_compile {path}` shows it"


@pytest.mark.parametrize(("function", "message"), [
    ("broken", "raised RuntimeError: weights are missing \\(on the meta device\\)$"),
    ("needs_arguments", "raised TypeError: needs_arguments\\(\\) missing 1 required"),
    ("not_a_model", "returned no model \\(type int\\)"),
])
def test_bad_factories_say_what_is_wrong(factory_file: Path, function: str, message: str) -> None:
    with pytest.raises(GpuflyError, match=message):
        measure(f"{factory_file}:{function}")


def test_a_file_that_fails_to_import_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("import no_such_dependency_of_gpufly\n")
    with pytest.raises(GpuflyError) as caught:
        spec_from_factory(f"{path}:f")
    assert caught.value.message == f"importing {path} failed: ModuleNotFoundError: No module named " \
                                   "'no_such_dependency_of_gpufly'"


SMALL_INPUTS_FILE = '''
import torch

from gpufly.models import zoo


def resnet50_at_64px():
    return zoo.resnet50(), lambda batch_size, device: (torch.randn(batch_size, 3, 64, 64, device=device),)
'''


@pytest.mark.slow
def test_dlrm_fake_activation_bytes_match_a_real_cpu_run() -> None:
    batch = 4
    spec = measure("gpufly.models.zoo:dlrm", batch_size=batch)
    torch.manual_seed(0)
    module = zoo.dlrm()
    real = real_saved_bytes(module, module.example_inputs(batch, torch.device("cpu")))
    assert spec.activation_bytes_per_sample * batch == pytest.approx(real, rel=0.05)


@pytest.mark.slow
def test_resnet50_fake_activation_bytes_match_a_real_cpu_run(tmp_path: Path) -> None:
    """At 64x64 pixels, so the real run stays a few seconds on a small CPU; the layers are the same."""
    path = tmp_path / "small_inputs.py"
    path.write_text(SMALL_INPUTS_FILE)
    batch = 2
    spec = measure(f"{path}:resnet50_at_64px", batch_size=batch)
    torch.manual_seed(0)
    module = zoo.resnet50()
    real = real_saved_bytes(module, (torch.randn(batch, 3, 64, 64),))
    assert spec.activation_bytes_per_sample * batch == pytest.approx(real, rel=0.05)


HOSTILE_FACTORIES = '''
import ctypes
import os
import sys
import time


def exits():
    sys.exit(9)


def exits_at_once():
    os._exit(5)


def segfaults():
    ctypes.string_at(0)


def hangs():
    time.sleep(600)
'''


@pytest.fixture
def hostile_file(tmp_path: Path) -> Path:
    path = tmp_path / "hostile_factories.py"
    path.write_text(HOSTILE_FACTORIES)
    return path


def test_a_factory_that_ends_its_process_is_one_error(hostile_file: Path) -> None:
    """One way out here; every other (os._exit, a signal, KeyboardInterrupt...) is in tests/test_loading.py."""
    ref = f"{hostile_file}:exits"
    with pytest.raises(GpuflyError) as caught:
        spec_from_factory(ref)
    assert caught.value.message == f"the factory {ref} called sys.exit(9)"
    assert caught.value.hint == f"run it yourself to see what it does: cd {hostile_file.parent} && python -c " \
                                "'from hostile_factories import exits; exits()'"


def test_a_factory_that_hangs_is_stopped(hostile_file: Path) -> None:
    with pytest.raises(GpuflyError) as caught:
        spec_from_factory(f"{hostile_file}:hangs", timeout_s=0.5)
    assert caught.value.message == f"the factory {hostile_file}:hangs did not finish within 0.5 s, and was stopped"


@pytest.mark.parametrize(("command", "function"), [(["fit", "--gpu", "4090"], "exits_at_once"),
                                                  (["recommend"], "segfaults")])
def test_fit_and_recommend_say_what_the_factory_did_and_go_on_living(cli, hostile_file: Path,  # type: ignore[no-untyped-def]
                                                                     command: list[str], function: str) -> None:
    result = cli(command[0], f"{hostile_file}:{function}", *command[1:])
    assert result.code == 2 and result.stderr.startswith(f"error: the factory {hostile_file}:{function} ")
    assert "hint: run it yourself" in result.stderr and len(result.stderr.strip().splitlines()) == 2


PACKAGE_FACTORY = '''
import torch
from torch import nn


def build():
    print("building the model, as a user's factory may say")
    return nn.Linear(64, 32), lambda batch_size, device: (torch.randn(batch_size, 64, device=device),)
'''


def test_fit_imports_a_package_from_the_current_folder_and_its_prints_leave_the_json_alone(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path, monkeypatch, capfd) -> None:
    (tmp_path / "my_factories").mkdir()
    (tmp_path / "my_factories" / "__init__.py").write_text("")
    (tmp_path / "my_factories" / "models.py").write_text(PACKAGE_FACTORY)
    monkeypatch.chdir(tmp_path)
    result = cli("fit", "my_factories.models:build", "--gpu", "4090", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["model"]["params"] == 64 * 32 + 32
    assert "building the model" in capfd.readouterr().err, "the factory's print went to stderr"
