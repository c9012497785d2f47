"""Where each step of the loop begins and ends, and how long it waited for its batch.

A step ends at the end of ``with prof.step()``, at a ``prof.step()`` marker, at an optimizer step (when the
profiler is attached), or, with none of those, at the next fetch from the loader. Every time comes from the
injected ``clock``, so a test drives steps and waits with a fake one.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufly.profile.records import StepRecord
from gpufly.profile.sampling import EVERY_STEP, DetailSchedule, OwnTime

Clock = Callable[[], float]

LOADER_SETTINGS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "batch_size")
"""The DataLoader attributes the diagnosis reads (a plain iterable has none of them)."""


@dataclass
class LoaderState:
    """One iterated loader: its settings, and whether optimizer steps happen while it feeds the loop."""

    settings: dict[str, Any] = field(default_factory=dict)
    fetches: int = 0
    optimizer_steps: int = 0


class StepClock:
    """Closes steps into ``steps`` (``StepRecord``s) and times the loader's waits between them.

    A plain (not detailed) step is kept as its numbers, and the records are made when ``steps`` is read: a record
    a step cost the loop more than the rest of a plain step's bookkeeping. Read ``steps`` (or ``records()``), not
    the list given, for the steps so far.

    ``schedule`` says which steps are detailed (every one by default); ``own`` is told the time spent here.
    ``read_memory`` gives each closed detailed step its memory figure; ``on_step`` listeners hear the number of steps
    recorded after each one closes; ``on_skip`` listeners hear that a partial (evaluation) step was dropped.
    """

    def __init__(self, steps: list[StepRecord], warmup: int, clock: Clock = time.perf_counter,
                 read_memory: Callable[[], int | None] = lambda: None, *, schedule: DetailSchedule | None = None,
                 own: OwnTime | None = None) -> None:
        self._steps = steps
        self._unread: list[tuple[float, float, int | None, float | None, float | None] | StepRecord] = []
        """The steps closed since ``steps`` was last read: a plain (not detailed) one as its numbers, (wall_s,
        data_wait_s, batch_size, optimizer_s, own_s), a detailed one as its record. ``optimizer_s`` is None on a plain
        step (the optimizer is timed on detailed steps only), ``own_s`` on one whose own time was not timed.
        A record per step costs the loop more than the step's own bookkeeping; they are made when read (at the end,
        not at each window of detailed steps, where 430 of them, timed alone, take 0.23 ms)."""
        self.warmup = warmup
        self.clock = clock
        self.read_memory = read_memory
        self.schedule = schedule or DetailSchedule(EVERY_STEP, warmup)
        self.own = own or OwnTime(clock)
        self.current = StepRecord(index=0, wall_s=0.0)
        self.waited_s = 0.0
        """The step under way's wait for its batch so far (the loader's, or what ``fed`` is told)."""
        self.batch_size: int | None = None
        """The step under way's batch size, once a fetch has read it. These two are kept here, not on ``current``,
        so that a plain step's bookkeeping touches this object alone: that code runs right after a millisecond of
        framework work has pushed its data out of the CPU's caches, where each object it touches costs."""
        self.loaders: dict[int, LoaderState] = {}
        self.explicit_steps = False
        """Set by ``with prof.step()``: the user says what a step is, so evaluation loaders are left alone."""
        self.optimizer_steps = 0
        self.on_step: list[Callable[[int], None]] = []
        self.on_skip: list[Callable[[], None]] = []
        self.on_detail: list[Callable[[bool], None]] = []
        """Listeners told, when it changes, whether the step now starting is detailed (they arm or disarm)."""
        self._last_boundary: float | None = None
        self._pending_marker: float | None = None
        self._marked_since_fetch = True
        """Whether the step under way was ended (or dropped) since the last fetch: if not, the next fetch ends it (a
        loop with no step markers is a step per batch). True before the first fetch: there is no step to end."""
        self._feeding: LoaderState | None = None
        self._sync_gaps: list[float] = []
        self._last_sync_end: float | None = None
        self._detailing: bool | None = None
        self.times_own = True
        """Whether gpufly's own time is timed on the step under way (the schedule says: every detailed step, runs of
        plain ones); a plain step left untimed gets no own time (None), and skips the clock readings that take it."""
        self.counting_syncs = True
        """Whether the sync counter is in (the profiler says, when a window opens): kept on each detailed step."""
        self._change_at = 0
        """The index of the next step whose detail the schedule must decide (until then, the current one's)."""
        self.sync_calls: list[tuple[StepRecord, Counter[str]]] = []
        """Each step that made sync calls (its record) with their tally by label, so that the run's tally covers the
        steps its per-step figure does (``Profiler.finish``), not the warm-up or dropped evaluation batches."""

    @property
    def steps(self) -> list[StepRecord]:
        """The closed steps, as records: the list given, completed."""
        return self.records()

    def records(self) -> list[StepRecord]:
        """The list given, completed with the steps closed since it was last read (the plain ones made records)."""
        unread, steps = self._unread, self._steps
        if unread:
            warmup = self.warmup
            for index, step in enumerate(unread, len(steps)):
                if isinstance(step, StepRecord):
                    steps.append(step)
                else:
                    wall, wait, size, optimizer, own = step
                    steps.append(StepRecord(index, wall, wait, optimizer_s=optimizer, batch_size=size,
                                            warmup=index < warmup, detailed=False, own_s=own))
            unread.clear()
        return steps

    def start(self) -> None:
        """The first step starts now (unless it already has)."""
        if self._last_boundary is None:
            self._last_boundary = self.clock()
            self._detail(self.current)

    # -- the loader ----------------------------------------------------------------------------

    def track_loader(self, source: Any) -> LoaderState:
        """The state of ``source`` (one per loader object), with the settings it shows now."""
        state = self.loaders.setdefault(id(source), LoaderState())
        state.settings.update({name: getattr(source, name) for name in LOADER_SETTINGS if hasattr(source, name)})
        return state

    def iterate(self, state: LoaderState, iterator: Iterator[Any]) -> Iterator[Any]:
        """Yield ``iterator``'s batches, timing each wait for the next one into the current step."""
        clock, own = self.clock, self.own
        size_of: Callable[[Any], int | None] | None = None
        inline_kind: type | None = None
        """The batches' type where their size is read here, without a call: a tuple or list of tensors."""
        while True:
            started = clock() if self.times_own else None
            if self._pending_marker is not None:
                self.commit_marker()
            self._feeding = state
            if self.optimizer_steps and not state.optimizer_steps and not self.explicit_steps:  # _evaluating, inline
                started = clock() if started is None else started
                self._skip_to(started)
            elif not self._marked_since_fetch:
                started = clock() if started is None else started
                self._close_step(started)  # no step markers: one step per batch
            fetching = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                if self._evaluating(state):
                    self._skip_to(clock())
                # The fetch above already closed the last batch's step: the next epoch's first fetch must not
                # close another, empty one (2 epochs x 16 batches are 32 steps, not 33).
                self._marked_since_fetch = True
                return
            fetched = clock()
            self._marked_since_fetch = False
            self.waited_s += fetched - fetching
            state.fetches += 1
            if self.batch_size is None:
                if type(batch) is inline_kind:
                    try:
                        self.batch_size = int(batch[0].shape[0])  # type: ignore[index]
                    except (AttributeError, IndexError, TypeError, ValueError):
                        self.batch_size = batch_size_of(batch)
                else:
                    if size_of is None:
                        size_of = size_reader(batch)
                        inline_kind = _sequence_of_tensors(batch)
                    self.batch_size = size_of(batch)
            if self.times_own:  # the step under way (a step closed above may have changed it)
                own.step_s += (fetching - started if started is not None else 0.0) + clock() - fetched
                own.calls += 1
            yield batch

    def fed(self, waited_s: float, batch_size: int | None) -> None:
        """A batch (or batches) came from somewhere other than ``iterate`` (Keras's data adapter): the wait for it
        and its size, into the step under way."""
        self.waited_s += waited_s
        if self.batch_size is None:
            self.batch_size = batch_size

    def main_loader_settings(self) -> dict[str, Any]:
        """The settings of the loader that feeds the optimizer steps (or, before any, the busiest one)."""
        if not self.loaders:
            return {}
        main = max(self.loaders.values(), key=lambda state: (state.optimizer_steps, state.fetches))
        return dict(main.settings)

    # -- step markers --------------------------------------------------------------------------

    def begin_step(self) -> None:
        """``with prof.step():`` entered: the call was not a marker, and the user marks steps."""
        self._pending_marker = None
        self.explicit_steps = True

    def end_step(self, at: float | None = None) -> None:
        """The end of ``with prof.step()``, or an optimizer step under `gpufly profile` (``at``: when its hook was
        entered, a reading of this clock; the time since is gpufly's own)."""
        if at is None:
            at = self.clock()
        self._close_step(at)
        if self.times_own:
            own = self.own
            own.step_s += self.clock() - at
            own.calls += 1

    def commit_marker(self) -> None:
        """A ``prof.step()`` marker not followed by ``with`` ended a step where it was called."""
        if self._pending_marker is not None:
            at, self._pending_marker = self._pending_marker, None
            self._close_step(at)

    # -- what happens inside a step ------------------------------------------------------------

    def count_sync(self, started: float, waited_s: float, label: str | None = None) -> None:
        """One more sync in this step, called at ``started`` and returning ``waited_s`` later; the CPU time since
        the previous one returned (or the step's start). ``label`` (".item()") is tallied for the step in
        ``sync_calls``. Called only while the sync counter is in, on detailed steps."""
        since = self._last_sync_end if self._last_sync_end is not None else self._last_boundary
        if since is not None:
            self._sync_gaps.append(started - since)
        self._last_sync_end = started + waited_s
        current = self.current
        current.syncs += 1
        current.sync_wait_s = (current.sync_wait_s or 0.0) + waited_s
        if label is not None:
            tallies = self.sync_calls
            if not tallies or tallies[-1][0] is not current:
                tallies.append((current, Counter()))
            tallies[-1][1][label] += 1

    def optimizer_stepped(self) -> None:
        """An optimizer step: training has begun, and the loader feeding it is the training loader."""
        if self.optimizer_steps == 0 and not self.explicit_steps and (self._steps or self._unread):
            self._drop_steps_before_training()
        self.optimizer_steps += 1
        if self._feeding is not None:
            self._feeding.optimizer_steps += 1

    def optimizer_ended_step(self, at: float) -> None:
        """`gpufly profile`: an optimizer step, whose post hook (entered ``at``) ends the loop's step. What
        ``optimizer_stepped`` and ``end_step`` do, in one call: this runs on every step."""
        if self.optimizer_steps == 0:
            self.optimizer_stepped()
        else:
            self.optimizer_steps += 1
            feeding = self._feeding
            if feeding is not None:
                feeding.optimizer_steps += 1
        self._close_step(at)
        if self.times_own:
            own = self.own
            own.step_s += self.clock() - at
            own.calls += 1

    # -- closing and dropping steps ------------------------------------------------------------

    def restart(self) -> None:
        """Drop the partial step and start the next one now: the time since the last step belongs to none (a Keras
        epoch's validation and end-of-epoch callbacks)."""
        self._skip_to(self.clock())

    def _close_step(self, at: float) -> None:
        self._marked_since_fetch = True
        last = self._last_boundary
        if last is None:
            self._last_boundary = at
            return
        self._last_boundary = at
        record = self.current
        if record.detailed:
            self._keep_detailed(record, at - last)
        elif self.times_own:
            own = self.own  # own.take(), inline
            spent, own.step_s = own.step_s, 0.0
            own.taken_s += spent
            self._unread.append((at - last, self.waited_s, self.batch_size, record.optimizer_s, spent))
        else:  # an untimed plain step: gpufly's code added no time of its own to it, and ``own`` is left untouched
            self._unread.append((at - last, self.waited_s, self.batch_size, record.optimizer_s, None))
        self.waited_s = 0.0
        self.batch_size = None
        index = record.index + 1
        if index < self._change_at and not record.detailed:
            # The common case, a plain step after a plain one: its record is this one, renumbered (not a new one).
            record.index = index
            record.optimizer_s = None
        else:
            self.current = following = StepRecord(index, 0.0, detailed=record.detailed)
            if index >= self._change_at:
                self._detail(following)
        if self.on_step:
            closed = len(self._steps) + len(self._unread)
            for listener in self.on_step:
                listener(closed)

    def _keep_detailed(self, record: StepRecord, wall_s: float) -> None:
        """A detailed step closes: it gets its wall time, own time and what only a detailed step measures (the median
        gap between syncs; memory where the schedule says), and joins the steps closed so far."""
        record.wall_s = wall_s
        record.data_wait_s = self.waited_s
        record.batch_size = self.batch_size
        record.warmup = record.index < self.warmup
        record.own_s = self.own.take()
        record.syncs_counted = self.counting_syncs
        if self.schedule.reads_memory(record.index, self._change_at):
            record.memory_bytes = self.read_memory()
        if self._sync_gaps:
            record.sync_gap_s = statistics.median(self._sync_gaps)
            self._sync_gaps.clear()
        self._last_sync_end = None
        self._unread.append(record)

    def _detail(self, record: StepRecord) -> None:
        """Whether the step starting is detailed, from the schedule (asked again only where it may change); the
        listeners hear of a change."""
        record.detailed, self._change_at, self.times_own = self.schedule.span(record.index)
        if record.detailed is not self._detailing:
            self._detailing = record.detailed
            for listener in self.on_detail:
                listener(record.detailed)

    def _evaluating(self, state: LoaderState) -> bool:
        """A loader that feeds no optimizer step once training has begun is evaluation, not the loop's steps.

        Without this, 40 no_grad validation batches after 20 training steps are most of the "steps", and their
        median and their loader's num_workers=0 stand for the training loop. Explicit ``prof.step()`` markers
        say what a step is themselves, so they are left alone.
        """
        return not self.explicit_steps and self.optimizer_steps > 0 and state.optimizer_steps == 0

    def _skip_to(self, at: float) -> None:
        """Drop the partial step (evaluation work) and start the next step at ``at``."""
        self._last_boundary = at
        self.current = StepRecord(index=self.current.index, wall_s=0.0, detailed=self.current.detailed)
        self.waited_s = 0.0
        self.batch_size = None
        self._sync_gaps.clear()
        self._last_sync_end = None
        self._marked_since_fetch = True
        for listener in self.on_skip:
            listener()

    def _drop_steps_before_training(self) -> None:
        """Batch-per-step records made before the first optimizer step are not training steps: a loader that reads
        one batch ahead (accelerate's, under the HF Trainer) or a sanity-check validation before training."""
        self._steps.clear()
        self._unread.clear()
        self.current.index = 0
        self.schedule.restart()
        self._detail(self.current)


