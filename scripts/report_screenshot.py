"""Write docs/report.png: the HTML report as headless Chromium draws it, for the docs.

By default the page is the report of the recorded two-GPU machine (tests/fixtures/nvml_two_gpus.json replayed
through GPUFLY_NVML_FIXTURE: an H100 SXM and an A100 80GB SXM; the host, the doctor's findings and the software
are this machine's), so the picture shows the ladder charts and the model tables a GPU machine gets. --live
reports this machine as it is; --bench-file adds a saved bench run. Chromium runs offline (no name resolves, the
proxy is a closed port), as the page must open.

    python scripts/report_screenshot.py
    python scripts/report_screenshot.py --live --out /tmp/report.png --height 3000
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "tests" / "fixtures" / "nvml_two_gpus.json"
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9")


def write_page(page: Path, live: bool, bench_file: Path | None) -> None:
    env = dict(os.environ)
    if not live:
        env["GPUFLY_NVML_FIXTURE"] = str(RECORDED)
    command = [sys.executable, "-m", "gpufly", "report", "--html", str(page)]
    if bench_file is not None:
        command += ["--bench-file", str(bench_file)]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)


def screenshot(page: Path, out: Path, width: int, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs Chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        "--hide-scrollbars", f"--user-data-dir={profile}", *OFFLINE, f"--window-size={width},{height}",
                        f"--screenshot={out}", page.as_uri()], check=True, capture_output=True, timeout=180)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "report.png")
    parser.add_argument("--live", action="store_true", help="this machine as it is, not the recorded two GPUs")
    parser.add_argument("--bench-file", type=Path, help="a run saved by `gpufly bench --save`")
    parser.add_argument("--width", type=int, default=1040)
    parser.add_argument("--height", type=int, default=2200, help="pixels of the page from its top")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "report.html"
        write_page(page, args.live, args.bench_file)
        screenshot(page, args.out.resolve(), args.width, args.height)
    print(f"{args.out}: {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
