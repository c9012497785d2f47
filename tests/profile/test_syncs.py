"""The sync counter over a fake torch, so the GPU-only paths (copies, ``.to("cpu")``, synchronize) run on any
machine: what counts as a sync, what a copy costs in fake time, and that everything is put back."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

from gpufly.profile.sampling import OwnTime
from gpufly.profile.syncs import SyncCounter

from .fakes import FakeClock

COPY_S = 0.004
"""Fake seconds each host-to-device copy takes."""


def fake_torch(clock: FakeClock) -> Any:
    """A torch with a Tensor class of its own (the counter patches it) whose copies move ``clock``."""

    class Tensor:
        requires_grad = False

        def __init__(self, is_cuda: bool) -> None:
            self.is_cuda = is_cuda

        def item(self) -> float:
            return 1.0

        def tolist(self) -> list[float]:
            return [1.0]

        def cpu(self) -> Tensor:
            return Tensor(False)

        def numpy(self) -> list[float]:
            return [1.0]

        def __float__(self) -> float:
            return 1.0

        def __int__(self) -> int:
            return 1

        def __bool__(self) -> bool:
            return True

        def __index__(self) -> int:
            return 1

        def to(self, device: str, non_blocking: bool = False) -> Tensor:
            if device == "cuda" and not self.is_cuda:
                clock.advance(COPY_S)
            return Tensor(device == "cuda")

        def cuda(self, non_blocking: bool = False) -> Tensor:
            if not self.is_cuda:
                clock.advance(COPY_S)
            return Tensor(True)

    return SimpleNamespace(Tensor=Tensor, cuda=SimpleNamespace(synchronize=lambda: None))


def started(cuda: bool) -> tuple[SyncCounter, Any, list[str], list[tuple[float, bool]]]:
    """A counter started and armed (as for a detailed step)."""
    clock = FakeClock()
    torch = fake_torch(clock)
    syncs: list[str] = []
    copies: list[tuple[float, bool]] = []
    counter = SyncCounter(on_sync=lambda at, waited, label: syncs.append("sync"),
                          on_copy=lambda s, b: copies.append((s, b)), clock=clock)
    counter.start(torch, cuda)
    counter.arm()
    return counter, torch, syncs, copies


def test_on_a_gpu_run_only_reads_of_gpu_tensors_wait() -> None:
    counter, torch, syncs, _ = started(cuda=True)
    gpu, host = torch.Tensor(True), torch.Tensor(False)
    gpu.item()
    host.cpu()  # already on the host: no wait
    gpu.cpu()
    float(gpu)
    gpu.to("cpu")
    torch.cuda.synchronize()
    counter.disarm()
    assert dict(counter.calls) == {".item()": 1, ".cpu()": 1, "float(tensor)": 1, ".to(cpu)": 1,
                                   "torch.cuda.synchronize()": 1}
    assert len(syncs) == 5, "each one reported to the step clock"


def test_host_to_device_copies_are_timed_and_their_blocking_noted() -> None:
    counter, torch, syncs, copies = started(cuda=True)
    host = torch.Tensor(False)
    host.cuda()
    host.to("cuda", non_blocking=True)
    counter.disarm()
    assert copies == [(pytest.approx(COPY_S), True), (pytest.approx(COPY_S), False)]
    assert syncs == [] and not counter.calls, "a copy to the device does not make the host wait"


def test_on_a_cpu_run_every_read_counts_and_copies_are_left_alone() -> None:
    counter, torch, _, copies = started(cuda=False)
    host = torch.Tensor(False)
    host.item()
    host.tolist()
    host.cpu()  # .cpu()/.numpy() wait only for a GPU tensor
    int(host)
    counter.disarm()
    assert dict(counter.calls) == {".item()": 1, ".tolist()": 1, "int(tensor)": 1}
    assert torch.Tensor.to.__name__ == "to" and copies == []
    counter.arm()
    unwrapped = [name for name in ("cpu", "numpy", "item") if not hasattr(getattr(torch.Tensor, name), "__wrapped__")]
    assert unwrapped == ["cpu", "numpy"], "on a CPU run they never wait: not wrapped, so they cost nothing"
    counter.disarm()


def test_stopping_puts_back_every_original_and_removes_what_was_inherited() -> None:
    clock = FakeClock()
    torch = fake_torch(clock)
    before = dict(vars(torch.Tensor))
    synchronize = torch.cuda.synchronize
    counter = SyncCounter(on_sync=lambda at, waited, label: None, on_copy=lambda s, b: None, clock=clock)
    counter.start(torch, cuda=True)
    assert dict(vars(torch.Tensor)) == before, "nothing is wrapped until a detailed step arms the counter"
    counter.arm()
    assert "__repr__" in vars(torch.Tensor), "an inherited method is wrapped on the class itself"
    counter.disarm()
    assert dict(vars(torch.Tensor)) == before and torch.cuda.synchronize is synchronize
    assert repr(torch.Tensor(False)).startswith("<")


def test_a_sync_reports_when_it_was_called_and_how_long_the_host_waited_and_the_wrappers_time_themselves() -> None:
    clock = FakeClock()
    torch = fake_torch(clock)

    def item(tensor: Any) -> float:
        clock.advance(0.003)  # the device finishing its queue
        return 1.0

    torch.Tensor.item = item
    heard: list[tuple[float, float]] = []
    own = OwnTime(clock)
    counter = SyncCounter(on_sync=lambda at, waited, label: heard.append((at, waited)), on_copy=lambda s, b: None,
                          clock=clock, own=own)
    counter.start(torch, cuda=True)
    counter.arm()
    clock.advance(1.0)
    torch.Tensor(True).item()
    counter.disarm()
    torch.Tensor(True).item()  # disarmed: not counted
    assert heard == [(1.0, pytest.approx(0.003))] and own.calls == 1 and own.spent_s == 0


def test_two_profilers_disarming_in_either_order_leave_torch_as_it_was() -> None:
    clock = FakeClock()
    torch = fake_torch(clock)
    before = dict(vars(torch.Tensor))
    first, second = (SyncCounter(on_sync=lambda at, waited, label: None, on_copy=lambda s, b: None, clock=clock)
                     for _ in range(2))
    for counter in (first, second):
        counter.start(torch, cuda=True)
        counter.arm()
    first.disarm()  # its wrappers are under the second's: left in place, passing calls through
    torch.Tensor(True).item()
    assert not first.calls and dict(second.calls) == {".item()": 1}
    second.disarm()
    assert dict(vars(torch.Tensor)) == before
    first.arm()
    second.arm()
    second.disarm()
    first.disarm()
    assert dict(vars(torch.Tensor)) == before


def test_a_ctrl_c_in_the_middle_of_putting_the_originals_back_leaves_the_rest_to_the_next_disarm() -> None:
    """Windows open and close all through a run, so a Ctrl-C can land inside ``disarm``: the profiler's own stop
    then finishes the job instead of deleting what was already put back."""
    clock = FakeClock()
    torch = fake_torch(clock)
    before = dict(vars(torch.Tensor))
    counter = SyncCounter(on_sync=lambda at, waited, label: None, on_copy=lambda s, b: None, clock=clock)
    counter.start(torch, cuda=True)
    counter.arm()

    class Interrupting:
        def __setattr__(self, name: str, value: Any) -> None:
            raise KeyboardInterrupt

    counter._patched.insert(3, (Interrupting(), "x", "original", None))  # the 4th to go back is interrupted
    with pytest.raises(KeyboardInterrupt):
        counter.disarm()
    assert isinstance(counter._patched[-1][0], Interrupting) and len(counter._patched) == 4, "the 3 after it are back"
    counter._patched.pop()  # this fake owner would interrupt again
    counter.disarm()
    assert dict(vars(torch.Tensor)) == before and counter._patched == []


def test_the_wrappers_go_into_a_tensor_class_only_so_many_times_then_the_counter_stays_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From Python 3.13 a class gets 1000 version tags in its life, and each time the wrappers go in and out costs
    the tensor class two: past the budget the counter says it is out (the profiler then marks those steps'
    syncs uncounted) instead of changing the class again."""
    from gpufly.profile import syncs

    monkeypatch.setattr(syncs, "ARMS_PER_PROCESS", 3)
    counter, torch, _, _ = started(cuda=False)  # armed once
    assert counter.armed
    counter.disarm()
    original = vars(torch.Tensor).get("item")
    assert counter.arm() and counter.arm(), "already in: no second change"
    counter.disarm()
    assert counter.arm()
    counter.disarm()
    assert not counter.arm() and not counter.armed, "three arms spent"
    assert vars(torch.Tensor).get("item") is original, "the class is left as it was"
    other, _, _, _ = started(cuda=False)
    assert other.armed, "each tensor class has its own budget"


