"""Real loops on the CPU, timed by a fake clock: input-bound, sync points, a clean loop with no false alarm, a leak.

Every figure compared here is fake time the loop's parts were given (``loops.Pace``) or a count of events, so
no assertion depends on how fast this machine runs today.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch

from gpufly.profile.rules import THRESHOLDS, diagnose
from gpufly.profile.sampling import EVERY_STEP, Sampling

from . import loops


def _rules(prof) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.rule for f in diagnose(prof.data)]


def test_an_input_bound_loop_is_diagnosed_and_workers_that_keep_up_clear_it() -> None:
    """2 ms of decoding per batch against 1 ms of compute: two thirds of each step is the wait."""
    slow = loops.input_bound(num_workers=0, pace=loops.Pace(wait_s=0.002))
    findings = diagnose(slow.data)
    assert findings[0].rule == "input_bound", [f.rule for f in findings]
    assert "num_workers" in findings[0].change and "num_workers=0" in findings[0].seen
    assert slow.data.share("data_wait_s") == pytest.approx(2 / 3)
    assert slow.data.median("data_wait_s") == pytest.approx(0.002)
    assert slow.data.settings.num_workers == 0 and slow.data.settings.batch_size == 16
    fixed = loops.input_bound(num_workers=2, pace=loops.Pace(wait_s=0.002))  # the advice applied
    assert fixed.data.settings.num_workers == 2 and fixed.data.settings.persistent_workers
    assert fixed.data.median("data_wait_s") == 0, "the workers decode while the loop computes"
    assert "input_bound" not in _rules(fixed)


def test_item_every_step_is_diagnosed_as_sync_points() -> None:
    pace = loops.Pace()
    prof = loops.clean(item_every_step=True, pace=pace)
    assert "sync_points" in _rules(prof)
    assert prof.data.sync_calls == {".item()": len(prof.data.measured)}, "Adam's own .item() calls are not counted"
    assert prof.data.median("sync_gap_s") == pytest.approx(pace.step_s), "the .item() comes after the step's work"
    assert prof.data.median("wall_s") == pytest.approx(pace.step_s)
    finding = next(f for f in diagnose(prof.data) if f.rule == "sync_points")
    assert "of CPU work between syncs" in finding.seen


def test_by_default_syncs_are_counted_on_the_sampled_steps_only_and_reported_per_sampled_step() -> None:
    """The wrappers are in place only during the detailed steps, and of the windows after the first run of them
    only one in ``syncs_every``: the other steps' .item() calls cost nothing and are not counted, and the per-step
    figure is over the steps that counted."""
    sampling = Sampling(first=4, window=2, share=0.25, syncs_every=3)
    prof = loops.clean(item_every_step=True, steps=120, sampling=sampling)
    data = prof.data
    detailed = [s for s in data.steps if s.detailed]
    assert [s.index for s in detailed[:7]] == list(range(7)), "the 3 warm-up steps and the first 4 measured ones"
    assert 7 < len(detailed) < 120
    counted = [s for s in detailed if s.syncs_counted]
    assert all(s.syncs_counted for s in detailed[:7]), "the first run of detailed steps counts syncs"
    runs: list[list] = []  # runs of consecutive detailed steps: each opened the wrappers once, or not
    for step in detailed:
        if runs and runs[-1][-1].index == step.index - 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    assert len(runs) >= 6
    assert [{s.syncs_counted for s in run} for run in runs] == [{n % 3 == 0} for n in range(len(runs))]
    assert all(s.syncs == (1 if s in counted else 0) for s in data.steps)
    assert data.sync_calls == {".item()": len(data.steps_for("syncs"))} and data.per_step("syncs") == 1.0
    assert len(data.steps_for("syncs")) == len(counted) - 3, "the tally leaves out the warm-up, as the figure does"
    assert all((s.forward_s is not None) == s.detailed for s in data.steps), "forward hooks in every window"
    assert data.overhead is not None and data.overhead.detailed_steps == len(detailed)
    assert "sync_points" in _rules(prof)


def test_the_profilers_own_time_is_timed_by_its_clock_and_its_calls_counted() -> None:
    """A clock that moves only when the loop's work does: gpufly's code took no time of it, and every entry into
    gpufly (loader, step, forward and optimizer hooks, the counted .item()) was timed once."""
    prof = loops.clean(item_every_step=True, steps=10)
    overhead = prof.data.overhead
    assert overhead is not None and overhead.spent_s == 0 and overhead.per_step_s == 0
    # per step: the loader (1), prof.step() (1), its end (1), forward pre/post (2), optimizer pre/post (2), .item()
    assert overhead.hook_calls >= 10 * 8 and overhead.steps == 10


def test_a_clean_loop_gets_no_false_alarm() -> None:
    pace = loops.Pace()
    prof = loops.clean(pace=pace)
    assert _rules(prof) == []
    data = prof.data
    assert len(data.steps) == 30 and len(data.measured) == 27
    assert [s.forward_s for s in data.measured] == pytest.approx([pace.forward_s] * 27)
    assert [s.backward_s for s in data.measured] == pytest.approx([pace.backward_s] * 27)
    assert [s.optimizer_s for s in data.measured] == pytest.approx([pace.optimizer_s] * 27)
    assert data.settings.model_dtype == "float32" and data.settings.autocast is None
    assert sum(s.syncs for s in data.steps) == 0


def test_a_small_model_over_an_in_memory_dataset_gets_no_input_bound_alarm() -> None:
    """The batch handover is a large share of a ~1.4 ms step, but well under a millisecond: workers would not help."""
    prof = loops.small_clean()
    assert prof.data.share("data_wait_s") > THRESHOLDS.input_bound_share, "a share that alone would fire the rule"
    assert prof.data.median("data_wait_s") == pytest.approx(0.0003), "under THRESHOLDS.input_bound_wait_s"
    assert "input_bound" not in _rules(prof)
    assert prof.data.settings.num_workers == 0 and prof.data.settings.batch_size == 64


def test_evaluation_batches_after_training_are_not_steps_and_the_training_loaders_settings_are_reported() -> None:
    """As `gpufly profile` sees a train+eval script: no step marker, so optimizer steps end steps, and the no_grad
    validation batches (more of them, another loader) must not become "steps" or stand for the training loop."""
    from torch.utils.data import DataLoader, TensorDataset

    import gpufly
    from gpufly.profile.attach import attached

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train = DataLoader(TensorDataset(torch.randn(16 * 10, 32), torch.randint(0, 4, (16 * 10,))), batch_size=16,
                       num_workers=1, persistent_workers=True)
    val = DataLoader(TensorDataset(torch.randn(64 * 20, 32), torch.randint(0, 4, (64 * 20,))), batch_size=64)
    prof = gpufly.Profiler(warmup=2, sampling=EVERY_STEP)
    with attached(prof):
        with torch.no_grad():  # a sanity check before training, as Lightning runs: no optimizer step seen yet
            assert sum(int((model(x).argmax(-1) == y).sum()) for x, y in val) >= 0
        for _ in range(2):
            for x, y in train:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y in val)
            assert correct >= 0
    data = prof.finish()
    assert len(data.steps) == 20, "one step per optimizer step; the 60 validation batches are not steps"
    assert [s.index for s in data.steps] == list(range(20)) and [s.warmup for s in data.steps[:3]] == [1, 1, 0]
    assert all(s.batch_size == 16 for s in data.steps)
    assert data.settings.batch_size == 16 and data.settings.num_workers == 1 and data.settings.persistent_workers
    assert prof.syncs.calls == {"int(tensor)": 60}, "the validation's own int() calls are still seen"
    assert data.sync_calls == {}, "but they are in no step, so not in the tally beside the per-step figure"


@pytest.mark.slow
def test_a_leaking_loop_is_caught(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In a fresh process: the leak shows as RSS growth, which memory that earlier tests freed (and the allocator
    kept) would absorb in this one."""
    import subprocess
    import sys
    from pathlib import Path

    from gpufly.profile.records import load_profile

    saved = tmp_path / "leak.json"
    root = Path(__file__).resolve().parents[2]
    code = f"from tests.profile import loops; loops.leaking().save({str(saved)!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    finding = next(f for f in diagnose(load_profile(saved)) if f.rule == "memory_creep")
    assert "MiB per step" in finding.seen and "loss.item()" in finding.change


