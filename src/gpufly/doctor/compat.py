"""Version tables for the doctor: which driver runs which CUDA, which wheel ships code for which GPU.

The tables are JSON files in ``doctor/data``, one source URL per row, read once. Their shape is fixed by a
JSON Schema beside each (``*.schema.json``), which the tests check the shipped tables against: validating
shipped data is a test's job, not start-up's. This module only reads the tables and answers questions; the
install choice lives in ``install/``, the probing in ``probes.py``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

from gpufly.catalog.spec import parse_compute_capability
from gpufly.errors import GpuflyError, unknown_choice

DATA_DIR = Path(__file__).with_name("data")
TABLES = ("cuda_drivers", "torch_wheels", "tensorflow", "jax")
PLATFORMS = ("linux", "wsl", "windows", "darwin")
"""Where a wheel will run; "wsl" is Linux wheels on a Windows driver."""

ArchKind = Literal["sass", "ptx"]
_ARCH = re.compile(r"^(sm|compute)_(\d{2,})([af]?)$")


# --- versions -----------------------------------------------------------------------------------

def parse_version(text: str, what: str = "version", example: str = "550.54.15") -> Version:
    """A version read as PEP 440 (``packaging``), so "550.54.15" > "550.9" and "580" == "580.0.0" compare as
    numbers do, and a local tag ("2.13.0+cpu") is read rather than refused.

    ``example`` is what the hint shows: a CUDA version should not be explained with a driver's.

    >>> parse_version("550.54.15") > parse_version("550.9"), parse_version("2.13.0+cpu").release
    (True, (2, 13, 0))
    """
    try:
        return Version(str(text).strip())
    except InvalidVersion:
        raise GpuflyError(f"cannot read {what} {text!r}", hint=f"expected dotted numbers, e.g. {example}") from None


def version_at_least(version: str, floor: str) -> bool:
    """``version >= floor`` numerically; missing parts count as 0 ("580" == "580.0.0")."""
    return parse_version(version) >= parse_version(floor)


def cuda_key(cuda: str) -> tuple[int, int]:
    """A CUDA version ("12.6", "12.6.3") as (major, minor) for ordering."""
    version = parse_version(cuda, "CUDA version", example="12.6")
    return version.major, version.minor


def python_key(version: str) -> tuple[int, int]:
    """A Python version ("3.12.3", "3.12") as (major, minor): wheels are built per minor."""
    parsed = parse_version(version, "Python version", example="3.12")
    if len(parsed.release) < 2:
        raise GpuflyError(f"cannot read Python version {version!r}", hint="expected e.g. 3.12")
    return parsed.major, parsed.minor


def check_platform(platform: str) -> str:
    if platform not in PLATFORMS:
        raise unknown_choice("platform", platform, PLATFORMS)
    return platform


def _driver_os(platform: str) -> str:
    """The driver table to read: WSL runs the Windows driver, projected into Linux."""
    check_platform(platform)
    if platform == "darwin":
        raise GpuflyError("there is no NVIDIA CUDA driver for macOS", hint="CUDA builds need Linux, WSL2 or Windows")
    return "windows" if platform in ("windows", "wsl") else "linux"


# --- data files ---------------------------------------------------------------------------------

@cache
def _read(name: str) -> Mapping[str, Any]:
    path = DATA_DIR / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GpuflyError(f"cannot read gpufly's table {path}: {exc}") from exc


# --- CUDA and the driver ------------------------------------------------------------------------

@cache
def _toolkits() -> dict[tuple[int, int], Mapping[str, Any]]:
    return {cuda_key(row["cuda"]): row for row in _read("cuda_drivers")["toolkits"]}


@cache
def _families() -> dict[int, Mapping[str, Any]]:
    return {row["major"]: row for row in _read("cuda_drivers")["families"]}


def toolkit_driver(cuda: str, platform: str = "linux") -> str | None:
    """The driver that CUDA X.Y shipped with: from it on, X.Y runs with its full feature set.

    None where NVIDIA lists none (Windows for 13.x) or the table lacks the version.
    """
    row = _toolkits().get(cuda_key(cuda))
    return row.get(_driver_os(platform)) if row else None


def family_floor(cuda: str, platform: str = "linux") -> str | None:
    """The minor-version-compatibility floor of CUDA's major family (12.x: 525.60.13), if it has one."""
    row = _families().get(cuda_key(cuda)[0])
    return row.get(_driver_os(platform)) if row else None


