"""Find the GPU extension packages installed beside torch and import each one in a child process.

Two halves in one file:

- the child (``import_modules`` and ``main``, standard library only): ``probe_extensions`` passes this file's
  source to ``python -c`` with the modules to import, so the interpreter need not have gpufly installed,
  as ``framework_probe.py`` does. It imports them, catches what they raise and what they print or warn while
  importing (xformers and bitsandbytes warn instead of failing), and prints one JSON line after ``MARKER``.
- the parent (``installed_extensions`` and ``probe_extensions``): reads the installed packages' metadata
  (``importlib.metadata``: nothing is imported in gpufly's own process), then starts one child per
  installed package, a few at a time, each with a timeout. gpufly's own modules are imported inside
  these functions only, so that the child, which runs this whole file, needs none of them.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import io
import json
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.metadata import Distribution

    from gpufly.doctor.extensions import ExtensionFact, ExtensionTable, Package

MARKER = "gpufly-extension-probe: "
"""Starts the result line, so whatever a package prints on import cannot be taken for it."""
OUTPUT_LIMIT = 4000
"""The tail of what an import printed that is kept: the warnings that matter come last."""
EXTENSION_TIMEOUT_S = 60.0
"""vLLM and DeepSpeed import torch and much more; a busy machine needs tens of seconds."""
PARALLEL_IMPORTS = 4
"""Children at once: each imports torch, which is CPU- and disk-heavy."""


# --- the child (standard library only) ------------------------------------------------------------

def _present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def import_modules(modules: Sequence[str]) -> dict[str, Any]:
    """Import each module in order, here and now, and describe what happened.

    A module marked optional ("?amp_C") is imported when present and listed in ``absent_kernels`` when not.
    A failure is described, not raised. What the imports print or warn is captured as ``import_output``.
    """
    captured = io.StringIO()
    result: dict[str, Any] = {"imported": False, "import_error": None, "absent_kernels": []}
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured), warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            for module in modules:
                name = module.removeprefix("?")
                if name != module and not _present(name):
                    result["absent_kernels"].append(name)
                    continue
                importlib.import_module(name)
            result["imported"] = True
        except (Exception, SystemExit) as exc:
            result["import_error"] = f"{type(exc).__name__}: {exc}"
    torch = sys.modules.get("torch")
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    result["torch_cxx11_abi"] = abi if isinstance(abi, bool) else None
    result["import_output"] = captured.getvalue()[-OUTPUT_LIMIT:] or None
    return result


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: extension_probe MODULE [MODULE...] [?OPTIONAL_MODULE...]", file=sys.stderr)
        return 2
    print(MARKER + json.dumps(import_modules(argv), default=str), flush=True)
    return 0


# --- the parent -------------------------------------------------------------------------------------

Run = Callable[..., subprocess.CompletedProcess[str]]


def _requirement_on(dist: Distribution, name: str) -> str | None:
    """``dist``'s requirement on ``name`` for this machine, markers applied ("torch==2.5.1"); None when it has
    none or asks for no particular version. (packaging is imported here: the child's interpreter may lack it.)"""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    for line in dist.requires or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) != canonicalize_name(name):
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        return f"{requirement.name}{requirement.specifier}" if requirement.specifier else None
    return None


def _xformers_build(dist: Distribution) -> dict[str, Any]:
    """xformers' ``cpp_lib.json``: {"version": {"torch": "2.1.2+cu121", "cuda": 1201}} (CUDA as major*100+minor)."""
    try:
        recorded = json.loads(dist.locate_file("xformers/cpp_lib.json").read_text())["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    cuda = recorded.get("cuda")
    return {"built_torch": recorded.get("torch") if isinstance(recorded.get("torch"), str) else None,
            "built_cuda": f"{cuda // 100}.{cuda % 100}" if isinstance(cuda, int) and cuda > 0 else None}


def _deepspeed_build(dist: Distribution) -> dict[str, Any]:
    """DeepSpeed's ``git_version_info_installed.py``: the torch and CUDA its prebuilt ops were compiled with,
    when any op was prebuilt (JIT-built ops are compiled against the torch that runs them)."""
    try:
        tree = ast.parse(dist.locate_file("deepspeed/git_version_info_installed.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return {}
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, SyntaxError):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    ops, info = values.get("installed_ops"), values.get("torch_info")
    if not isinstance(ops, dict) or not any(ops.values()) or not isinstance(info, dict):
        return {}
    known = {key: str(info[key]) for key in ("version", "cuda_version") if str(info.get(key, "0.0")) != "0.0"}
    return {"built_torch": known.get("version"), "built_cuda": known.get("cuda_version")}


def _bitsandbytes_build(dist: Distribution) -> dict[str, Any]:
    """The CUDA versions of the libraries bitsandbytes ships: libbitsandbytes_cuda121.so -> "12.1"."""
    if dist.files is None:
        return {}
    versions = set()
    for file in dist.files:
        match = re.search(r"libbitsandbytes_cuda(\d{3,})(?:_nocublaslt)?\.(?:so|dll|dylib)$", file.name)
        if match:
            digits = match.group(1)
            versions.add(f"{digits[:-1]}.{digits[-1]}")
    return {"cuda_libraries": sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))}


BUILD_READERS: dict[str, Callable[[Distribution], dict[str, Any]]] = {
    "xformers_cpp_lib": _xformers_build,
    "deepspeed_installed_ops": _deepspeed_build,
    "bitsandbytes_libraries": _bitsandbytes_build,
}
"""What each package records about its build, read from its installed files; wheel tags are read from the
version by the logic (``extensions.build_of``)."""


def _distribution(name: str, path: Sequence[str] | None) -> Distribution | None:
    found = importlib.metadata.distributions(name=name, path=list(path) if path is not None else sys.path)
    return next(iter(found), None)


def installed_extensions(path: Sequence[str] | None = None,
                         table: ExtensionTable | None = None) -> list[ExtensionFact]:
    """The table's packages installed on ``path`` (default ``sys.path``), from their metadata alone.

    A package whose metadata gpufly cannot read (a version that is not PEP 440) is left out rather than
    stopping the doctor."""
    from gpufly.doctor.extensions import extension_table, read_extension_fact
    from gpufly.errors import GpuflyError

    table = table or extension_table()
    torch = _distribution("torch", path)
    found = []
    for package in table.packages:
        dist = _distribution(package.distribution, path)
        if dist is None:
            continue
        reader = BUILD_READERS.get(package.build_record)
        data = {"package": package.id, "distribution": dist.metadata["Name"] or package.distribution,
                "version": dist.version, "requires_torch": _requirement_on(dist, "torch"),
                "torch_requires": _requirement_on(torch, package.distribution) if torch else None,
                **(reader(dist) if reader else {})}
        with contextlib.suppress(GpuflyError):
            found.append(read_extension_fact(data, f"the metadata of {package.distribution}"))
    return found


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _answer(done: subprocess.CompletedProcess[str], module: str) -> dict[str, Any]:
    """The child's JSON line, or an import error saying how the child ended without one."""
    from gpufly.loading import exit_text

    line = next((line for line in reversed((done.stdout or "").splitlines()) if line.startswith(MARKER)), None)
    if line is not None:
        with contextlib.suppress(ValueError):
            answer = json.loads(line[len(MARKER):])
            if isinstance(answer, dict):
                return answer
    detail = _last_line(done.stderr or "")
    what = f"{exit_text(done.returncode)} while importing {module}"
    return {"imported": False, "import_error": f"{what}: {detail[:300]}" if detail else what,
            "import_output": (done.stderr or "")[-OUTPUT_LIMIT:] or None}


@cache
def _child_source() -> str:
    return Path(__file__).read_text()


def _of_type(answer: Mapping[str, Any], key: str, kind: type) -> Any:
    """``answer[key]`` when the child gave it the expected type, else None: a strange answer loses a detail only."""
    value = answer.get(key)
    return value if isinstance(value, kind) else None


def _imported(fact: ExtensionFact, package: Package, run: Run, python: str, timeout: float,
              environ: Mapping[str, str] | None) -> ExtensionFact:
    """``fact`` with what a child ``python`` saw importing the package."""
    try:
        done = run([python, "-c", _child_source(), *package.child_arguments()], capture_output=True, text=True,
                   timeout=timeout, check=False, env=None if environ is None else dict(environ))
    except subprocess.TimeoutExpired:
        return dataclasses.replace(fact, imported=False, timed_out=True,
                                   import_error=f"importing {package.imports[0]} did not finish within {timeout:g} s")
    except OSError as exc:
        return dataclasses.replace(fact, imported=False, import_error=f"could not start {python} ({exc})")
    answer = _answer(done, package.imports[0])
    absent = _of_type(answer, "absent_kernels", list) or []
    return dataclasses.replace(fact, imported=answer.get("imported") is True,
                               import_error=_of_type(answer, "import_error", str),
                               import_output=_of_type(answer, "import_output", str),
                               torch_cxx11_abi=_of_type(answer, "torch_cxx11_abi", bool),
                               absent_kernels=tuple(name for name in absent if isinstance(name, str)))


def probe_extensions(run: Run = subprocess.run, python: str = sys.executable, timeout: float = EXTENSION_TIMEOUT_S,
                     path: Sequence[str] | None = None, environ: Mapping[str, str] | None = None,
                     import_packages: bool = True) -> tuple[ExtensionFact, ...]:
    """Each installed extension package: its metadata, and (``import_packages``) a child ``python`` importing it.

    ``path`` is where to look for installed packages (default ``sys.path``); ``environ`` the child's
    environment (default this one). ``import_packages=False`` reads metadata only: fast, blind to imports.
    """
    from concurrent.futures import ThreadPoolExecutor

    from gpufly.doctor.extensions import extension_table

    table = extension_table()
    found = installed_extensions(path, table)
    if not import_packages or not found:
        return tuple(found)
    with ThreadPoolExecutor(max_workers=min(PARALLEL_IMPORTS, len(found))) as pool:
        return tuple(pool.map(lambda fact: _imported(fact, table.package(fact.package), run, python, timeout,
                                                     environ), found))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