@pytest.mark.parametrize(("show", "label"), [
    (lambda loss: print(loss), "print(tensor)"),
    (lambda loss: print(f"loss {loss:.4f}"), "f-string of a tensor"),
    (lambda loss: print(float(loss.detach())), "float(tensor)"),
    (lambda loss: print("high" if loss > 100 else "ok"), "bool(tensor)"),
])
def test_printing_and_converting_a_tensor_count_as_one_sync_each(show, label: str) -> None:  # type: ignore[no-untyped-def]
    """Each reads the value, so on a GPU each waits; the .item() torch makes inside printing is not counted twice."""
    import gpufly

    model = torch.nn.Linear(16, 4)
    optimizer = torch.optim.Adam(model.parameters())  # its own internal .item() and bool() are not the user's
    prof = gpufly.Profiler(warmup=0, sampling=EVERY_STEP).watch(model, optimizer)
    for x in prof.loader([torch.randn(8, 16) for _ in range(5)]):
        with prof.step(), contextlib.redirect_stdout(io.StringIO()):
            loss = model(x).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            show(loss)
    data = prof.finish()
    assert data.sync_calls == {label: 5}
    assert [s.syncs for s in data.steps] == [1] * 5
    assert "sync_points" in _rules(prof)


def test_the_profiler_restores_what_it_wrapped() -> None:
    names = ("item", "tolist", "cpu", "numpy", "__repr__", "__format__", "__float__", "__int__", "__bool__",
             "__index__")
    before = {name: torch.Tensor.__dict__.get(name) for name in names}
    loops.clean(item_every_step=True, steps=40, sampling=Sampling(first=2, window=2, share=0.2))
    assert {name: torch.Tensor.__dict__.get(name) for name in before} == before
    assert torch.tensor(3.0).item() == 3.0 and float(torch.tensor(2.0)) == 2.0 and f"{torch.tensor(1.5):.1f}" == "1.5"