class StepContext:
    """What ``prof.step()`` returns: a marker when called alone, the step's extent when used with ``with``.

    It runs on every step of the loop, so ``__enter__`` and ``__exit__`` do ``StepClock.begin_step`` and
    ``end_step``'s work themselves instead of calling them: code that runs just after a
    millisecond of framework work finds the interpreter's caches cold, and there each extra call costs a
    microsecond or more (about 0.1% of a 1 ms step), several times what it costs in a tight loop."""

    def __init__(self, steps: StepClock) -> None:
        self._steps = steps
        self._clock = steps.clock
        self._own = steps.own

    def marker(self) -> StepContext:
        """``prof.step()``: the step ends now, unless ``with`` makes this call the start of one (``begin_step`` then
        takes the marker back)."""
        steps = self._steps
        at = self._clock()
        if steps._pending_marker is not None:
            steps.commit_marker()
        steps._pending_marker = at
        if steps.times_own:
            own = self._own
            own.step_s += self._clock() - at
            own.calls += 1
        return self

    def __enter__(self) -> StepContext:
        steps = self._steps  # begin_step, inline
        steps._pending_marker = None
        steps.explicit_steps = True
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        steps = self._steps  # end_step, inline
        at = self._clock()
        steps._close_step(at)
        if steps.times_own:
            own = self._own
            own.step_s += self._clock() - at
            own.calls += 1


