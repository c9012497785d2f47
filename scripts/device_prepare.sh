#!/usr/bin/env bash
# Fetch, on a machine with PyPI, the wheels that scripts/device_check.sh needs on a GPU machine without a network.
# The GPU machine's image has Python 3.12, torch, rich, psutil, nvidia-ml-py, prometheus-client, pytest and
# matplotlib; it lacks the packages below (or holds another typer). They land in .whl/ (git ignores it), and the
# GPU run carries that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
    typer==0.28.0                    # the range pyproject allows; newer ones start slower
    textual==8.2.8 mdit-py-plugins==0.7.0 platformdirs==4.14.9
    gguf==0.19.0
    msgspec==0.22.0                  # gpufly's record loader (a core dependency)
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
    torchao==0.17.0                  # the first release that is ABI-stable against torch 2.11 and newer
)
mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
ls -la .whl
du -sh .whl