def test_step_as_a_marker_and_autocast_are_seen() -> None:
    import gpufly

    model = torch.nn.Linear(8, 8)
    prof = gpufly.Profiler(warmup=0).watch(model)
    for x in prof.loader([torch.randn(4, 8) for _ in range(6)]):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
        prof.step()
    data = prof.finish()
    assert len(data.steps) == 6 and data.settings.autocast == "bfloat16"
    assert all(s.batch_size == 4 for s in data.steps)


def test_a_trace_window_is_summarized_not_dumped() -> None:
    import gpufly

    from .fakes import FakeClock

    clock = FakeClock()
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    prof = gpufly.Profiler(warmup=2, trace_steps=3, clock=clock)
    for x in prof.loader([torch.randn(32, 64) for _ in range(10)]):
        with prof.step():
            model(x).sum().backward()
            clock.advance(0.001)
    trace = prof.finish().trace
    assert trace is not None and trace.steps == 3 and trace.window_s == pytest.approx(0.003), "3 steps after warm-up"
    names = [name for name, _, _ in trace.top]
    assert any("addmm" in name or "linear" in name for name in names), names
    assert all(ms >= 0 and calls > 0 for _, ms, calls in trace.top)


def test_tf32_set_through_the_new_precision_api_is_read_without_an_error() -> None:
    """Once a script sets `fp32_precision` (PyTorch's advice), the old `allow_tf32` getter raises; the profiler
    reads the new API first."""
    import gpufly

    saved = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    try:
        model = torch.nn.Linear(8, 8)
        prof = gpufly.Profiler(warmup=0).watch(model)
        for x in prof.loader([torch.randn(4, 8) for _ in range(3)]):
            model(x)
            prof.step()
        data = prof.finish()
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved
    assert data.settings.tf32_matmul is True
    assert data.settings.tf32_cudnn is (torch.backends.cudnn.conv.fp32_precision == "tf32")


@pytest.mark.parametrize("watched", [False, True])
def test_epochs_without_step_markers_give_one_step_per_batch(watched: bool) -> None:
    """The end of an epoch closes the last batch's step; the next epoch must not close an empty one too."""
    import gpufly

    data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = gpufly.Profiler(warmup=0, nvml_interval=None)
    if watched:
        prof.watch(model, optimizer)
    for _ in range(2):
        for x, y in prof.loader(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    data_out = prof.finish()
    assert len(data_out.steps) == 32
    assert all(step.batch_size == 4 for step in data_out.steps)


def test_a_warning_from_a_wrapped_conversion_points_at_the_users_line() -> None:
    import inspect
    import warnings

    import gpufly

    loss = torch.ones(1, requires_grad=True) * 2
    with gpufly.Profiler(warmup=0, nvml_interval=None), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
        value = float(loss)
    assert value == 2.0
    grad = [w for w in caught if "requires_grad=True" in str(w.message)]
    assert grad and (grad[0].filename, grad[0].lineno) == (__file__, line), [(w.filename, w.lineno) for w in grad]


def test_the_sync_tally_counts_the_steps_the_per_step_figure_counts() -> None:
    """The sync finding says "N sync calls per step over M sampled steps (.item() xK)": K counts the same M steps,
    not the warm-up's calls too (which made it read x11 over 8 steps)."""
    prof = loops.clean(item_every_step=True, steps=12)
    data = prof.data
    assert len(data.steps) == 12 and len(data.measured) == 9
    assert prof.syncs.calls == {".item()": 12}, "the counter saw every step's .item(), warm-up included"
    assert data.sync_calls == {".item()": 9} and data.per_step("syncs") == 1.0
    finding = next(f for f in diagnose(data) if f.rule == "sync_points")
    assert "1.0 sync calls per step over 9 sampled steps (.item() x9)" in finding.seen
