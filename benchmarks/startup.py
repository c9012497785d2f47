"""Start-up time of the commands that must feel instant: prints a table of medians.

    python benchmarks/startup.py [--runs N]

Each command runs N times in a fresh interpreter (`python -m gpufly ...`); the first run is a
warm-up (file-system caches) and is not counted. Targets: `--help` and the catalog commands under
0.5 s, the advisor commands too, `report` on a machine without a GPU well under 5 s, `doctor` there under 3 s.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

COMMANDS = (
    ("--help",),
    ("gpus",),
    ("gpus", "show", "4090"),
    ("gpus", "--sort", "tflops_per_usd", "--json"),
    ("report",),
    ("fit", "llama-3.1-8b", "--gpu", "4090"),
    ("recommend", "llama-3.1-8b"),
    ("doctor",),
)


def time_command(args: tuple[str, ...], runs: int) -> list[float]:
    times = []
    for attempt in range(runs + 1):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpufly", *args], check=True, capture_output=True)
        if attempt:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    machine = platform.processor() or platform.machine()
    python = platform.python_version()
    print(f"# gpufly start-up, {runs} runs each after 1 warm-up; {machine}, Python {python}")
    print(f"{'command':<45} {'median s':>9} {'min s':>7} {'max s':>7}")
    for args in COMMANDS:
        times = time_command(args, runs)
        print(f"{'gpufly ' + ' '.join(args):<45} {statistics.median(times):>9.3f} {min(times):>7.3f} "
              f"{max(times):>7.3f}")


if __name__ == "__main__":
    main()