def min_driver_for(cuda: str, platform: str = "linux") -> str:
    """The oldest driver that runs an application built with CUDA ``cuda`` at all.

    That is the family floor where minor-version compatibility applies (11.x and later), else the
    toolkit's own driver.
    """
    known = [v for v in (family_floor(cuda, platform), toolkit_driver(cuda, platform)) if v]
    if not known:
        versions = [row["cuda"] for row in _read("cuda_drivers")["toolkits"]]
        raise unknown_choice("CUDA version", cuda, versions)
    return min(known, key=parse_version)


def driver_supports(driver_version: str, cuda: str, platform: str = "linux") -> bool:
    """Whether this driver can run code built with CUDA ``cuda`` (minor-version compatibility counts).

    >>> driver_supports("535.54.03", "12.8"), driver_supports("535.54.03", "13.0")
    (True, False)
    """
    return version_at_least(driver_version, min_driver_for(cuda, platform))


def driver_runs_natively(driver_version: str, cuda: str, platform: str = "linux",
                         driver_cuda: str | None = None) -> bool | None:
    """Whether the driver runs CUDA ``cuda`` with the full feature set, not just by minor-version compatibility.

    ``driver_cuda`` is the "CUDA Version" the driver reports (nvidia-smi's header), the best evidence;
    without it the toolkit table decides. None when neither knows.
    """
    if driver_cuda:
        return cuda_key(cuda) <= cuda_key(driver_cuda)
    shipped = toolkit_driver(cuda, platform)
    return None if shipped is None else version_at_least(driver_version, shipped)


@dataclass(frozen=True)
class MinorCompat:
    """What minor-version compatibility asks of a build and what it costs (NVIDIA's CUDA Compatibility guide)."""

    caveat: str
    """What is lost: features of the newer minor that need the newer driver."""
    ptx_error: str
    """What a GPU that would need PTX JIT gets instead of running."""
    source: str


@cache
def minor_compat() -> MinorCompat:
    row = _read("cuda_drivers")["minor_version_compatibility"]
    return MinorCompat(row["caveat"], row["ptx_error"], row["source"])


def runs_by_minor_compat(driver_version: str, cuda: str, platform: str = "linux",
                         driver_cuda: str | None = None) -> bool:
    """Whether the driver runs CUDA ``cuda`` only through minor-version compatibility: above its family floor,
    below the driver that runs it natively. Such a build runs only on GPUs it has native code (SASS) for: the
    older driver cannot JIT-compile PTX made by the newer toolkit. Where neither the driver's CUDA version nor
    the toolkit table tells, it counts as compatibility: the side that asks for native code.

    >>> runs_by_minor_compat("580.82.07", "13.2", driver_cuda="13.0"), runs_by_minor_compat("580.82.07", "13.0")
    (True, False)
    """
    return (driver_supports(driver_version, cuda, platform)
            and not driver_runs_natively(driver_version, cuda, platform, driver_cuda))


# --- architectures ------------------------------------------------------------------------------

def parse_arch(entry: str) -> tuple[str, int, int, str]:
    """ "sm_86" -> ("sm", 8, 6, ""); "compute_120" -> ("compute", 12, 0, ""); "sm_90a" -> ("sm", 9, 0, "a").

    The last digit is the minor version, the rest the major, as nvcc spells them.
    """
    match = _ARCH.match(entry)
    if not match:
        raise GpuflyError(f"cannot read architecture {entry!r}", hint="expected sm_XY or compute_XY, e.g. sm_86")
    kind, digits, suffix = match.groups()
    return kind, int(digits[:-1]), int(digits[-1]), suffix


