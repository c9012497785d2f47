"""The tables the hostile suite is generated from: every file gpufly reads, every file it writes, every numeric option.

A new reader, writer or option is covered by one row here; `test_files.py`, `test_writers.py` and `test_numbers.py`
cross each row with the hostile inputs of its kind. A row states what makes its command cheap (a recording to replay,
saved facts instead of probing the machine), so every case runs the real command in this process in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures"
RECORDING = FIXTURES / "monitor" / "two_gpus.jsonl"
TUNE_RESULTS = FIXTURES / "tune" / "results-v1.jsonl"
BENCH_RUN = FIXTURES / "bench" / "cpu_quick_1thread.json"
FACTS_SCENARIO = FIXTURES / "doctor" / "scenarios" / "healthy_gpu.json"
TUNE_WORKLOAD = f"{FIXTURES / 'tune' / 'tiny.py'}:workload"
PROFILE_SCRIPT = FIXTURES / "profile" / "train_script.py"
NVML_ENV = {"GPUFLY_NVML_FIXTURE": str(FIXTURES / "nvml_two_gpus.json")}
"""Every command that looks at the machine sees the shipped fake NVML, so no case depends on this machine."""

LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
                "max_position_embeddings": 131072}


def gpu_bench_run() -> dict[str, Any]:
    """A saved bench run as measured on an RTX 4090 (the CPU fixture, moved to the GPU): what --calibrate takes."""
    run = json.loads(BENCH_RUN.read_text())
    run["device"].update(kind="cuda", name="NVIDIA GeForce RTX 4090", index=0, catalog_id="rtx-4090")
    run["settings"]["device"] = "cuda:0"
    return run


def profile_document() -> dict[str, Any]:
    """A small saved profile, as `gpufly profile --save` writes it."""
    steps = [{"index": i, "wall_s": 0.1, "data_wait_s": 0.01, "forward_s": 0.04, "backward_s": 0.04,
              "optimizer_s": 0.01, "syncs": 1, "batch_size": 32, "warmup": i == 0} for i in range(4)]
    return {"schema_version": 1, "steps": steps, "settings": {"device": "cpu", "batch_size": 32, "num_workers": 0},
            "gpu": [{"time": 1.0, "utilization_percent": 80.0, "memory_used_bytes": 2**30, "power_w": 200.0,
                     "power_limit_w": 400.0, "sm_clock_mhz": 1500.0, "sm_clock_max_mhz": 1980.0}],
            "trace": {"steps": 2, "window_s": 0.2, "device_busy_s": 0.15, "kernels": 40, "median_kernel_us": 30.0,
                      "top": [["gemm", 5.0, 10]]},
            "sync_calls": {"item": 3}, "crash": None, "exit_code": 0,
            "command": "train.py"}


def facts_document() -> dict[str, Any]:
    return json.loads(FACTS_SCENARIO.read_text())["facts"]


def recording_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in RECORDING.read_text().splitlines() if line.strip()]


def tune_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in TUNE_RESULTS.read_text().splitlines() if line.strip()]


def resumable_tune_lines() -> list[dict[str, Any]]:
    """The tune results with a header naming the run `tune TUNE_WORKLOAD --resume` is on this machine (CPU, the
    default 40 steps), so a resume reads its trials instead of refusing another run's file."""
    from importlib.metadata import version

    from gpufly.tune import run_identity
    from gpufly.tune.results import SCHEMA_VERSION

    header = {"gpufly_tune_run": run_identity(TUNE_WORKLOAD, "train", 40, "cpu", version("torch")),
              "schema_version": SCHEMA_VERSION}
    return [header, *tune_lines()[1:]]


