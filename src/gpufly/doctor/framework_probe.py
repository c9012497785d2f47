"""Import one framework and print what it says about itself as one JSON line.

Run in a child process, never imported into gpufly's own process for the frameworks' sake: a
broken install can hang or crash on import. ``probes.probe_frameworks`` passes this file's source
to ``python -c`` (so the interpreter need not have gpufly installed) with the framework's name as
the argument. Standard library only, for the same reason.

While it works the child prints progress lines (``PROGRESS`` and the stage: the module being imported, at
most one line per ``PROGRESS_EVERY_S``, then each CUDA call), so the parent can tell a slow import that is
still moving from one that has stopped, and say where it stopped.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any

MARKER = "gpufly-framework-probe: "
"""Starts the result line, so whatever a framework prints on import cannot be taken for it."""
PROGRESS = "gpufly-framework-progress: "
"""Starts a progress line: the stage the child has reached."""
PROGRESS_EVERY_S = 0.5
"""At most one import progress line per this many seconds: a large framework imports thousands of modules."""
TENSORFLOW_DISTRIBUTIONS = ("tensorflow-gpu", "tensorflow-cpu", "tf-nightly", "tensorflow", "tensorflow-intel",
                            "tensorflow-macos")
"""Packages that install the ``tensorflow`` module; the first installed one is reported, so the
removed tensorflow-gpu shows even when plain tensorflow sits beside it."""


def _progress(stage: str) -> None:
    print(PROGRESS + stage, flush=True)


def _report_imports() -> None:
    """Print the module being imported, now and then: the import system's audit event names each one."""
    last = [0.0]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        now = time.monotonic()
        if event == "import" and now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            _progress(f"import {args[0]}")

    sys.addaudithook(hook)


def _step(stage: str, fn: Callable[[], Any]) -> Any:
    """One fact that may call into the driver (which can hang): said before it is asked."""
    _progress(stage)
    return _try(fn)


def _try(fn: Callable[[], Any]) -> Any:
    """One fact; None when asking for it fails, so one broken call does not lose the others."""
    try:
        return fn()
    except Exception:
        return None


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cudnn_text(version: int | None) -> str | None:
    """torch's cuDNN number as text: 90100 -> '9.1.0' (cuDNN 9+), 8902 -> '8.9.2' (older)."""
    if not isinstance(version, int):
        return None
    major, rest = divmod(version, 10000) if version >= 90000 else divmod(version, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _torch(torch: Any) -> dict[str, Any]:
    cuda = torch.cuda
    return {
        "distribution": "torch" if _installed("torch") else None,
        "cuda_version": _try(lambda: torch.version.cuda),
        "cudnn_version": _cudnn_text(_step("torch.backends.cudnn.version()", torch.backends.cudnn.version)),
        "nccl_version": _nccl_text(_step("torch.cuda.nccl.version()",
                                         lambda: importlib.import_module("torch.cuda.nccl").version())),
        "gpu_available": _step("torch.cuda.is_available()", cuda.is_available),
        "device_count": _step("torch.cuda.device_count()", cuda.device_count),
        "arch_list": _step("torch.cuda.get_arch_list()", cuda.get_arch_list),
        "libraries": _loaded_libraries(),
    }


def _nccl_text(version: Any) -> str | None:
    """torch.cuda.nccl.version(): (2, 21, 5) in recent torch, 2708 (2.7.8) in old ones."""
    if isinstance(version, tuple) and all(isinstance(part, int) for part in version):
        return ".".join(str(part) for part in version)
    if isinstance(version, int) and version > 0:
        major, rest = divmod(version, 10000) if version >= 20900 else divmod(version, 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return None


LIBRARY_NAMES = ("libcudart", "libcudnn", "libnccl", "libcublas", "libcuda.so")
"""The CUDA libraries worth naming in a bug report, by the start of their file names."""


def _loaded_libraries() -> list[str] | None:
    """The CUDA libraries this process has loaded, by path (Linux: /proc/self/maps): which cuDNN and NCCL
    were really used, the wheel's or a system copy on LD_LIBRARY_PATH."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return None
    return sorted(p for p in paths if p.rsplit("/", 1)[-1].startswith(LIBRARY_NAMES))


def _dll_version(value: Any, cuda: bool) -> Any:
    """Windows builds of TensorFlow name versions after their DLLs ("64_112" for CUDA 11.2, "64_8" for
    cuDNN 8); give them as the dotted versions every other build reports."""
    match = re.fullmatch(r"64_(\d+)", str(value)) if value is not None else None
    if not match:
        return value
    digits = match.group(1)
    return f"{digits[:-1]}.{digits[-1]}" if cuda and len(digits) > 1 else digits


def _tensorflow(tf: Any) -> dict[str, Any]:
    info = _try(tf.sysconfig.get_build_info) or {}
    gpus = _step("tf.config.list_physical_devices('GPU')", lambda: tf.config.list_physical_devices("GPU"))
    return {
        "distribution": next((name for name in TENSORFLOW_DISTRIBUTIONS if _installed(name)), None),
        "cuda_version": _dll_version(info.get("cuda_version"), cuda=True),
        "cudnn_version": _dll_version(info.get("cudnn_version"), cuda=False),
        "gpu_available": None if gpus is None else len(gpus) > 0,
        "device_count": None if gpus is None else len(gpus),
        "arch_list": info.get("cuda_compute_capabilities"),
    }


def _jax_distributions() -> str:
    """jax, jaxlib and any CUDA/ROCm plugins, with versions: they must match each other."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()
        if name in ("jax", "jaxlib") or re.match(r"jax-(cuda|rocm)\d+-(plugin|pjrt)$", name):
            found[name] = dist.version
    return ", ".join(f"{name}=={found[name]}" for name in sorted(found, key=lambda n: (n != "jax", n)))


def _jax(jax: Any) -> dict[str, Any]:
    backend = _step("jax.default_backend()", jax.default_backend)
    return {
        "distribution": _jax_distributions() or None,
        "backend": backend,
        "gpu_available": None if backend is None else backend == "gpu",
        "device_count": _try(jax.device_count),
    }


GATHERERS: dict[str, Callable[[Any], dict[str, Any]]] = {"torch": _torch, "tensorflow": _tensorflow, "jax": _jax}


def probe(name: str) -> dict[str, Any]:
    """Import ``name`` here and now and describe it; an import that fails is described, not raised."""
    _progress(f"import {name}")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        installed = exc.name != name
        return {"name": name, "installed": installed, "import_error": f"{type(exc).__name__}: {exc}"
                if installed else None}
    except (Exception, SystemExit) as exc:
        return {"name": name, "installed": True, "import_error": f"{type(exc).__name__}: {exc}"}
    return {"name": name, "installed": True, "version": getattr(module, "__version__", None),
            **GATHERERS[name](module)}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in GATHERERS:
        print(f"usage: framework_probe {{{','.join(GATHERERS)}}}", file=sys.stderr)
        return 2
    _report_imports()
    print(MARKER + json.dumps(probe(argv[0]), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