def matching_arch(compute_capability: str, arch_list: Iterable[str]) -> tuple[ArchKind, str] | None:
    """The entry of ``arch_list`` a GPU would run, SASS before PTX, with its kind; None if none.

    SASS ``sm_Mk`` runs on M.m when k <= m (same major); PTX ``compute_XY`` is JIT-compiled by the
    driver for any GPU at or above X.Y. Arch-specific entries (``sm_90a``) count only for that exact GPU.
    """
    gpu = parse_compute_capability(compute_capability)
    sass: list[tuple[tuple[int, int], str]] = []
    ptx: list[tuple[tuple[int, int], str]] = []
    for entry in arch_list:
        kind, major, minor, suffix = parse_arch(entry)
        if suffix and (major, minor) != gpu:
            continue
        if kind == "sm" and major == gpu[0] and minor <= gpu[1]:
            sass.append(((major, minor), entry))
        elif kind == "compute" and (major, minor) <= gpu:
            ptx.append(((major, minor), entry))
    if sass:
        return "sass", max(sass)[1]
    if ptx:
        return "ptx", max(ptx)[1]
    return None


def arch_covers(compute_capability: str, arch_list: Iterable[str]) -> ArchKind | None:
    """How a GPU runs a build: "sass" (compiled for it), "ptx" (JIT from PTX, slow first run) or None (it cannot).

    >>> arch_covers("8.6", ["sm_80"]), arch_covers("9.0", ["sm_86"]), arch_covers("12.1", ["compute_120"])
    ('sass', None, 'ptx')
    """
    found = matching_arch(compute_capability, arch_list)
    return found[0] if found else None


# --- PyTorch ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TorchVariant:
    """One CUDA build of one PyTorch release on download.pytorch.org, e.g. torch 2.14 cu126."""

    release: str
    name: str
    cuda: str
    status: str
    """"stable", "experimental", "legacy" or "built" (in the build scripts, not the release matrix)."""
    source: str
    index_url: str
    arch_list: tuple[str, ...] | None = None
    """Architectures of the Linux x86_64 wheel; None where gpufly could not source the list."""
    arch_list_aarch64: tuple[str, ...] | None = None
    ptx_linux_only: bool = False
    pypi_default_linux: bool = False
    note: str | None = None

    def arches(self, platform: str = "linux", machine: str | None = None) -> tuple[str, ...] | None:
        """The architectures of the wheel for this platform and CPU, None when unknown.

        Windows wheels are taken to match the Linux ones, less the PTX PyTorch embeds on Linux only.
        """
        if _is_arm(machine):
            return self.arch_list_aarch64
        if self.arch_list is None or platform != "windows" or not self.ptx_linux_only:
            return self.arch_list
        return tuple(a for a in self.arch_list if not a.startswith("compute_"))


@dataclass(frozen=True)
class TorchRelease:
    release: str
    python_min: str
    python_max: str
    variants: tuple[TorchVariant, ...]
    """Oldest CUDA first."""
    source: str

    def supports_python(self, python_version: str) -> bool:
        return python_key(self.python_min) <= python_key(python_version) <= python_key(self.python_max)

    def variant(self, name: str) -> TorchVariant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise unknown_choice(f"CUDA build of torch {self.release}", name, [v.name for v in self.variants])


def _is_arm(machine: str | None) -> bool:
    return (machine or "").lower() in ("aarch64", "arm64")


