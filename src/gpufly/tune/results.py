"""The results file: one JSON line per finished trial, after a header line that says which run wrote them.

Each trial is appended (flushed and synced) as it ends, so Ctrl-C or a kill keeps what was measured and
``--resume`` skips the trials already done. The header records the run's identity (workload, task, steps,
device, torch version) and the file's ``schema_version``; ``--resume`` refuses a file whose identity differs,
since its baseline would not be this run's. Files written before the header existed (no identity) or before
it carried a version (schema 1 without the field) are still read by ``gpufly report`` and ``gpufly.apply``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufly import jsonfile
from gpufly.errors import GpuflyError
from gpufly.records import from_dict, shown
from gpufly.tune.trial import Trial, TrialResult
from gpufly.tune.verdict import decide

HEADER = "gpufly_tune_run"
"""The key of the results file's first line, which holds the run's identity instead of a trial."""
SCHEMA_VERSION = 3
"""3: ``throughput`` is units over the wall time of the measured steps (the median step's rate moved to
``median_step_throughput``); trials carry their ``role`` (baseline, seed, trial), every throughput measured
(``throughputs``), the speedup's interval and its A/B ``rounds``; the baseline its noise floor and seed drift; a
configuration measured again is appended again (the last line of a configuration is its result). 2: the header
carries ``schema_version`` and trials may carry ``stage``; ``throughput`` was the median step's rate. 1 (no
field): earlier gpufly. Older files are read as they are: their speedups are point estimates, unconfirmed."""
WRITE_HINT = "give --results a path in a folder you can write"
READ_HINT = "give a readable .jsonl file, as `gpufly tune --results FILE` writes"


def run_identity(workload: str, task: str, steps: int, device: str, torch_version: str,
                 **extra: Any) -> dict[str, Any]:
    """What makes two runs' trials comparable: the same workload, task, steps, device and torch."""
    return {"workload": workload, "task": task, "steps": steps, "device": device, "torch": torch_version, **extra}