@dataclass(frozen=True)
class Reader:
    """A command option (or argument) that reads a file.

    ``argv`` is the command with ``{file}`` where the file goes; ``valid`` is a good document (a JSON object, or a
    list of objects for a file of one JSON object per line); ``fields`` are paths into it (``gpus.0.power_w``,
    ``*`` for every line of a JSONL file) that the field cases give a value of the wrong type; ``accepts`` names the
    hostile contents that are valid input for this reader (an empty results file is a run not started yet).
    ``cheap`` says whether a valid input finishes at once (a `serve` would serve until stopped); ``slow`` that
    even a refusal takes seconds (`tune` builds its workload before it reads the results file), so its cases run
    with `-m slow`.
    """

    name: str
    argv: tuple[str, ...]
    suffix: str = ".json"
    valid: Callable[[], Any] | None = None
    fields: tuple[str, ...] = ()
    accepts: frozenset[str] = frozenset()
    cheap: bool = True
    slow: bool = False

    @property
    def lines(self) -> bool:
        return self.suffix in (".jsonl", ".csv")

    def command(self, path: Path | str) -> list[str]:
        return [part.replace("{file}", str(path)) for part in self.argv]

    def valid_text(self) -> str:
        assert self.valid is not None
        document = self.valid()
        if self.lines:
            return "".join(json.dumps(line) + "\n" for line in document)
        return json.dumps(document, indent=1)


PLAYABLE = frozenset({"truncated"})
"""A recording cut in the middle still plays the samples before the cut, as a results file keeps its whole trials."""
READERS: tuple[Reader, ...] = (
    Reader("fit config.json", ("fit", "{file}", "--gpu", "4090"), valid=lambda: dict(LLAMA_CONFIG),
           fields=("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "mlp_only_layers",
                   "tie_word_embeddings")),
    Reader("recommend config.json", ("recommend", "{file}", "--top", "1"), valid=lambda: dict(LLAMA_CONFIG),
           fields=("num_key_value_heads", "intermediate_size", "max_position_embeddings")),
    Reader("fit model.gguf", ("fit", "{file}", "--gpu", "4090"), suffix=".gguf"),
    Reader("fit --calibrate", ("fit", "llama-3.1-8b", "--gpu", "4090", "--calibrate", "{file}"), valid=gpu_bench_run,
           fields=("device.catalog_id", "device.kind", "results.0.value", "results.0.name", "schema_version")),
    Reader("bench --compare (first)", ("bench", "--compare", "{file}", str(BENCH_RUN)),
           valid=lambda: json.loads(BENCH_RUN.read_text()),
           fields=("results.0.value", "results.0.timing.median_s", "device.name", "started_at")),
    Reader("bench --compare (second)", ("bench", "--compare", str(BENCH_RUN), "{file}"),
           valid=lambda: json.loads(BENCH_RUN.read_text()), fields=("results", "device")),
    Reader("report --profile", ("report", "--profile", "{file}"), valid=profile_document,
           fields=("steps", "steps.1.wall_s", "steps.1.forward_s", "settings", "settings.batch_size",
                   "sync_calls", "exit_code", "command", "gpu.0.power_w", "gpu.0.time", "trace.window_s",
                   "trace.device_busy_s", "trace.kernels", "trace.top", "settings.compute_capability")),
    Reader("report --tune", ("report", "--tune", "{file}"), suffix=".jsonl", valid=tune_lines,
           fields=("*.speedup", "*.throughput", "*.status", "*.knobs", "*.name", "*.seconds"),
           accepts=frozenset({"truncated"})),
    Reader("tune --resume --results", ("tune", TUNE_WORKLOAD, "--device", "cpu", "--resume", "--results",
                                        "{file}"), suffix=".jsonl", valid=resumable_tune_lines,
           fields=("*.speedup", "*.throughput", "*.status"),
           accepts=frozenset({"empty", "truncated", "a missing file"}), cheap=False, slow=True),
    Reader("doctor --facts", ("doctor", "--facts", "{file}"), valid=facts_document,
           fields=("env", "gpus", "gpus.0.name", "gpus.0.memory_total_bytes", "driver")),
    Reader("install --facts", ("install", "torch", "--facts", "{file}"), valid=facts_document,
           fields=("gpus", "gpus.0.compute_capability", "driver")),
    Reader("top --once --replay", ("top", "--once", "--replay", "{file}"), suffix=".jsonl", valid=recording_lines,
           accepts=PLAYABLE, fields=("*.time", "*.gpus", "*.gpus.0.power_w", "*.gpus.0.memory_used_bytes", "*.host",
                   "*.gpus.0.processes.0.pid")),
    Reader("top --once --json --replay", ("top", "--once", "--json", "--replay", "{file}"), suffix=".jsonl",
           valid=recording_lines, accepts=PLAYABLE, fields=("*.gpus.0.utilization_gpu_percent", "*.gpus.0.processes")),
    Reader("top --once --replay (csv)", ("top", "--once", "--replay", "{file}"), suffix=".csv"),
    Reader("watch --replay", ("watch", "--replay", "{file}", "--count", "1"), suffix=".jsonl",
           valid=recording_lines, accepts=PLAYABLE, fields=("*.gpus.0.temperature_c", "*.hostname", "*.gpus.0.name")),
    Reader("serve --replay", ("serve", "--replay", "{file}", "--port", "0"), suffix=".jsonl",
           valid=recording_lines, accepts=PLAYABLE, fields=("*.time",), cheap=False),
)


