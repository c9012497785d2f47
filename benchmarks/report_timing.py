"""Time `gpufly report` (the terminal report, without --bench) against `python -m torch.utils.collect_env`.

Issue 19's target: the report under 1.5 s on this machine. Both run as fresh processes, interleaved (report,
collect_env, report, collect_env ...) so that a burst of load from another process hits both alike; each row is
the median wall time of the runs with their range (min-max) and the machine's load average before and after, the
conditions that could disturb them. The report uses the doctor's fast path (import_frameworks=False: the
frameworks' installed files are read, not imported) and says so in its set-up section; collect_env imports torch.

Both run with their bytecode cached, as installed packages do (pip compiles .pyc files at install; torch's are in
site-packages): the children get a PYTHONPYCACHEPREFIX of their own, filled by the warm-up run, even where
PYTHONDONTWRITEBYTECODE is set (a source checkout with it set recompiles gpufly's ~250 modules on every run, about
0.3 s). --no-bytecode-cache measures that case.

    python benchmarks/report_timing.py            # 7 runs each
    python benchmarks/report_timing.py --runs 15
    python benchmarks/report_timing.py --no-bytecode-cache
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

TARGET_S = 1.5


def commands() -> dict[str, list[str]]:
    gpufly = shutil.which("gpufly")
    report = [gpufly, "report"] if gpufly else [sys.executable, "-m", "gpufly", "report"]
    return {"gpufly report": report, "python -m torch.utils.collect_env": [sys.executable, "-m",
                                                                           "torch.utils.collect_env"]}


def run_once(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one fresh process; a failing command stops the benchmark (a fast failure is no result)."""
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False,
                          env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return elapsed


def child_env(cache: str | None) -> dict[str, str]:
    """This environment, with bytecode written to ``cache`` (None: as this environment says)."""
    env = dict(os.environ)
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def measure(runs: int, bytecode_cache: bool) -> dict[str, list[float]]:
    timed: dict[str, list[float]] = {name: [] for name in commands()}
    with tempfile.TemporaryDirectory() as cache:
        env = child_env(cache if bytecode_cache else None)
        for command in commands().values():
            run_once(command, env)  # warm the page cache (and the bytecode cache): every timed run then alike
        for _ in range(runs):
            for name, command in commands().items():
                timed[name].append(run_once(command, env))
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each command (after one warm-up each)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="leave PYTHONDONTWRITEBYTECODE as it is (a source checkout recompiling gpufly each run)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    timed = measure(args.runs, bytecode_cache=not args.no_bytecode_cache)
    load_after = os.getloadavg()
    cache = ("as this environment has it (PYTHONDONTWRITEBYTECODE=" + os.environ.get("PYTHONDONTWRITEBYTECODE", "")
             + ")" if args.no_bytecode_cache else "cached, as installed")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
          f"bytecode {cache}")
    print(f"{'command':<36} {'median':>8} {'min-max':>15}  runs")
    for name, samples in timed.items():
        print(f"{name:<36} {statistics.median(samples):>7.3f}s {min(samples):>6.3f}-{max(samples):.3f}s  "
              f"{len(samples)}")
    report = statistics.median(timed["gpufly report"])
    collect = statistics.median(timed["python -m torch.utils.collect_env"])
    verdict = "meets" if max(timed["gpufly report"]) < TARGET_S else "misses"
    print(f"gpufly report: {report:.3f}s median, {report / collect:.2f}x collect_env's; slowest run {verdict} the "
          f"{TARGET_S} s target")


if __name__ == "__main__":
    main()