class ResultsLog:
    """Trial results as JSON lines, one appended per finished trial, after a header line with the run's identity.
    Read and write errors are one-line GpuflyErrors."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _lines(self) -> list[str]:
        """The file's lines; none for a file not there yet. A FIFO, a device, a socket, a folder, a file past the
        log size cap or one that is not UTF-8 text is one GpuflyError (``gpufly.jsonfile.read_text``)."""
        if not os.path.lexists(self.path):
            return []
        text = jsonfile.read_text(self.path, f"no results file at {self.path}", READ_HINT,
                                  limit=jsonfile.LOG_LIMIT_BYTES, kind="results file")
        return text.splitlines()

    def header(self) -> dict[str, Any] | None:
        """The header line's object, or None for a file without one (written before gpufly recorded its run)."""
        for line in self._lines()[:1]:
            try:
                data = json.loads(line)
            except (ValueError, RecursionError):
                return None
            if isinstance(data, dict) and isinstance(data.get(HEADER), dict):
                return data
        return None

    def identity(self) -> dict[str, Any] | None:
        """The run identity in the header, or None for a file without one."""
        header = self.header()
        return None if header is None else header[HEADER]

    def schema_version(self) -> int:
        """The file's schema version: 1 for a file written before the header carried one."""
        header = self.header()
        version = 1 if header is None else header.get("schema_version", 1)
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
            raise GpuflyError(f"{self.path} has results schema {version!r}; this gpufly reads up to {SCHEMA_VERSION}",
                              "upgrade gpufly to read it, or tune again with this one")
        return version

    def start(self, identity: dict[str, Any]) -> None:
        """Before the first trial: write the header to a new file, or check that an existing file's run is this
        one, so a resumed run never compares against another workload's (or device's) baseline."""
        if not self._lines():
            self._write({HEADER: identity, "schema_version": SCHEMA_VERSION})
            return
        recorded = self.identity()
        if recorded is None:
            raise GpuflyError(f"{self.path} does not record which run wrote it (an older gpufly wrote it)",
                              "start afresh with --results NEW.jsonl; gpufly report and gpufly.apply still read it")
        if self.schema_version() < SCHEMA_VERSION:
            raise GpuflyError(f"{self.path} was written by an older gpufly (results schema {self.schema_version()}), "
                              "which measured throughput another way: its trials cannot be mixed with this run's",
                              "start afresh with --results NEW.jsonl; gpufly report and gpufly.apply still read it")
        differences = [f"{key} {recorded.get(key)!r} there, {identity.get(key)!r} here"
                       for key in sorted(set(recorded) | set(identity)) if recorded.get(key) != identity.get(key)]
        if differences:
            raise GpuflyError(f"{self.path} holds another run's trials: {'; '.join(differences)}",
                              "resume with the same workload, --task, --steps and device, or use --results NEW.jsonl")

    def done(self) -> dict[str, TrialResult]:
        """The finished trials by configuration, in the order first seen, each as its last line says (a trial
        whose speedup was refined later is appended again). A last line cut short by a kill is dropped (that
        trial runs again); any other line that is not a trial is an error naming it, not a silent skip."""
        lines = self._lines()
        if lines:
            self.schema_version()
        results = {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                result = _trial(line, f"{self.path} line {number}")
            except GpuflyError as exc:
                if number == len(lines) and exc.message == TORN:
                    continue
                reason = exc.message
                raise GpuflyError(f"{self.path} line {number} is not a tune trial: {reason[:120]}",
                                  "delete that line, or start afresh with --results NEW.jsonl") from None
            if result is not None:
                results[Trial(result.name, result.knobs, result.seed).key] = result
        return results

    def best_safe_or_error(self) -> TrialResult:
        """The best safe trial, or an error that says why there is none: no trials at all (not a results file,
        or a run stopped before its baseline), a run that could not decide, or trials of which none is safe."""
        done = list(self.done().values())
        decision = decide(done)
        if decision.winner is not None:
            return decision.winner
        if not done:
            raise GpuflyError(f"{self.path} holds no tune trials",
                              "give the .jsonl file `gpufly tune --results FILE` wrote; if the run stopped before "
                              "its first trial, run it again")
        if decision.verdict in ("undecided", "too noisy"):
            raise GpuflyError(f"{self.path}: the run named no winner ({decision.verdict}): {decision.reason}",
                              "tune again on a quiet machine, or with --steps more")
        raise GpuflyError(f"{self.path} holds {len(done)} trials and none is safe ({status_counts(done)})",
                          "read the errors with `gpufly tune WORKLOAD --resume --results FILE`, or tune again")

    def append(self, result: TrialResult) -> None:
        self._write(asdict(result))

    def _write(self, record: dict[str, Any]) -> None:
        try:
            jsonfile.append_line(self.path, json.dumps(record), WRITE_HINT)
        except GpuflyError as exc:
            raise GpuflyError(f"cannot write the results file {self.path}: {exc.message}", exc.hint) from None


TORN = "is not JSON"
"""The reason given for a line that does not parse: on the last line, a trial a kill cut short."""
STATUSES = ("ok", "unsafe", "oom", "failed", "timeout")
"""How a trial can end (``TrialResult.status``)."""
ROLES = ("trial", "baseline", "seed")
"""What a line measured (``TrialResult.role``)."""
MEASURED = ("throughput", "median_step_throughput", "speedup", "speedup_low", "speedup_high", "seconds",
            "noise_floor", "paired_throughput", "paired_baseline")
RUN_MEASURED = ("throughput", "median_step_throughput", "seconds")
"""The figures of each of a trial's ``runs`` that must be finite numbers of at least 0 (the row shows one run's)."""
"""Figures the search and the report compare and print: NaN would sort anywhere and infinity would win every
comparison, so a saved one must be a finite number, 0 or more (the losses may be NaN or infinite: that is how a
diverged trial is recorded)."""


def _trial(line: str, where: str) -> TrialResult | None:
    """A trial from one line; None for the header."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        raise GpuflyError(TORN, READ_HINT) from None
    if isinstance(data, dict) and HEADER in data:
        return None
    result = from_dict(TrialResult, data, where, unknown="ignore")
    _check_trial(result)
    return result


def _check_trial(result: TrialResult) -> None:
    """Refuse a trial that parses but that no gpufly wrote: an unknown status, a measured figure that is not
    a finite number of at least 0."""
    if result.status not in STATUSES:
        raise GpuflyError(f"status {shown(result.status)} is not one of {', '.join(STATUSES)}", READ_HINT)
    if result.role not in ROLES:
        raise GpuflyError(f"role {shown(result.role)} is not one of {', '.join(ROLES)}", READ_HINT)
    for name in MEASURED:
        value = getattr(result, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise GpuflyError(f"{name} must be a finite number of at least 0, got {shown(value)}", READ_HINT)
    for value in result.throughputs:
        if not (math.isfinite(value) and value >= 0):
            raise GpuflyError(f"throughputs must hold finite numbers of at least 0, got {shown(value)}", READ_HINT)
    for run in result.runs:
        for name in RUN_MEASURED:
            value = getattr(run, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise GpuflyError(f"runs[].{name} must be a finite number of at least 0, got {shown(value)}",
                                  READ_HINT)
    if result.rounds < 0 or result.pairs < 0:
        raise GpuflyError(f"rounds and pairs must be at least 0, got {result.rounds} and {result.pairs}", READ_HINT)
    if result.shown_run is not None and not 1 <= result.shown_run <= len(result.runs):
        raise GpuflyError(f"shown_run {result.shown_run} is not one of the {len(result.runs)} runs", READ_HINT)


def status_counts(results: Iterable[TrialResult]) -> str:
    """How many trials ended each way, e.g. ``1 failed, 2 oom``."""
    statuses = [r.status for r in results]
    return ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
