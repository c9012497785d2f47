"""The Hugging Face and Lightning callbacks, each with its library when installed."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from .fakes import FakeClock
from .loops import PacedDataset


def _loop(model: torch.nn.Module, clock: FakeClock, steps: int = 8) -> None:
    """What Trainer's inner loop does: iterate a DataLoader (each batch of 4 costs 2 ms), step the optimizer."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = PacedDataset(TensorDataset(torch.randn(4 * steps, 8), torch.randn(4 * steps, 1)), clock, 0.0005)
    for x, y in DataLoader(data, batch_size=4):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def test_the_trainer_callback_profiles_from_train_begin_to_train_end() -> None:
    transformers = pytest.importorskip("transformers")
    from gpufly.profile import Profiler
    from gpufly.profile.callbacks import hf_callback

    clock = FakeClock()
    callback = hf_callback(profiler=Profiler(clock=clock), report=False)
    assert isinstance(callback, transformers.TrainerCallback)
    model = torch.nn.Linear(8, 1)
    state, control = transformers.TrainerState(), transformers.TrainerControl()
    callback.on_train_begin(SimpleNamespace(per_device_train_batch_size=4), state, control, model=model)
    _loop(model, clock)
    callback.on_train_end(SimpleNamespace(), state, control)
    data = callback.profiler.data
    assert len(data.steps) == 8 and data.settings.batch_size == 4 and data.settings.model_dtype == "float32"
    assert all(s.optimizer_s is not None for s in data.steps)
    assert [s.data_wait_s for s in data.steps] == pytest.approx([0.002] * 8)
    _loop(model, clock, 2)
    assert len(data.steps) == 8, "detached after train end"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="Trainer needs accelerate")
def test_a_real_trainer_run() -> None:  # pragma: no cover - runs where accelerate is installed
    import transformers

    from gpufly.profile.callbacks import hf_callback

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"loss": torch.nn.functional.mse_loss(self.linear(x), labels)}

    rows = [{"x": torch.randn(8), "labels": torch.randn(1)} for _ in range(64)]
    args = transformers.TrainingArguments(output_dir="/tmp/gpufly-hf", per_device_train_batch_size=8, max_steps=8,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no")
    callback = hf_callback(report=False)
    transformers.Trainer(model=Tiny(), args=args, train_dataset=rows, callbacks=[callback]).train()
    data = callback.profiler.data
    assert len(data.steps) == 8, "accelerate's loader reads a batch ahead; that read is not a step of its own"
    assert data.settings.batch_size == 8, "from the Trainer's arguments: accelerate's loader has no batch_size"


def test_the_lightning_callback() -> None:
    if importlib.util.find_spec("lightning") is None and importlib.util.find_spec("pytorch_lightning") is None:
        pytest.skip("needs lightning (pip install lightning)")
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    from gpufly.profile.callbacks import lightning_callback

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 1)

        def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.linear(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    callback = lightning_callback(report=False)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
    pl.Trainer(max_steps=8, callbacks=[callback], logger=False, enable_checkpointing=False,
               enable_progress_bar=False, accelerator="cpu").fit(Module(), loader)
    data = callback.profiler.data
    assert len(data.steps) == 8, "accelerate's loader reads a batch ahead; that read is not a step of its own"
    assert data.settings.batch_size == 8, "from the Trainer's arguments: accelerate's loader has no batch_size"


def test_attached_the_optimizer_step_ends_every_step_and_is_timed_on_the_steps_looked_inside() -> None:
    """As `gpufly profile` attaches: torch's global post hook ends every step where it is entered, on the steps
    kept as numbers as on the detailed ones; the pre hook that times the optimizer is on for the detailed steps
    only (optimizer time is a detailed-only figure), and is off again after the run."""
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    from gpufly.profile import Profiler
    from gpufly.profile.attach import attached
    from gpufly.profile.sampling import Sampling

    clock = FakeClock()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.register_step_pre_hook(lambda *args: clock.advance(0.25))  # the step's own time, after gpufly's hook
    prof = Profiler(warmup=1, clock=clock, nvml_interval=None, sampling=Sampling(first=1, window=2, share=0.1))
    data = PacedDataset(TensorDataset(torch.randn(4 * 40, 8), torch.randn(4 * 40, 1)), clock, 0.0005)
    with attached(prof):
        for x, y in DataLoader(data, batch_size=4):
            clock.advance(0.5)  # forward and backward
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    steps = prof.finish().steps
    assert len(steps) == 40 and sum(not s.detailed for s in steps) > 20
    assert all(s.batch_size == 4 for s in steps)
    assert all(s.optimizer_s == 0.25 for s in steps if s.detailed)
    assert all(s.optimizer_s is None for s in steps if not s.detailed)
    assert [s.wall_s for s in steps[1:]] == pytest.approx([0.002 + 0.5 + 0.25] * 39)
    assert not _global_optimizer_pre_hooks
