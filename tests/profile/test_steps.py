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
        StepContext(marked).marker()  # prof.step() called alone
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


class Sized:
    """A batch tensor of ``rows`` rows."""

    def __init__(self, rows: int) -> None:
        self.shape = (rows, 3)


def test_plain_steps_kept_as_numbers_become_the_same_records_whenever_they_are_read() -> None:
    """A step the profiler does not look inside is kept as its numbers and made a record when the steps are read:
    the records are the ones a record per step gave, read in the middle of the run or at its end, in order with
    the detailed ones. Fake times are binary fractions, so the sums are exact."""
    from gpufly.profile.sampling import DetailSchedule, Sampling

    clock = FakeClock()
    schedule = DetailSchedule(Sampling(first=1, window=2, share=0.25, enough=6, later_share=0.125), warmup=1)
    given: list[StepRecord] = []
    steps = StepClock(given, 1, clock, read_memory=lambda: 7, schedule=schedule)
    steps.start()
    sizes = [8 if i % 10 else 5 for i in range(60)]  # each 10th batch is a short one
    unread_at_20 = -1

    def batches() -> Iterator[object]:
        for rows in sizes:
            clock.advance(0.25)
            yield (Sized(rows), Sized(rows))

    midway: list[StepRecord] = []
    for i, _ in enumerate(steps.iterate(steps.track_loader(object()), batches())):
        with StepContext(steps):
            clock.advance(0.125 * (i % 3 + 1))
        if i == 20:
            unread_at_20 = len(given)
        if i == 30:
            midway = list(steps.steps)
    records = steps.steps
    assert unread_at_20 == 0 and sum(s.detailed for s in records[:21]) > 2, \
        "the windows of detailed steps before step 20 made no records: they are made when read"
    assert len(midway) == 31 and records[:31] == midway, "reading them midway changes nothing"
    assert [s.index for s in records] == list(range(60))
    plain = [s for s in records if not s.detailed]
    assert 20 < len(plain) < 60
    for s in records:
        expected = StepRecord(index=s.index, wall_s=0.25 + 0.125 * (s.index % 3 + 1), data_wait_s=0.25,
                              batch_size=sizes[s.index], warmup=s.index < 1, detailed=s.detailed,
                              own_s=0.0 if s.detailed or s.own_s is not None else None,
                              memory_bytes=s.memory_bytes if s.detailed else None)
        assert s == expected
    timed = [s.own_s is not None for s in plain]
    assert any(timed) and not all(timed), "own time timed on a sample of the plain steps, None on the others"


def test_the_schedule_is_asked_only_where_the_detail_may_change_and_thins_out_once_enough_were_seen() -> None:
    from gpufly.profile.sampling import DetailSchedule, Sampling

    sampling = Sampling(first=8, window=4, share=1 / 8, enough=40, later_share=1 / 32)
    schedule = DetailSchedule(sampling, warmup=3)
    flags: list[bool] = []
    timed: list[bool] = []
    asked_at: list[int] = []
    while len(flags) < 4000:
        asked_at.append(len(flags))
        detailed, until, times_own = schedule.span(len(flags))
        flags.extend([detailed] * (until - len(flags)))
        timed.extend([times_own] * (until - len(timed)))
    flags, timed = flags[:4000], timed[:4000]
    assert flags[:11] == [True] * 11, "the warm-up and the first 8 measured steps"
    runs = [len(list(group)) for detailed, group in itertools.groupby(flags[11:]) if detailed]
    assert all(run % 4 == 0 for run in runs[:-1]), "windows of 4 (two back to back when a gap is 0)"
    own_runs = sum(1 for own, _ in itertools.groupby(timed) if own)
    assert len(asked_at) < 3 * len(runs) + 2 * own_runs + 4, "asked where a window or a timed run starts or ends"
    detailed_then = list(itertools.accumulate(flags[11:]))
    enough_at = detailed_then.index(40 - 8) + 11  # where 40 measured steps had been detailed
    early = sum(flags[11:enough_at]) / (enough_at - 11)
    late = sum(flags[enough_at:]) / (4000 - enough_at)
    assert 1 / 16 < early < 1 / 4 and 1 / 64 < late < 1 / 16, (early, late)
    again, other = DetailSchedule(sampling, warmup=3), DetailSchedule(sampling, warmup=3)
    assert [again.span(i) for i in asked_at] == [other.span(i) for i in asked_at], "seeded: the same every run"