def batch_size_of(batch: Any) -> int | None:
    """The leading dimension of the first tensor-like thing in the batch.

    >>> class Tensor:
    ...     shape = (16, 32)
    >>> batch_size_of({"x": Tensor(), "y": Tensor()}), batch_size_of(["no size"])
    (16, None)
    """
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return int(batch.shape[0])
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, list | tuple):
        for item in batch:
            size = batch_size_of(item)
            if size is not None:
                return size
    return None


def _sequence_of_tensors(example: Any) -> type | None:
    """``example``'s type if it is a tuple or list whose first item has a shape (the batch size is its first
    dimension), else None."""
    kind = type(example)
    return kind if issubclass(kind, list | tuple) and example and hasattr(example[0], "shape") else None


def size_reader(example: Any) -> Callable[[Any], int | None]:
    """``batch_size_of`` for the batches of one loader, shaped like ``example``: where that is a tensor, or a
    tuple/list/dict whose first item is one, a reader that goes straight there (a loader yields the same shape
    every step), falling back to ``batch_size_of`` for a batch of another shape. Same answers, fewer steps: the
    batch size is read on every step.

    >>> class Tensor:
    ...     def __init__(self, rows: int) -> None:
    ...         self.shape = (rows, 3)
    >>> read = size_reader((Tensor(8), Tensor(8)))
    >>> read((Tensor(5), Tensor(5))), read([Tensor(4)]), read(Tensor(2)), read(("text", Tensor(6)))
    (5, 4, 2, 6)
    """
    kind = type(example)
    if hasattr(example, "shape"):
        def tensor(batch: Any) -> int | None:
            if type(batch) is kind:
                try:
                    return int(batch.shape[0])
                except (AttributeError, IndexError, TypeError, ValueError):
                    pass
            return batch_size_of(batch)

        return tensor
    if _sequence_of_tensors(example) is not None:
        def first(batch: Any) -> int | None:
            if type(batch) is kind:
                try:
                    return int(batch[0].shape[0])
                except (AttributeError, IndexError, TypeError, ValueError):
                    pass
            return batch_size_of(batch)

        return first
    if issubclass(kind, dict) and example and hasattr(next(iter(example.values())), "shape"):
        def first_value(batch: Any) -> int | None:
            if type(batch) is kind and batch:
                try:
                    return int(next(iter(batch.values())).shape[0])
                except (AttributeError, IndexError, TypeError, ValueError):
                    pass
            return batch_size_of(batch)

        return first_value
    return batch_size_of
