"""NVML through nvidia-ml-py, behind one loader and one choke point that never lets an exception out.

Every call goes through ``Nvml.query`` (or ``Nvml.call``, which also names the error): "not supported",
"GPU is lost" and a function this binding lacks all become None, so callers render "N/A" instead of
crashing. So does any other exception the binding raises (a RuntimeError, OSError, TypeError or
AttributeError from a broken pynvml or a driver being reloaded): ``call`` names it ("RuntimeError from the
NVML binding: ...") so the monitor shows the field or GPU unavailable with the reason and keeps sampling.
Opening NVML on a machine without the driver gives a fact (``NvmlStatus(available=False,
reason="NVML library not found ...")``), not an exception.

``load_pynvml()`` is the one place the pynvml module is found. When the environment variable
``GPUFLY_NVML_FIXTURE`` names a recorded-NVML JSON file, it returns the replaying fake from
``gpufly.hw.fake_nvml`` instead, so every command can run against a recorded machine (tests, demos).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

FIXTURE_ENV = "GPUFLY_NVML_FIXTURE"
"""Names a recorded-NVML JSON file that every NVML reader in this process replays instead of the driver."""

LOST = "NVML_ERROR_GPU_IS_LOST"

ROUTINE_ERRORS = frozenset({"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_FOUND"})
"""Answers that mean "this card, driver or binding has no such figure" (or, for per-process samples, "none
since last time"): shown as N/A with no reason, as nvidia-smi does. Every other error is a failure worth naming."""

_UNAVAILABLE_REASONS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": "NVML library not found (no NVIDIA driver installed)",
    "NVML_ERROR_DRIVER_NOT_LOADED": "NVIDIA driver installed but not loaded",
    "NVML_ERROR_NO_PERMISSION": "no permission to talk to the NVIDIA driver",
    "NVML_ERROR_INSUFFICIENT_SIZE": "the NVIDIA driver is older than nvidia-ml-py expects",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "the NVIDIA driver is older than nvidia-ml-py expects",
}

NvmlFunction = Callable[..., Any] | str
"""An NVML function, or its name (``"nvmlDeviceGetFanSpeed"``) looked up on the loaded binding."""


@dataclass(frozen=True)
class NvmlStatus:
    """Whether NVML could be opened and, if not, why in words a person can act on."""

    available: bool
    reason: str | None = None


def load_pynvml(environ: Mapping[str, str] = os.environ) -> Any | None:
    """The pynvml module; the recorded fake when ``GPUFLY_NVML_FIXTURE`` names a fixture; None without pynvml."""
    fixture = environ.get(FIXTURE_ENV)
    if fixture:
        from gpufly.hw.fake_nvml import FakePynvml

        return FakePynvml.from_file(Path(fixture))
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def decode(value: Any) -> Any:
    """NVML's byte strings (older bindings) as str; everything else as is."""
    return value.decode() if isinstance(value, bytes) else value


def error_names(lib: Any) -> dict[Any, str]:
    """NVML error code -> its ``NVML_ERROR_*`` name in this binding (the first name where two share a code).

    A scan of the whole module (about 2,500 names in nvidia-ml-py), so a session builds it once, on its first
    error, never once per error: a GeForce card answers "not supported" for several fields on every sample."""
    return {getattr(lib, name): name for name in reversed(dir(lib)) if name.startswith("NVML_ERROR_")}


def binding_failure(exc: Exception) -> str:
    """An exception that is not an NVMLError, in one line: ``RuntimeError from the NVML binding: ...``."""
    message = " ".join(str(exc).split())
    return f"{type(exc).__name__} from the NVML binding" + (f": {message}" if message else "")