SCRIPT_READERS: tuple[Reader, ...] = (
    Reader("fit file.py:function", ("fit", "{file}:build", "--gpu", "4090"), suffix=".py"),
    Reader("profile script.py", ("profile", "{file}"), suffix=".py", accepts=frozenset({"a file over the size cap"})),
    Reader("tune file.py", ("tune", "{file}", "--device", "cpu"), suffix=".py"),
)
"""Options that take a Python file (a model factory, a script, a workload): crossed with the special files only,
since what such a file holds is the user's own code (a script of 64 MiB of zeros is the script's own
SyntaxError, exit 1, as `python script.py` would say it)."""


@dataclass(frozen=True)
class Contents:
    """A hostile content for a file: its bytes, built from the reader's valid text (empty for a binary format)."""

    name: str
    make: Callable[[str], bytes]


def _nested(_: str) -> bytes:
    return b"[" * 100_000 + b"\n"


CONTENTS: tuple[Contents, ...] = (
    Contents("empty", lambda _: b""),
    Contents("blank lines", lambda _: b"\n\n  \n"),
    Contents("not JSON", lambda _: b"this is not json, it is a sentence\n"),
    Contents("truncated", lambda valid: valid.encode()[: max(1, len(valid) // 2)]),
    Contents("deeply nested", _nested),
    Contents("a list", lambda _: b"[1, 2, 3]\n"),
    Contents("a number", lambda _: b"42\n"),
    Contents("a string", lambda _: b'"config"\n'),
    Contents("null", lambda _: b"null\n"),
    Contents("NaN", lambda _: b"NaN\n"),
    Contents("Infinity", lambda _: b"-Infinity\n"),
    Contents("binary", lambda _: b"\x00\xff\xfe\x01GGUF\x80\x81\n"),
    Contents("an object of nothing", lambda _: b"{}\n"),
)


MAY_BE_VALID = ("null", "huge", "negative")
"""Hostile values that some fields take (an optional figure, a large count, a signed offset): a reader that runs
until stopped on a valid input is only given the others."""
HOSTILE_VALUES: dict[str, Any] = {
    "a string": "abc", "null": None, "a list": [1, "x"], "an object": {"a": 1}, "negative": -1,
    "huge": 10**30, "NaN": float("nan"), "true": True,
}
"""Values put where a field's own value belongs."""


def with_value(document: Any, path: str, value: Any) -> Any:
    """A deep copy of ``document`` with the field at ``path`` (dots; ``*`` for every line) set to ``value``;
    a path that does not reach into this document is added at its end."""
    copy = json.loads(json.dumps(document))
    head, _, rest = path.partition(".")
    if head == "*":
        return [_set(line, rest, value) for line in copy]
    return _set(copy, path, value)


def _set(node: Any, path: str, value: Any) -> Any:
    """``node`` with the field at ``path`` set; a path that does not reach into it (a line without processes)
    leaves it as it is."""
    parts = path.split(".")
    target = node
    try:
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target[int(parts[-1])] = value
        else:
            target[parts[-1]] = value
    except (IndexError, KeyError, TypeError):
        pass
    return node


# -- special files ---------------------------------------------------------------------------------------


class FifoWatchdog:
    """Keeps a test from hanging on a FIFO: after ``after_s``, opens and closes both ends again and again, so a
    command blocked opening it (for reading or writing) or reading it gets EOF and goes on; the test then fails
    (``fired``) instead of the suite waiting forever. Generous: a busy machine must never make it fire."""

    def __init__(self, path: Path, after_s: float = 20.0) -> None:
        self.path = path
        self.fired = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(after_s,), daemon=True)

    def __enter__(self) -> FifoWatchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self, after_s: float) -> None:
        if self._stop.wait(after_s) or not self.path.is_fifo():
            return
        self.fired = True
        while not self._stop.wait(0.2):
            for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
                with contextlib.suppress(OSError):
                    os.close(os.open(self.path, flags))


@dataclass(frozen=True)
class Special:
    """A path that is not a regular file of JSON, made in a test's folder."""

    name: str
    make: Callable[[Path], Path]
    needs_non_root: bool = False


KNOWN_FAILURES: dict[tuple[str, str], str] = {}
"""(reader or writer, hostile input) cases that fail in code other engineers own: xfail(strict), so the fix shows."""


def known_failures_marked(rows: Iterable[Any], inputs: Iterable[Any]) -> list[Any]:
    """Every row crossed with every input as pytest params; a known failure is xfail(strict) and slow (it waits
    for the FIFO watchdog), a row that is slow itself (``row.slow``) is slow."""
    params = []
    for row in rows:
        for item in inputs:
            name = getattr(item, "name", item)
            reason = KNOWN_FAILURES.get((row.name, name))
            marks: list[Any] = [pytest.mark.xfail(strict=True, reason=reason), pytest.mark.slow] if reason else []
            if getattr(row, "slow", False):
                marks.append(pytest.mark.slow)
            params.append(pytest.param(row, item, id=f"{row.name}-{name}", marks=marks))
    return params


def _folder(folder: Path) -> Path:
    path = folder / "folder.json"
    path.mkdir()
    return path


def _fifo(folder: Path) -> Path:
    path = folder / "pipe.json"
    os.mkfifo(path)
    return path


def _socket(folder: Path) -> Path:
    path = folder / "socket.json"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    SOCKETS.append(server)
    return path


SOCKETS: list[socket.socket] = []
"""Sockets the cases bound, closed after each case by the fixture that made them."""


def _missing(folder: Path) -> Path:
    return folder / "not-there.json"


def _unreadable(folder: Path) -> Path:
    path = folder / "locked.json"
    path.write_text("{}")
    path.chmod(0)
    return path


def oversized(folder: Path) -> Path:
    """A sparse file one byte past the document cap (no disk used): read whole, it would be 64 MiB of zeros.
    Line-per-record readers have a larger cap, lowered for the case by the test (see test_files.py)."""
    from gpufly.jsonfile import DOCUMENT_LIMIT_BYTES

    path = folder / "huge.json"
    with path.open("wb") as out:
        out.truncate(DOCUMENT_LIMIT_BYTES + 1)
    return path


SPECIALS: tuple[Special, ...] = (
    Special("a folder", _folder),
    Special("a FIFO", _fifo),
    Special("a UNIX socket", _socket),
    Special("/dev/zero", lambda _: Path("/dev/zero")),
    Special("/proc/self/mem", lambda _: Path("/proc/self/mem")),
    Special("a missing file", _missing),
    Special("an unreadable file", _unreadable, needs_non_root=True),
    Special("a file over the size cap", oversized),
)


# -- writers ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Writer:
    """A command option that writes a file: ``argv`` with ``{file}`` where the output path goes, made cheap.
    ``slow``: the command does seconds of work before it looks at the path (`gpus --chart` draws the chart first).

    `tune --results` and `tune --html` have no row: their paths are checked after the options and before the
    workload, so a case would either test an option error or, where a path is wrongly taken, start a real search;
    the reader row `tune --resume --results` covers the results file's special files."""

    name: str
    argv: tuple[str, ...]
    suffix: str = ".json"
    slow: bool = False


WRITERS: tuple[Writer, ...] = (
    Writer("doctor --save", ("doctor", "--facts", "{facts}", "--save", "{file}")),
    Writer("profile --save", ("profile", "--save", "{file}", str(PROFILE_SCRIPT))),
    Writer("profile --html", ("profile", "--html", "{file}", str(PROFILE_SCRIPT)), suffix=".html"),
    Writer("watch --output", ("watch", "--replay", str(RECORDING), "--count", "1", "--output", "{file}"),
           suffix=".jsonl"),
    Writer("gpus --chart", ("gpus", "--chart", "{file}"), suffix=".png", slow=True),
)


# -- numeric options -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    """A numeric option: the command around it (``{value}`` where the value goes), and the hostile values
    that are valid for it (``--zero 0`` is ZeRO off) with whether such a run finishes at once."""

    name: str
    argv: tuple[str, ...]
    accepts: frozenset[str] = frozenset()
    cheap: bool = True


NUMBER_VALUES: dict[str, str] = {
    "zero": "0", "negative": "-1", "NaN": "nan", "infinity": "inf", "huge": "99999999999999999999",
    "not a number": "abc", "empty": "", "a fraction": "0.5",
}

_FIT = ("fit", "llama-3.1-8b", "--gpu", "4090")
_FIT_TRAIN = ("fit", "llama-3.1-8b", "--gpu", "h100 sxm", "--task", "full")
_FIT_LORA = ("fit", "llama-3.1-8b", "--gpu", "h100 sxm", "--task", "lora")
_RECOMMEND = ("recommend", "llama-3.1-8b", "--top", "1")
_FIT_NODES = ("fit", "llama-3.1-8b", "--gpu", "8xh100 sxm", "--task", "full", "--zero", "3")
_REPLAY = ("--replay", str(RECORDING))
NUMBERS: tuple[Number, ...] = (
    Number("gpus --min-vram", ("gpus", "--min-vram", "{value}"), accepts=frozenset({"zero", "a fraction", "huge"})),
    Number("fit --ctx", (*_FIT, "--ctx", "{value}"), accepts=frozenset({"huge"})),
    Number("fit --batch", (*_FIT, "--batch", "{value}"), accepts=frozenset({"huge"})),
    Number("fit --prompt", (*_FIT, "--prompt", "{value}"), accepts=frozenset()),
    Number("fit --zero", (*_FIT_TRAIN, "--zero", "{value}"), accepts=frozenset({"zero"})),
    Number("fit --lora-rank", (*_FIT_LORA, "--lora-rank", "{value}"), accepts=frozenset({"huge"})),
    Number("fit --gpu-memory-utilization", (*_FIT, "--gpu-memory-utilization", "{value}"),
           accepts=frozenset({"a fraction"})),
    Number("fit --nodes", (*_FIT_NODES, "--nodes", "{value}"), accepts=frozenset({"huge"})),
    Number("fit --tp", (*_FIT_NODES, "--tp", "{value}")),
    Number("fit --pp", (*_FIT_NODES, "--pp", "{value}")),
    Number("fit --microbatches", (*_FIT_NODES, "--pp", "2", "--microbatches", "{value}"),
           accepts=frozenset({"huge"})),
    Number("fit --global-batch", (*_FIT_NODES, "--global-batch", "{value}")),  # huge: not a multiple of 8 ranks
    Number("fit --nics", (*_FIT_NODES, "--nodes", "2", "--nics", "{value}"), accepts=frozenset({"huge"})),
    Number("fit --cuda-context", (*_FIT_TRAIN, "--cuda-context", "{value}"), accepts=frozenset({"zero", "a fraction"})),
    Number("recommend --cuda-context", (*_RECOMMEND, "--task", "full", "--cuda-context", "{value}"),
           accepts=frozenset({"zero", "a fraction"})),
    Number("recommend --nodes", ("recommend", "llama-3.1-8b", "--task", "full", "--top", "1", "--nodes", "{value}"),
           accepts=frozenset({"huge"})),
    Number("recommend --ctx", (*_RECOMMEND, "--ctx", "{value}"), accepts=frozenset({"huge"})),
    Number("recommend --batch", (*_RECOMMEND, "--batch", "{value}"), accepts=frozenset({"huge"})),
    Number("recommend --lora-rank", ("recommend", "llama-3.1-8b", "--task", "lora", "--lora-rank", "{value}"),
           accepts=frozenset({"huge"})),
    Number("recommend --gpu-memory-utilization", (*_RECOMMEND, "--gpu-memory-utilization", "{value}"),
           accepts=frozenset({"a fraction"})),
    Number("recommend --budget", (*_RECOMMEND, "--budget", "{value}"), accepts=frozenset({"huge", "a fraction"})),
    Number("recommend --max-gpus", (*_RECOMMEND, "--max-gpus", "{value}"), accepts=frozenset({"huge"})),
    Number("recommend --top", ("recommend", "llama-3.1-8b", "--top", "{value}"), accepts=frozenset({"huge"})),
    Number("top --interval", ("top", *_REPLAY, "--interval", "{value}"), accepts=frozenset({"a fraction"}),
           cheap=False),
    Number("top --history", ("top", *_REPLAY, "--history", "{value}"), accepts=frozenset({"huge"}), cheap=False),
    Number("tune --budget-minutes", ("tune", TUNE_WORKLOAD, "--budget-minutes", "{value}"),
           accepts=frozenset({"huge", "a fraction"}), cheap=False),
    Number("tune --steps", ("tune", TUNE_WORKLOAD, "--steps", "{value}"), accepts=frozenset({"huge"}),
           cheap=False),
    Number("tune --timeout", ("tune", TUNE_WORKLOAD, "--timeout", "{value}"),
           accepts=frozenset({"huge", "a fraction"}), cheap=False),
    Number("tune --ddp", ("tune", TUNE_WORKLOAD, "--ddp", "{value}"), accepts=frozenset({"zero", "huge"}),
           cheap=False),
    Number("tune --price-per-hour", ("tune", "recsys", "--price-per-hour", "{value}"),
           accepts=frozenset({"huge", "a fraction"}), cheap=False),
    Number("tune --price-per-kwh", ("tune", TUNE_WORKLOAD, "--price-per-kwh", "{value}"),
           accepts=frozenset({"zero", "huge", "a fraction"}), cheap=False),  # free energy, as watch and serve
    Number("tune --nodes", ("tune", TUNE_WORKLOAD, "--launcher", "torchrun", "--nodes", "{value}"),
           accepts=frozenset({"huge"})),
    Number("tune --gpus-per-node", ("tune", TUNE_WORKLOAD, "--launcher", "slurm", "--gpus-per-node", "{value}"),
           accepts=frozenset({"huge"})),
    Number("watch --price-per-kwh", ("watch", *_REPLAY, "--count", "1", "--price-per-kwh", "{value}"),
           accepts=frozenset({"zero", "huge", "a fraction"})),  # as serve's: free energy is a price
    Number("profile --trace", ("profile", "--trace", "{value}", str(PROFILE_SCRIPT)),
           accepts=frozenset({"zero", "huge"}), cheap=False),
    Number("profile --warmup", ("profile", "--warmup", "{value}", str(PROFILE_SCRIPT)),
           accepts=frozenset({"zero", "huge"}), cheap=False),
    Number("watch --interval", ("watch", *_REPLAY, "--count", "1", "--interval", "{value}"),
           accepts=frozenset({"a fraction"})),
    Number("watch --rotate", ("watch", *_REPLAY, "--count", "1", "--output", "{out}", "--rotate", "{value}"),
           accepts=frozenset({"huge", "a fraction"})),
    Number("watch --count", ("watch", *_REPLAY, "--count", "{value}"), accepts=frozenset({"huge"}), cheap=False),
    Number("serve --port", ("serve", *_REPLAY, "--port", "{value}"), accepts=frozenset({"zero"}), cheap=False),
    Number("serve --interval", ("serve", *_REPLAY, "--port", "0", "--interval", "{value}"),
           accepts=frozenset({"a fraction"}), cheap=False),
    Number("serve --history", ("serve", *_REPLAY, "--port", "0", "--history", "{value}"),
           accepts=frozenset({"huge"}), cheap=False),
)
