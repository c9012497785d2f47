"""The step clock on its own, driven by a fake clock: steps, loader waits, markers and evaluation loaders."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from gpufly.profile.records import StepRecord
from gpufly.profile.steps import StepClock, StepContext, batch_size_of

from .fakes import FakeClock


class Batch:
    shape = (8, 3)


def slow_batches(clock: FakeClock, count: int, wait_s: float) -> Iterator[Batch]:
    """A loader whose every batch takes ``wait_s`` of fake time to arrive."""
    for _ in range(count):
        clock.advance(wait_s)
        yield Batch()


def started(clock: FakeClock, warmup: int = 0) -> StepClock:
    steps = StepClock([], warmup, clock)
    steps.start()
    return steps


def run_epoch(steps: StepClock, clock: FakeClock, batches: int, wait_s: float, work_s: float,
              optimizer: bool = False, source: object = None) -> None:
    state = steps.track_loader(source if source is not None else object())
    for _ in steps.iterate(state, slow_batches(clock, batches, wait_s)):
        clock.advance(work_s)
        if optimizer:
            steps.optimizer_stepped()


def test_without_markers_each_batch_is_a_step_with_its_wait_and_no_phantom_step_between_epochs() -> None:
    clock = FakeClock()
    steps = started(clock, warmup=1)
    loader = object()
    for _ in range(2):
        run_epoch(steps, clock, batches=4, wait_s=0.002, work_s=0.001, source=loader)
    assert len(steps.steps) == 8, "2 epochs x 4 batches: the next epoch's first fetch closes no empty step"
    assert [s.index for s in steps.steps] == list(range(8)) and [s.warmup for s in steps.steps[:2]] == [True, False]
    assert all(s.wall_s == pytest.approx(0.003) and s.data_wait_s == pytest.approx(0.002) for s in steps.steps)
    assert all(s.batch_size == 8 for s in steps.steps)


def test_with_step_the_step_ends_with_the_block_and_a_marker_where_it_was_called() -> None:
    clock = FakeClock()
    steps = started(clock)
    state = steps.track_loader(object())
    for _ in steps.iterate(state, slow_batches(clock, 3, wait_s=0.001)):
        with StepContext(steps):
            clock.advance(0.004)
        clock.advance(0.010)  # after the block: counted in the next step, not this one
    assert [s.wall_s for s in steps.steps] == pytest.approx([0.005, 0.015, 0.015])
    marked = started(clock)
    for _ in marked.iterate(marked.track_loader(object()), slow_batches(clock, 3, wait_s=0.001)):
        clock.advance(0.002)
        marked.mark()
        clock.advance(0.050)  # after the marker, before the next fetch: the next step's time
    marked.commit_marker()
    assert [s.wall_s for s in marked.steps] == pytest.approx([0.003, 0.053, 0.053])


def test_evaluation_batches_after_training_are_not_steps() -> None:
    clock = FakeClock()
    steps = started(clock)
    train, val = object(), object()
    run_epoch(steps, clock, batches=5, wait_s=0.001, work_s=0.001, optimizer=True, source=train)
    run_epoch(steps, clock, batches=20, wait_s=0.001, work_s=0.005, source=val)
    run_epoch(steps, clock, batches=5, wait_s=0.001, work_s=0.001, optimizer=True, source=train)
    assert len(steps.steps) == 10, "one step per training batch; the 20 validation batches are no steps"
    assert max(s.wall_s for s in steps.steps) == pytest.approx(0.002), "evaluation time is in no training step"


def test_steps_before_the_first_optimizer_step_are_dropped() -> None:
    """A loader that reads a batch ahead, or a sanity-check validation, before training begins."""
    clock = FakeClock()
    steps = started(clock)
    run_epoch(steps, clock, batches=4, wait_s=0.001, work_s=0.001)
    assert len(steps.steps) == 4
    steps.optimizer_stepped()
    assert steps.steps == [] and steps.current.index == 0


def test_syncs_are_counted_with_the_cpu_time_between_them() -> None:
    clock = FakeClock()
    steps = started(clock)
    clock.advance(0.003)
    steps.count_sync(clock(), 0.002)  # the host waited 2 ms in this one
    clock.advance(0.003)
    steps.count_sync(clock(), 0.0)
    clock.advance(0.001)
    steps.count_sync(clock(), 0.0)
    steps.end_step()
    step = steps.steps[0]
    assert step.syncs == 3 and step.sync_gap_s == pytest.approx(0.001), "gaps 3, 1, 1 ms: from each sync's return"
    assert step.sync_wait_s == pytest.approx(0.002)


def test_each_closed_step_gets_its_memory_and_tells_its_listeners() -> None:
    clock = FakeClock()
    readings = iter([100, 200])
    heard: list[int] = []
    steps = StepClock([], 0, clock, read_memory=lambda: next(readings))
    steps.on_step.append(heard.append)
    steps.start()
    steps.end_step()
    steps.end_step()
    assert [s.memory_bytes for s in steps.steps] == [100, 200] and heard == [1, 2]


def test_the_settings_of_the_loader_that_trains_are_the_loops() -> None:
    class Loader:
        def __init__(self, workers: int) -> None:
            self.num_workers, self.batch_size = workers, 16

        def __iter__(self) -> Iterator[Batch]:
            return iter([Batch()] * 4)

    clock = FakeClock()
    steps = started(clock)
    train, val = Loader(4), Loader(0)
    for loader, optimizer in ((val, False), (train, True), (val, False)):
        for _ in steps.iterate(steps.track_loader(loader), iter(loader)):
            if optimizer:
                steps.optimizer_stepped()
    assert steps.main_loader_settings() == {"num_workers": 4, "batch_size": 16}


def test_the_batch_size_is_the_leading_dimension_of_the_first_tensor() -> None:
    assert batch_size_of((Batch(), Batch())) == 8 and batch_size_of({"ids": Batch()}) == 8
    assert batch_size_of("text") is None and batch_size_of([]) is None
    assert StepRecord(index=0, wall_s=0.0).batch_size is None


def test_only_detailed_steps_read_memory_and_the_listeners_hear_each_change_of_detail() -> None:
    from gpufly.profile.sampling import DetailSchedule, Sampling

    clock = FakeClock()
    readings: list[int] = []
    changes: list[bool] = []
    schedule = DetailSchedule(Sampling(first=2, window=1, share=0.5), warmup=1)
    steps = StepClock([], 1, clock, read_memory=lambda: len(readings) or readings.append(1) or 1, schedule=schedule)
    steps.on_detail.append(changes.append)
    steps.start()
    for _ in range(40):
        steps.end_step()
    detailed = [s.detailed for s in steps.steps]
    assert detailed[:3] == [True] * 3 and not all(detailed), "warm-up and the first 2 measured, then a sample"
    assert all((s.memory_bytes is not None) == s.detailed for s in steps.steps)
    seen = [*detailed, steps.current.detailed]  # the step now open was decided too
    flips = sum(a != b for a, b in itertools.pairwise(seen))
    assert changes[0] is True and len(changes) == flips + 1, "told once at the start, then at each change"
