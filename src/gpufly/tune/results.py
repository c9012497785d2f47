"""The results file: one JSON line per finished trial, after a header line that says which run wrote them.

Each trial is appended (flushed and synced) as it ends, so Ctrl-C or a kill keeps what was measured and
``--resume`` skips the trials already done. The header records the run's identity (workload, task, steps,
device, torch version) and the file's ``schema_version``; ``--resume`` refuses a file whose identity differs,
since its baseline would not be this run's. Files written before the header existed (no identity) or before
it carried a version (schema 1 without the field) are still read by ``gpufly report`` and ``gpufly.apply``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufly.errors import GpuflyError
from gpufly.jsonfile import append_line
from gpufly.records import from_dict
from gpufly.tune.trial import Trial, TrialResult
from gpufly.tune.verdict import best

HEADER = "gpufly_tune_run"
"""The key of the results file's first line, which holds the run's identity instead of a trial."""
SCHEMA_VERSION = 2
"""2: the header carries ``schema_version`` and trials may carry ``stage``. 1 (no field): earlier gpufly."""
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
        if not self.path.exists():
            return []
        if not self.path.is_file():
            raise GpuflyError(f"cannot read the results file {self.path}: it is not a regular file", READ_HINT)
        try:
            return self.path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise GpuflyError(f"cannot read the results file {self.path}: {getattr(exc, 'strerror', None) or exc}",
                              READ_HINT) from None

    def header(self) -> dict[str, Any] | None:
        """The header line's object, or None for a file without one (written before gpufly recorded its run)."""
        for line in self._lines()[:1]:
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
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
        if not isinstance(version, int) or version > SCHEMA_VERSION:
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
        self.schema_version()
        differences = [f"{key} {recorded.get(key)!r} there, {identity.get(key)!r} here"
                       for key in sorted(set(recorded) | set(identity)) if recorded.get(key) != identity.get(key)]
        if differences:
            raise GpuflyError(f"{self.path} holds another run's trials: {'; '.join(differences)}",
                              "resume with the same workload, --task, --steps and device, or use --results NEW.jsonl")

    def done(self) -> dict[str, TrialResult]:
        """The finished trials by configuration, in file order. A last line cut short by a kill is dropped (that
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
            except (json.JSONDecodeError, GpuflyError) as exc:
                if number == len(lines):
                    continue
                reason = exc.message if isinstance(exc, GpuflyError) else str(exc)
                raise GpuflyError(f"{self.path} line {number} is not a tune trial: {reason[:120]}",
                                  "delete that line, or start afresh with --results NEW.jsonl") from None
            if result is not None:
                results[Trial(result.name, result.knobs).key] = result
        return results

    def best_safe_or_error(self) -> TrialResult:
        """The best safe trial, or an error that says why there is none: no trials at all (not a results file,
        or a run stopped before its baseline) or trials of which none is safe."""
        done = list(self.done().values())
        chosen = best(done)
        if chosen is not None:
            return chosen
        if not done:
            raise GpuflyError(f"{self.path} holds no tune trials",
                              "give the .jsonl file `gpufly tune --results FILE` wrote; if the run stopped before "
                              "its first trial, run it again")
        raise GpuflyError(f"{self.path} holds {len(done)} trials and none is safe ({status_counts(done)})",
                          "read the errors with `gpufly tune WORKLOAD --resume --results FILE`, or tune again")

    def append(self, result: TrialResult) -> None:
        self._write(asdict(result))

    def _write(self, record: dict[str, Any]) -> None:
        try:
            append_line(self.path, json.dumps(record), WRITE_HINT)
        except GpuflyError as exc:
            raise GpuflyError(f"cannot write the results file {self.path}: {exc.message}", exc.hint) from None


def _trial(line: str, where: str) -> TrialResult | None:
    """A trial from one line; None for the header."""
    data = json.loads(line)
    if isinstance(data, dict) and HEADER in data:
        return None
    return from_dict(TrialResult, data, where, unknown="ignore")


def status_counts(results: Iterable[TrialResult]) -> str:
    """How many trials ended each way, e.g. ``1 failed, 2 oom``."""
    statuses = [r.status for r in results]
    return ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
