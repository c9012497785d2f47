"""The nodes of a fleet as their saved files describe them: doctor facts, bench runs, and what went wrong.

Files come from `gpufly doctor --save`, `gpufly bench --save` (one run per GPU) and `gpufly fleet run --save`,
written by any scheduler (`srun`, a Ray task, a Kubernetes job). A node is named by its file name up to the first
dot (``node07.json``, ``node07.facts.json`` and ``node07.bench.cuda3.json`` are all node07), since neither file
records the host that wrote it. A file that cannot be read, or that is not one of gpufly's, is a finding about
that file, never the end of the report: a fleet of a hundred nodes always has a stray file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufly.bench import BenchRun
from gpufly.doctor import Facts, facts_from_dict
from gpufly.errors import GpuflyError
from gpufly.jsonfile import read_json, write_json_atomic

BENCH_KIND = "gpufly.bench"
FAILURE_KIND = "gpufly.fleet.failure"
"""A node that gave no result (it failed or timed out under `fleet run`), saved so the report reads it back."""
FAILURE_SCHEMA_VERSION = 1
READ_HINT = "pass folders or files written by `gpufly doctor --save`, `gpufly bench --save` or `gpufly fleet run`"
WRITE_HINT = "save to a folder you can write, e.g. --save fleet/"


@dataclass(frozen=True)
class NodeData:
    """What is known about one node: its doctor facts, its bench runs (one per GPU), and its problems."""

    name: str
    facts: Facts | None = None
    runs: tuple[BenchRun, ...] = ()
    problems: tuple[str, ...] = ()
    """What went wrong on the node itself: it failed, timed out, or its bench did not run."""
    sources: tuple[str, ...] = ()
    """The files (or the Ray node) the data came from."""


@dataclass(frozen=True)
class FileProblem:
    """A file that was given but could not be used, and why."""

    path: str
    reason: str
    """What is wrong, naming the file."""


@dataclass(frozen=True)
class FleetInput:
    """Everything read: the nodes, the files that could not be used, and how many were passed over."""

    nodes: tuple[NodeData, ...]
    problems: tuple[FileProblem, ...] = ()
    skipped: int = 0
    """Files in the folders given that do not end in .json (a scheduler's logs), left out without a finding."""


def node_name(path: Path) -> str:
    """The node a file belongs to: its name up to the first dot.

    >>> node_name(Path("facts/gpu-node-07.bench.cuda3.json"))
    'gpu-node-07'
    """
    return path.name.split(".", 1)[0]


def failure_document(node: str, reasons: Iterable[str]) -> dict[str, Any]:
    """The saved form of a node's problems (`fleet run --save`)."""
    return {"schema_version": FAILURE_SCHEMA_VERSION, "kind": FAILURE_KIND, "node": node, "reasons": list(reasons)}


def _failure_reasons(data: dict[str, Any], where: str) -> tuple[str, ...]:
    reasons = data.get("reasons")
    if data.get("schema_version") != FAILURE_SCHEMA_VERSION or not isinstance(reasons, list) or not all(
            isinstance(reason, str) for reason in reasons):
        raise GpuflyError(f"{where} is not a fleet failure record this gpufly reads", hint=READ_HINT)
    return tuple(reasons)


def read_document(data: Any, where: str) -> Facts | BenchRun | tuple[str, ...]:
    """One parsed file as doctor facts, a bench run or a node's failure reasons, through the stages' own strict
    loaders; anything else is a GpuflyError saying what the file is not."""
    if not isinstance(data, dict):
        raise GpuflyError(f"{where} is not a gpufly file (expected a JSON object)", hint=READ_HINT)
    kind = data.get("kind")
    if kind == BENCH_KIND:
        return BenchRun.from_dict(data, source=where)
    if kind == FAILURE_KIND:
        return _failure_reasons(data, where)
    if kind is None and "driver" in data:
        return facts_from_dict(data, where=where)
    raise GpuflyError(f"{where} is not doctor facts, a bench run or a fleet record", hint=READ_HINT)


def _files(paths: Iterable[Path]) -> Iterator[tuple[Path, bool]]:
    """Each file to read, and whether it was named directly (a folder's non-JSON files are skipped)."""
    for path in paths:
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if not child.is_dir():
                    yield child, False
        else:
            yield path, True


def _check_given(paths: Iterable[Path]) -> list[Path]:
    given = list(paths)
    if not given:
        raise GpuflyError("no files or folders given", hint=READ_HINT)
    for path in given:
        if not path.exists():
            raise GpuflyError(f"no such file or folder: {path}", hint=READ_HINT)
    return given


def read_fleet(paths: Iterable[Path]) -> FleetInput:
    """Read every file (and every ``*.json`` in every folder) into nodes; a broken or foreign file is a
    ``FileProblem``. A path that does not exist is the user's mistake (GpuflyError); an empty fleet too."""
    collected: dict[str, dict[str, Any]] = {}
    problems: list[FileProblem] = []
    skipped = 0
    given = _check_given(paths)
    for path, named in _files(given):
        if not named and path.suffix != ".json":
            skipped += 1
            continue
        try:
            document = read_document(read_json(path, missing=f"no such file: {path}", hint=READ_HINT), str(path))
        except GpuflyError as exc:
            named_message = exc.message if str(path) in exc.message else f"{path}: {exc.message}"
            problems.append(FileProblem(str(path), named_message))
            continue
        node = collected.setdefault(node_name(path), {"facts": [], "runs": [], "problems": [], "sources": []})
        node["sources"].append(str(path))
        if isinstance(document, Facts):
            node["facts"].append(document)
        elif isinstance(document, BenchRun):
            node["runs"].append(document)
        else:
            node["problems"].extend(document)
    nodes = tuple(_node(name, parts, problems) for name, parts in sorted(collected.items()))
    if not nodes and not problems:
        raise GpuflyError("no gpufly files found in " + ", ".join(str(p) for p in given), hint=READ_HINT)
    return FleetInput(nodes, tuple(problems), skipped)


def _node(name: str, parts: dict[str, Any], problems: list[FileProblem]) -> NodeData:
    """One node from its files; two facts files for one node cannot both be right, so the newest is used and the
    other is named as a problem."""
    facts: list[Facts] = sorted(parts["facts"], key=lambda f: f.collected_at or "")
    sources = tuple(parts["sources"])
    if len(facts) > 1:
        files = ", ".join(sources)
        problems.append(FileProblem(files, f"{files}: {name} has {len(facts)} facts files; the newest "
                                           f"({facts[-1].collected_at or 'undated'}) is used"))
    return NodeData(name, facts[-1] if facts else None, tuple(parts["runs"]), tuple(parts["problems"]), sources)


def save_node(folder: Path, node: NodeData) -> list[Path]:
    """Write a node's files so `gpufly fleet report FOLDER` reads them back: ``NODE.facts.json``,
    ``NODE.bench.cudaN.json`` per GPU, and ``NODE.failed.json`` for its problems. Each write is atomic."""
    written = []
    if node.facts is not None:
        written.append(folder / f"{node.name}.facts.json")
        write_json_atomic(written[-1], node.facts.to_dict(), hint=WRITE_HINT, parents=True)
    for position, run in enumerate(node.runs):
        device = f"{run.device.kind}{run.device.index if run.device.index is not None else position}"
        written.append(folder / f"{node.name}.bench.{device}.json")
        write_json_atomic(written[-1], run.to_dict(), hint=WRITE_HINT, parents=True)
    if node.problems:
        written.append(folder / f"{node.name}.failed.json")
        write_json_atomic(written[-1], failure_document(node.name, node.problems), hint=WRITE_HINT, parents=True)
    return written