def test_own_time_is_timed_on_every_detailed_step_the_step_after_each_window_and_runs_of_plain_steps() -> None:
    """Timing gpufly's own code costs clock readings of its own, so plain steps have it timed in runs (about
    ``own_share`` of them); the first plain steps are such a run, and the step that closes a window (taking the wrappers
    out) is always timed, so the cost of closing one is never left out."""
    from gpufly.profile.sampling import DetailSchedule, Sampling

    sampling = Sampling(first=4, window=4, share=1 / 16, enough=1000, own_window=8, own_share=1 / 8)
    schedule = DetailSchedule(sampling, warmup=2)
    flags: list[bool] = []
    timed: list[bool] = []
    while len(flags) < 20000:
        detailed, until, times_own = schedule.span(len(flags))
        flags.extend([detailed] * (until - len(flags)))
        timed.extend([times_own] * (until - len(timed)))
    flags, timed = flags[:20000], timed[:20000]
    assert all(own for detailed, own in zip(flags, timed, strict=True) if detailed), "every detailed step is timed"
    after_window = [i for i in range(1, 20000) if flags[i - 1] and not flags[i]]
    assert after_window and all(timed[i] for i in after_window), "the step that closes a window"
    assert all(timed[6:6 + 8]), "the first plain steps are a timed run"
    plain = [own for detailed, own in zip(flags, timed, strict=True) if not detailed]
    assert 1 / 16 < sum(plain) / len(plain) < 1 / 4, sum(plain) / len(plain)
    every = DetailSchedule(Sampling(first=4, window=4, share=1 / 16, own_share=1.0), warmup=2)
    assert all(every.span(i).times_own for i in range(0, 2000, 7)), "own_share=1: every step"


def test_memory_is_read_on_each_step_of_the_first_run_then_on_the_last_step_of_each_window() -> None:
    from gpufly.profile.sampling import DetailSchedule, Sampling

    clock = FakeClock()
    readings = itertools.count(1)
    schedule = DetailSchedule(Sampling(first=2, window=3, share=0.25), warmup=1)
    steps = StepClock([], 1, clock, read_memory=lambda: next(readings), schedule=schedule)
    steps.start()
    for _ in range(200):
        steps.end_step()
    records = steps.steps
    assert all(s.memory_bytes is not None for s in records[:3]), "warm-up and the first 2: every step"
    later = records[3:190]  # the run may end inside a window: its last step there is no window's end
    ends = [s.index for s in later if s.detailed and not records[s.index + 1].detailed]
    assert ends and [s.index for s in later if s.memory_bytes is not None] == ends
    assert all(s.memory_bytes is None for s in records if not s.detailed)


def test_the_listeners_hear_the_count_of_steps_plain_ones_included() -> None:
    from gpufly.profile.sampling import DetailSchedule, Sampling

    heard: list[int] = []
    steps = StepClock([], 0, FakeClock(), schedule=DetailSchedule(Sampling(first=0, window=1, share=0.01), 0))
    steps.on_step.append(heard.append)
    steps.start()
    for _ in range(50):
        steps.end_step()
    assert heard == list(range(1, 51)) and len(steps.steps) == 50


def test_the_batch_size_reader_for_a_loaders_batches_answers_as_batch_size_of() -> None:
    from gpufly.profile.steps import size_reader

    class Pair(tuple):  # type: ignore[type-arg]
        pass

    examples = [Sized(4), (Sized(4), Sized(4)), [Sized(4)], {"x": Sized(4)}, Pair((Sized(4),)), ("text", Sized(4)),
                {"ids": [1, 2], "x": Sized(4)}, "text", []]
    batches = [Sized(3), (Sized(2), Sized(2)), [Sized(7)], {"x": Sized(6)}, ("text", Sized(5)), (Sized(0),),
               ((), Sized(9)), {"ids": [1], "x": Sized(1)}, {}, "text", [], Pair((Sized(2),)), Batch()]
    for example in examples:
        read = size_reader(example)
        assert [read(batch) for batch in batches] == [batch_size_of(batch) for batch in batches], example


def test_own_time_taken_step_by_step_adds_up_to_the_runs() -> None:
    from gpufly.profile.sampling import OwnTime

    own = OwnTime(FakeClock())
    own.add(0.25)
    own.add(0.5)
    assert own.take() == 0.75 and own.calls == 2
    own.add(0.125)
    assert own.spent_s == 0.875, "what the open step spent counts too"
    assert own.take() == 0.125 and own.take() == 0.0 and own.spent_s == 0.875


def test_the_cost_per_step_counts_each_untimed_plain_step_at_the_median_of_the_timed_ones() -> None:
    """Untimed plain steps (own_s None) cost what the timed steady ones measured; detailed steps and the step after
    each window count whole; a run with no own time at all has no figure."""
    from gpufly.profile.records import Overhead

    def step(index: int, own: float | None, detailed: bool = False) -> StepRecord:
        return StepRecord(index=index, wall_s=1.0, detailed=detailed, own_s=own)

    steps = [step(0, 0.5, detailed=True), step(1, 0.25), step(2, 0.001), step(3, 0.003), step(4, None),
             step(5, None), step(6, 0.002), step(7, None)]
    overhead = Overhead.of(steps, hook_calls=9, spent_s=0.756)
    # touched: steps 0 and 1 (whole: 0.75); steady: 2-7, six steps at the median of 0.001, 0.003, 0.002
    assert overhead.per_step_s == pytest.approx((0.75 + 6 * 0.002) / 8)
    assert Overhead.of([step(0, None), step(1, None)], hook_calls=0, spent_s=0.0).per_step_s is None
