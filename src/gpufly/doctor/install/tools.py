"""A chosen build written for the installer the user runs: pip, uv, pixi or conda, from a mirror where one is set.

The planners (``torch.py``, ``tensorflow.py``, ``jax.py``) decide *what* to install and write it as a pip
command; this module decides *how*: which index each package comes from (a PyTorch wheel mirror that serves
the build, PyPI's own torch wheel through a PyPI mirror when it is the very build chosen, else PyTorch's
index) and the syntax of each tool. The facts behind each tool's syntax, with their sources, are in
``doctor/data/installers.json``:

- pip: ``pip install REQ --index-url URL`` (https://pip.pypa.io/en/stable/cli/pip_install/).
- uv: ``uv pip install REQ --torch-backend=cu126`` where the uv release knows that backend, else
  ``--index-url``; a uv project pins torch to an explicit ``[[tool.uv.index]]`` through ``[tool.uv.sources]``
  (https://docs.astral.sh/uv/guides/integration/pytorch/). uv does not read pip's configuration, so a mirror set
  there is named in the command.
- pixi: ``[pypi-dependencies] torch = { version = "...", index = "..." }`` and ``[pypi-options] index-url``
  (https://pixi.sh/latest/python/pytorch/).
- conda: an environment.yml whose ``pip:`` section carries ``--index-url`` as a requirements file would
  (https://docs.conda.io/projects/conda/en/latest/user-guide/tasks/manage-environments.html).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from gpufly.doctor.compat import torch_index_url, torch_release
from gpufly.doctor.install.mirrors import Sources, mirror_table, serving
from gpufly.doctor.install.plan import Alternative, InstallPlan
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.i18n import gettext as _

TOOLS = ("pip", "uv", "pixi", "conda")
INSTALLERS_FILE = Path(__file__).parent.parent / "data" / "installers.json"
_PIP_COMMAND = re.compile(r"pip install (?:(?!, )[^;\uff1b\uff0c])+")
"""A pip command inside a sentence: it ends where the sentence goes on, at a semicolon or a comma and space ("...
cu126, run with CUDA_VISIBLE_DEVICES=1"), or at a Chinese semicolon or comma (a translated sentence's punctuation).
None of these is ever part of a command; a comma inside a requirement (torch>=2,<3) has no space after it."""


@cache
def installer_facts() -> dict[str, Any]:
    try:
        return json.loads(INSTALLERS_FILE.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GpuflyError(f"cannot read gpufly's table {INSTALLERS_FILE}: {exc}") from exc


@dataclass(frozen=True)
class Target:
    """The machine the command is for: what decides whether PyPI's own torch wheel is the chosen build."""

    platform: str = "linux"
    machine: str | None = None
    python_version: str | None = None


@dataclass(frozen=True)
class PipInstall:
    """A ``pip install`` the planners wrote, as parts: requirements, the index, whether it upgrades."""

    requirements: tuple[str, ...]
    index_url: str | None = None
    upgrade: bool = False

    @classmethod
    def parse(cls, command: str) -> PipInstall | None:
        """The parts of ``pip install [-U] REQ... [--index-url URL]``; None for anything else (a conda recipe)."""
        try:
            words = shlex.split(command)
        except ValueError:  # unbalanced quotes: not a command the planners wrote
            return None
        if words[:2] != ["pip", "install"]:
            return None
        requirements: list[str] = []
        index_url, upgrade = None, False
        rest = iter(words[2:])
        for word in rest:
            if word in ("-U", "--upgrade"):
                upgrade = True
            elif word in ("--index-url", "-i"):
                index_url = next(rest, None)
            elif word.startswith("-"):
                return None
            else:
                requirements.append(word)
        return cls(tuple(requirements), index_url, upgrade)


@dataclass(frozen=True)
class Placed:
    """A pip install with the index its packages will really come from."""

    install: PipInstall
    build: str | None = None
    """The PyTorch build ("cu126") when the command installs from a PyTorch index."""
    official: bool = False
    """Whether that index is download.pytorch.org (uv can then name it with --torch-backend)."""
    pypi: str | None = None
    """The PyPI mirror to name in the command, when the tool would not find it by itself."""


def _quoted(word: str) -> str:
    return shlex.quote(word) if re.search(r"[\[\]<>|&;() '\"]", word) else word


def _torch_build(index_url: str | None) -> str | None:
    base = torch_index_url("")
    return index_url[len(base):] if index_url and index_url.startswith(base) else None


def _torch_release(requirement: str, default: str | None) -> str | None:
    """ "torch==2.7.*" -> "2.7"; an unpinned "torch" is the plan's release."""
    try:
        specifiers = list(Requirement(requirement).specifier)
    except InvalidRequirement:
        return default
    for spec in specifiers:
        if spec.operator == "==":
            parts = spec.version.rstrip(".*").split(".")
            return ".".join(parts[:2])
    return default


def _on_pypi(release: str | None, build: str, target: Target) -> bool:
    """Whether PyPI's own torch wheel for this machine is this very build (torch 2.14 on Linux x86_64: cu132)."""
    if release is None or target.platform not in ("linux", "wsl") or (target.machine or "").lower() in (
            "aarch64", "arm64"):
        return False
    try:
        return torch_release(release).variant(build).pypi_default_linux
    except GpuflyError:
        return False


def _pinned(install: PipInstall, release: str | None) -> PipInstall:
    """An unpinned ``torch`` pinned to the release: from PyPI, "torch" would be whatever release is newest there."""
    if release is None:
        return install
    return replace(install, requirements=tuple(f"torch=={release}.*" if r == "torch" else r
                                                for r in install.requirements))


def _place_torch(install: PipInstall, sources: Sources, target: Target, release: str | None,
                 notes: list[str]) -> Placed:
    """A PyTorch wheel mirror that serves the build, else PyPI's own wheel when it is the build, else PyTorch's
    index; a mirror that does not serve the build is said to."""
    build = _torch_build(install.index_url)
    if build is None:
        return Placed(install, pypi=sources.pypi)
    release = _torch_release(install.requirements[0], release) if install.requirements else release
    mirror = sources.pytorch
    if mirror is not None and mirror.serves(build):
        notes.append(_("torch {build} from the {mirror} PyTorch wheel mirror ({origin}): {note}").format(
            build=build, mirror=sources.pytorch_name, origin=sources.pytorch_origin, note=_(mirror.note)))
        return Placed(replace(install, index_url=mirror.url(build)), build, pypi=sources.pypi)
    if sources.pypi is not None and _on_pypi(release, build, target):
        notes.append(_("PyPI's torch {release} wheel for Linux x86_64 is its {build} build: it comes from {index}, set "
                       "by {origin}").format(release=release, build=build, index=sources.pypi_label,
                                             origin=sources.pypi_origin))
        return Placed(replace(_pinned(install, release), index_url=None), pypi=sources.pypi)
    if mirror is not None or sources.pypi is not None:
        notes.append(_not_mirrored(build, sources))
    return Placed(install, build, official=True, pypi=sources.pypi)


def _not_mirrored(build: str, sources: Sources) -> str:
    """Why torch still comes from download.pytorch.org, and which known mirrors serve the build."""
    checked = mirror_table().checked
    if sources.pytorch is not None:
        why = _("the {mirror} mirror is not known to serve torch {build} (as of {date}: {note})").format(
            mirror=sources.pytorch_name, build=build, date=checked, note=_(sources.pytorch.note))
    else:
        why = _("{index} mirrors PyPI, not PyTorch's index that serves torch {build}").format(
            index=sources.pypi_label, build=build)
    others = [m.name for m in serving(build) if m.name != sources.pytorch_name]
    offer = _("; {options} serves it").format(
        options=_(" or ").join(f"--mirror {name}" for name in others)) if others else ""
    return _("{why}: torch comes from download.pytorch.org{offer}").format(why=why, offer=offer)


def _place(install: PipInstall, framework: str, sources: Sources, target: Target, release: str | None,
           notes: list[str]) -> Placed:
    if framework == "torch":
        return _place_torch(install, sources, target, release, notes)
    return Placed(install, pypi=sources.pypi)


# --- each tool's syntax ---------------------------------------------------------------------------

def _uv_backend(build: str) -> dict[str, Any] | None:
    rows = installer_facts()["uv_torch_backends"]["rows"]
    return next((row for row in rows if row["backend"] == build), None)


def _pip_line(placed: Placed, sources: Sources) -> str:
    words = ["pip install", *(["-U"] if placed.install.upgrade else []), *map(_quoted, placed.install.requirements)]
    index = placed.install.index_url
    if index is None and placed.pypi is not None and sources.pypi_named:
        index = placed.pypi
    return " ".join(words + ([f"--index-url {index}"] if index else []))


def _uv_line(placed: Placed, notes: list[str] | None = None) -> str:
    """``uv pip install``: the PyTorch index as --torch-backend where uv knows the build, any PyPI mirror named
    (uv does not read pip's configuration)."""
    words = ["uv pip install", *(["-U"] if placed.install.upgrade else []),
             *map(_quoted, placed.install.requirements)]
    backend = _uv_backend(placed.build) if placed.official and placed.build else None
    if backend is not None:
        words.append(f"--torch-backend={placed.build}")
        if notes is not None:
            since = (_("uv {version} or newer").format(version=backend["since"]) if backend["since"]
                     else _("a uv released after {date}").format(date=backend["after"]))
            notes.append(_("{option} needs {since} ({source}); with an older uv: {command}").format(
                option=f"--torch-backend={placed.build}", since=since, source=backend["source"].split(" ")[0],
                command=_uv_line(replace(placed, official=False))))
        if placed.pypi:
            words.append(f"--index-url {placed.pypi}")
    elif placed.install.index_url:
        words.append(f"--index-url {placed.install.index_url}")
    elif placed.pypi:
        words.append(f"--index-url {placed.pypi}")
    return " ".join(words)


def _toml_string(text: str) -> str:
    return json.dumps(text)


def _parts(requirement: str) -> tuple[str, tuple[str, ...], str]:
    parsed = Requirement(requirement)
    return parsed.name, tuple(sorted(parsed.extras)), str(parsed.specifier) or "*"


def _pixi_entry(placed: Placed) -> str:
    lines = []
    for requirement in placed.install.requirements:
        name, extras, version = _parts(requirement)
        fields = [f"version = {_toml_string(version)}"]
        if extras:
            fields.append("extras = [" + ", ".join(map(_toml_string, extras)) + "]")
        if placed.install.index_url:
            fields.append(f"index = {_toml_string(placed.install.index_url)}")
        lines.append(f"{name} = {{ {', '.join(fields)} }}")
    return "\n".join(lines)


def _pixi_snippet(placed: Placed, target: Target) -> str:
    python = _python_minor(target)
    head = f"[dependencies]\npython = {_toml_string(python + '.*')}\n\n" if python else ""
    options = f"\n\n[pypi-options]\nindex-url = {_toml_string(placed.pypi)}" if placed.pypi else ""
    return f"{head}[pypi-dependencies]\n{_pixi_entry(placed)}{options}\n"


def _conda_snippet(placed: Placed, sources: Sources, target: Target, framework: str) -> str:
    python = _python_minor(target)
    index = placed.install.index_url or (placed.pypi if sources.pypi_named else None)
    pip_lines = ([f"--index-url {index}"] if index else []) + list(placed.install.requirements)
    body = "\n".join(f"      - {line}" for line in pip_lines)
    return (f"name: gpufly-{framework}\nchannels:\n  - conda-forge\ndependencies:\n"
            f"  - python{'=' + python if python else ''}\n  - pip\n  - pip:\n{body}\n")


def _uv_project_snippet(placed: Placed) -> str:
    dependencies = ", ".join(_toml_string(r) for r in placed.install.requirements)
    text = f"[project]\ndependencies = [{dependencies}]\n"
    index = placed.install.index_url
    if index:
        name = f"pytorch-{placed.build}" if placed.build else "pytorch"
        packages = [Requirement(r).name for r in placed.install.requirements]
        text += "\n[tool.uv.sources]\n" + "".join(f'{p} = [{{ index = "{name}" }}]\n' for p in packages)
        text += f'\n[[tool.uv.index]]\nname = "{name}"\nurl = {_toml_string(index)}\nexplicit = true\n'
    if placed.pypi:
        text += f'\n[[tool.uv.index]]\nname = "pypi-mirror"\nurl = {_toml_string(placed.pypi)}\ndefault = true\n'
    return text


def _python_minor(target: Target) -> str | None:
    if not target.python_version:
        return None
    return ".".join(target.python_version.split(".")[:2])


# --- the plan in the user's tool ------------------------------------------------------------------

@dataclass(frozen=True)
class _Writer:
    """Writes each of a plan's commands for one tool and one set of sources."""

    framework: str
    tool: str
    sources: Sources
    target: Target
    release: str | None

    def line(self, command: str, notes: list[str] | None = None) -> str:
        """One command in the tool's own words; a command that is not a plain pip install is left as it is."""
        install = PipInstall.parse(command)
        if install is None:
            return command
        placed = _place(install, self.framework, self.sources, self.target, self.release,
                        notes if notes is not None else [])
        if self.tool == "uv":
            return _uv_line(placed, notes)
        if self.tool == "pixi":
            return _("in pixi.toml [pypi-dependencies]: {entry}").format(entry=_pixi_entry(placed))
        names_pypi = placed.pypi is not None and self.sources.pypi_named and placed.install.index_url is None
        line = command if placed.install == install and not names_pypi else _pip_line(placed, self.sources)
        return line if self.tool == "pip" else _("in the conda environment: {command}").format(command=line)

    def snippet(self, command: str) -> tuple[str, str] | None:
        """The file to edit and what to put in it, for the tools that install from a manifest."""
        install = PipInstall.parse(command)
        if install is None or self.tool == "pip":
            return None
        placed = _place(install, self.framework, self.sources, self.target, self.release, [])
        if self.tool == "uv":
            return "pyproject.toml", _uv_project_snippet(placed)
        if self.tool == "pixi":
            return "pixi.toml", _pixi_snippet(placed, self.target)
        return "environment.yml", _conda_snippet(placed, self.sources, self.target, self.framework)


_MANIFEST_STEP = {"pixi": "pixi install", "conda": "conda env create -f environment.yml"}
"""The command that installs from the tool's manifest once the snippet is in it."""


def for_tool(plan: InstallPlan, tool: str, sources: Sources | None = None, target: Target | None = None
             ) -> InstallPlan:
    """The plan with every command written for ``tool`` and taken from ``sources``, and what that changes said as
    notes (a mirror that lacks the build, the uv release a backend needs, PyTorch's wheel variants).

    pip and uv get a command line (uv also a pyproject.toml snippet for a uv project); pixi and conda get the
    manifest snippet and the command that installs from it.
    """
    if tool not in TOOLS:
        raise unknown_choice("tool", tool, TOOLS, hint=f"one of: {', '.join(TOOLS)}")
    sources = sources or Sources()
    writer = _Writer(plan.framework, tool, sources, target or Target(), plan.release)
    notes: list[str] = []
    command = snippet = snippet_file = None
    if plan.command is not None:
        line = writer.line(plan.command, notes)
        command = _MANIFEST_STEP.get(tool, line)
        found = writer.snippet(plan.command)
        if found is not None:
            snippet_file, snippet = found
    named_here = sources.pypi is not None and any(sources.pypi in text for text in (command or "", snippet or ""))
    if tool in ("uv", "pixi") and named_here and not sources.pypi_named:
        notes.append(_("{tool} does not read pip's configuration: the index set by {origin} ({index}) is named for it")
                     .format(tool=tool, origin=sources.pypi_origin, index=sources.pypi))
    alternatives = tuple(Alternative(writer.line(a.command), a.why) for a in plan.alternatives)
    advice = _rewritten(plan.advice, writer.line)
    return replace(plan, command=command, advice=advice, alternatives=alternatives, tool=tool, snippet=snippet,
                   snippet_file=snippet_file,
                   warnings=tuple(dict.fromkeys((*plan.warnings, *notes, *_variant_notes(plan, target)))))


def _rewritten(text: str | None, line: Callable[[str], str]) -> str | None:
    """The pip commands inside an advice sentence, each written for the tool."""
    if text is None:
        return None
    return _PIP_COMMAND.sub(lambda match: line(match.group(0).rstrip()), text)


def _variant_notes(plan: InstallPlan, target: Target | None) -> tuple[str, ...]:
    """PyTorch's wheel variants, for the releases published that way: named, with what they do not check."""
    if plan.framework != "torch" or plan.release is None or plan.variant is None:
        return ()
    facts = installer_facts()["torch_wheel_variants"]
    row = next((r for r in facts["releases"] if r["release"] == plan.release), None)
    if row is None or plan.variant not in row["builds"]:
        return ()
    windows = target is not None and target.platform == "windows"
    install = facts["install_uv_windows"] if windows else facts["install_uv"]
    return (_("torch {release} is also published as wheel variants (experimental, {source}): a variant-enabled uv "
              "picks the build by itself: {install}; then {command}; gpufly checked its own choice against the GPUs, "
              "the variant installer's choice is not checked").format(
        release=plan.release, source=row["source"], install=install,
        command=f"uv pip install torch=={plan.release}.*"),)