def _torch_release(row: Mapping[str, Any], index_url: str) -> TorchRelease:
    default = (row.get("pypi_default_linux") or {}).get("variant")
    variants = tuple(
        TorchVariant(
            release=row["release"], name=v["variant"], cuda=v["cuda"], status=v["status"], source=v["source"],
            index_url=index_url + v["variant"],
            arch_list=tuple(v["arch_list"]) if "arch_list" in v else None,
            arch_list_aarch64=tuple(v["arch_list_aarch64"]) if "arch_list_aarch64" in v else None,
            ptx_linux_only=v.get("ptx_linux_only", False), pypi_default_linux=v["variant"] == default,
            note=v.get("note"),
        )
        for v in sorted(row["variants"], key=lambda v: cuda_key(v["cuda"]))
    )
    return TorchRelease(row["release"], row["python"]["min"], row["python"]["max"], variants, row["source"])


@cache
def torch_releases() -> tuple[TorchRelease, ...]:
    """Every PyTorch release in the table, newest first."""
    table = _read("torch_wheels")
    releases = [_torch_release(row, table["index_url"]) for row in table["releases"]]
    return tuple(sorted(releases, key=lambda r: parse_version(r.release), reverse=True))


def torch_index_url(variant: str) -> str:
    """ "cu126" -> https://download.pytorch.org/whl/cu126; also "cpu"."""
    return _read("torch_wheels")["index_url"] + variant


def torch_release(release: str | None = None) -> TorchRelease:
    """One release ("2.14"; "2.14.1" means 2.14), by default the newest."""
    releases = torch_releases()
    if release is None:
        return releases[0]
    asked = parse_version(release, "torch release")
    wanted = f"{asked.major}.{asked.minor}"
    for candidate in releases:
        if candidate.release == wanted:
            return candidate
    raise unknown_choice("torch release", release, [r.release for r in releases],
                         hint=f"gpufly knows torch {releases[-1].release} to {releases[0].release}")


def torch_variants(release: str | None = None) -> tuple[TorchVariant, ...]:
    """The CUDA builds of a release (default: the newest), oldest CUDA first."""
    return torch_release(release).variants


# --- TensorFlow ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class TensorflowRelease:
    release: str
    cuda: str
    cudnn: str
    source: str
    python_min: str | None = None
    python_max: str | None = None
    and_cuda: bool = False
    """Whether ``tensorflow[and-cuda]`` exists: pip then brings CUDA and cuDNN itself."""

    def supports_python(self, python_version: str) -> bool | None:
        """None where the table does not know the release's Python range."""
        if self.python_min is None or self.python_max is None:
            return None
        return python_key(self.python_min) <= python_key(python_version) <= python_key(self.python_max)


@cache
def tensorflow_releases() -> tuple[TensorflowRelease, ...]:
    """TensorFlow releases with their tested CUDA and cuDNN, newest first."""
    table = _read("tensorflow")
    since = parse_version(table["and_cuda"]["since"])
    rows = [
        TensorflowRelease(
            release=row["release"], cuda=row["cuda"], cudnn=row["cudnn"], source=row["source"],
            python_min=row.get("python", {}).get("min"), python_max=row.get("python", {}).get("max"),
            and_cuda=parse_version(row["release"]) >= since,
        )
        for row in table["releases"]
    ]
    return tuple(sorted(rows, key=lambda r: parse_version(r.release), reverse=True))


def tensorflow_facts() -> dict[str, Any]:
    """The install facts beside the release table: the and-cuda extra, native Windows, removed packages."""
    return copy.deepcopy(dict(_read("tensorflow")))


# --- JAX ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class JaxExtra:
    extra: str
    cuda: str
    min_driver_linux: str
    min_compute_capability: str
    command: str
    source: str


@cache
def jax_extras() -> tuple[JaxExtra, ...]:
    """JAX's CUDA extras, newest CUDA first."""
    rows = [JaxExtra(r["extra"], r["cuda"], r["min_driver_linux"], r["min_compute_capability"], r["command"],
                     r["source"]) for r in _read("jax")["extras"]]
    return tuple(sorted(rows, key=lambda r: cuda_key(r.cuda), reverse=True))


def jax_facts() -> dict[str, Any]:
    """The CPU command, the GPU platforms and the warnings beside JAX's extras."""
    return copy.deepcopy(dict(_read("jax")))