class Nvml:
    """A session with NVML. ``lib`` is the pynvml module, or a fake of it; None loads it (``load_pynvml``)."""

    def __init__(self, lib: ModuleType | Any | None = None) -> None:
        self._lib = lib if lib is not None else load_pynvml()
        self._open = False
        self._error_names: dict[Any, str] | None = None

    def open(self) -> NvmlStatus:
        """Initialise NVML; report why not instead of raising."""
        if self._lib is None:
            return NvmlStatus(False, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        try:
            self._lib.nvmlInit()
        except Exception as exc:  # whatever a broken binding raises is a reason, not a crash
            return NvmlStatus(False, self._start_failure(exc))
        self._open = True
        return NvmlStatus(True)

    def _start_failure(self, exc: Exception) -> str:
        if self._is_nvml_error(exc):
            name = self.error_name(exc)
            return _UNAVAILABLE_REASONS.get(name, f"NVML failed to start ({name})")
        if isinstance(exc, OSError):
            return f"NVML library could not be loaded ({exc})"
        return f"NVML failed to start ({binding_failure(exc)})"

    def _is_nvml_error(self, exc: Exception) -> bool:
        nvml_error = getattr(self._lib, "NVMLError", None)
        return isinstance(nvml_error, type) and isinstance(exc, nvml_error)

    def error_name(self, exc: Exception) -> str:
        """``NVML_ERROR_GPU_IS_LOST`` and friends, from an NVMLError's code (the names looked up once)."""
        if self._error_names is None:
            self._error_names = error_names(self._lib)
        return self._error_names.get(getattr(exc, "value", None), "NVML_ERROR_UNKNOWN")

    def close(self) -> None:
        if self._open:
            self.query("nvmlShutdown")
            self._open = False

    def __enter__(self) -> Nvml:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def lib(self) -> Any:
        """The pynvml module (or its fake) this session talks to, for its constants (``NVML_CLOCK_SM``)."""
        assert self._lib is not None
        return self._lib

    def function(self, fn_or_name: NvmlFunction) -> Callable[..., Any] | None:
        """The NVML function itself; None when this binding (an older nvidia-ml-py) has no such name."""
        if not isinstance(fn_or_name, str):
            return fn_or_name
        try:
            return getattr(self._lib, fn_or_name, None) if self._lib is not None else None
        except Exception:  # a broken binding's lookup failing is a missing function
            return None

    def call(self, fn_or_name: NvmlFunction, *args: Any) -> tuple[Any, str | None]:
        """Call one NVML function: (value, None), or (None, "NVML_ERROR_...") so callers can tell a field
        the card lacks from a GPU that fell off the bus; ``NVML_ERROR_FUNCTION_NOT_FOUND`` for a missing name;
        (None, "RuntimeError from the NVML binding: ...") for any other exception the binding raises."""
        fn = self.function(fn_or_name)
        if fn is None or self._lib is None:
            return None, "NVML_ERROR_FUNCTION_NOT_FOUND"
        try:
            return decode(fn(*args)), None
        except Exception as exc:  # the choke point: nothing from the binding gets past it
            return None, self.error_name(exc) if self._is_nvml_error(exc) else binding_failure(exc)

    def query(self, fn_or_name: NvmlFunction, *args: Any) -> Any:
        """Call one NVML function; None for a missing function or any NVML error (not supported, GPU lost...)."""
        return self.call(fn_or_name, *args)[0]

    def driver_version(self) -> str | None:
        return self.query("nvmlSystemGetDriverVersion")

    def cuda_driver_version(self) -> str | None:
        """The newest CUDA version the driver supports, e.g. '12.4' (from 12040); the _v2 entry point first."""
        version = self.query("nvmlSystemGetCudaDriverVersion_v2")
        if version is None:
            version = self.query("nvmlSystemGetCudaDriverVersion")
        if not isinstance(version, int):
            return None
        return f"{version // 1000}.{version % 1000 // 10}"

    def device_count(self) -> int:
        """How many GPUs NVML lists; 0 when it cannot say (``count_devices`` also says why)."""
        return self.count_devices()[0]

    def count_devices(self) -> tuple[int, str | None]:
        """How many GPUs NVML lists, and why not when it cannot list them (a broken binding, a driver being
        reloaded): (0, "NVML could not list the GPUs (...)"). A driver that lists none is (0, None)."""
        count, error = self.call("nvmlDeviceGetCount")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return count, None
        if error is None or error in ROUTINE_ERRORS:
            return 0, None
        return 0, f"NVML could not list the GPUs ({error})"
