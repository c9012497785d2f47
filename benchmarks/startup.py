"""Start-up time of the commands that must feel instant, and of `gpufly --help` beside Typer, Rich and nvitop.

Each command runs as a fresh process, interleaved round-robin (A B C A B C ...) so that a burst of load from
another process hits every command alike; each row is the median wall time with the 25th-75th percentile
range. The target (issue 15): `gpufly --help` costs at most `import typer, rich` plus 40 ms. A two-command Typer
app's --help is shown beside it: Typer's Rich help layout imports rich.markdown and markdown-it first, which is
why gpufly prints its root page in click's plain layout (each command's own --help keeps Rich's). The other
targets: the catalog and advisor commands well under 0.5 s, `report` on a machine without a GPU well under 5 s,
`doctor` there under 3 s.

    python benchmarks/startup.py            # 11 rounds
    python benchmarks/startup.py --rounds 41
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY_APP = '''
import typer
app = typer.Typer(add_completion=False)
@app.command()
def first(x: int = 1) -> None:
    """One."""
@app.command()
def second(y: str = "") -> None:
    """Two."""
app()
'''
OTHER_COMMANDS = (
    ("gpus",),
    ("gpus", "show", "4090"),
    ("gpus", "--sort", "tflops_per_usd", "--json"),
    ("fit", "llama-3.1-8b", "--gpu", "4090"),
    ("recommend", "llama-3.1-8b"),
    ("report",),
    ("doctor",),
)
BUDGET_S = 0.040
"""What `gpufly --help` may cost beyond importing typer and rich."""


def _commands(tiny: Path) -> dict[str, list[str]]:
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "import typer, rich": [python, "-c", "import typer, rich"],
        "typer + rich: a 2-command app --help": [python, str(tiny), "--help"],
        "gpufly --help": [shutil.which("gpufly") or python, *([] if shutil.which("gpufly") else ["-m", "gpufly"]),
                          "--help"],
    }
    gpufly = [shutil.which("gpufly") or python, *([] if shutil.which("gpufly") else ["-m", "gpufly"])]
    for args in OTHER_COMMANDS:
        commands["gpufly " + " ".join(args)] = [*gpufly, *args]
    nvitop = shutil.which("nvitop")
    if nvitop:
        commands["nvitop --help"] = [nvitop, "--help"]
    return commands


def _time(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        tiny = Path(folder) / "tiny_typer_app.py"
        tiny.write_text(TINY_APP)
        commands = _commands(tiny)
        for command in commands.values():  # warm the page cache and the .pyc files once
            _time(command)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(rounds):
            for name, command in commands.items():
                times[name].append(_time(command))
    return times


def _row(name: str, samples: list[float]) -> str:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return f"| {name} | {1000 * median:.0f} | {1000 * q1:.0f}-{1000 * q3:.0f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    times = measure(args.rounds)
    print(f"# start-up, {args.rounds} interleaved rounds; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average {load:.2f} at start")
    print("| command | median ms | 25-75% ms |")
    print("| --- | ---: | ---: |")
    for name, samples in times.items():
        print(_row(name, samples))
    imports = statistics.median(times["import typer, rich"])
    ours = statistics.median(times["gpufly --help"])
    verdict = "within" if ours - imports <= BUDGET_S else "OVER"
    print(f"gpufly --help costs {1000 * (ours - imports):.0f} ms more than `import typer, rich`: {verdict} the "
          f"{1000 * BUDGET_S:.0f} ms budget")


if __name__ == "__main__":
    main()