def test_the_profiler_marks_windows_past_the_budget_as_not_counting_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufly.profile import syncs
    from gpufly.profile.profiler import Profiler
    from gpufly.profile.sampling import Sampling

    monkeypatch.setattr(syncs, "ARMS_PER_PROCESS", 2)
    clock = FakeClock()
    prof = Profiler(warmup=0, nvml_interval=None, device="cpu", sampling=Sampling(first=1, window=1, share=0.5,
                                                                                   syncs_every=1), clock=clock)
    prof.syncs.start = lambda torch, cuda: syncs.SyncCounter.start(prof.syncs, fake_torch(clock), cuda)
    for _ in prof.loader(range(200)):
        with prof.step():
            clock.advance(0.001)
    data = prof.finish()
    counted = [s.syncs_counted for s in data.steps if s.detailed]
    assert counted[:1] == [True] and counted.count(True) >= 2 and not all(counted), counted
    runs = [key for key, _ in itertools.groupby(s.syncs_counted for s in data.steps if s.detailed)]
    assert runs == [True, False], "counted on the first two runs of detailed steps, then never again"


def test_the_originals_are_read_as_getattr_reads_them_without_looking_the_class_up() -> None:
    import torch

    from gpufly.profile.syncs import COPY_METHODS, SYNC_CONVERSIONS, SYNC_METHODS, _class_attribute

    names = [*SYNC_METHODS, *(name for name, _ in SYNC_CONVERSIONS), *COPY_METHODS]
    assert all(_class_attribute(torch.Tensor, name) is getattr(torch.Tensor, name) for name in names)

    class Base:
        @staticmethod
        def plain() -> int:
            return 1

        @classmethod
        def made(cls) -> str:
            return cls.__name__

    class Child(Base):
        pass

    assert _class_attribute(Child, "plain") is Child.plain and _class_attribute(Child, "made")() == "Child"
    with pytest.raises(AttributeError):
        _class_attribute(Child, "missing")
