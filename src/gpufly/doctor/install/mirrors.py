"""Package mirrors: the well-known ones in China (``doctor/data/mirrors.json``), and the index pip already uses.

A user behind a slow link to pypi.org and download.pytorch.org either names a mirror (``--mirror tuna``) or has
one set for pip already (``PIP_INDEX_URL``, a ``pip.conf``). Both are honoured: ``choose_sources`` says where
the printed command takes PyPI packages and PyTorch wheels from. Reading pip's configuration is injectable (the
environment and the home folder are arguments), so tests give fake files.
"""

from __future__ import annotations

import configparser
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from gpufly.errors import GpuflyError, unknown_choice
from gpufly.records import from_dict

MIRRORS_FILE = Path(__file__).parent.parent / "data" / "mirrors.json"


@dataclass(frozen=True)
class PytorchMirror:
    """A mirror of download.pytorch.org/whl: one index per build under ``base``."""

    base: str
    carries: tuple[str, ...] | None
    """The builds it is known to serve ("cu126"); None: every build PyTorch publishes."""
    note: str
    source: str

    def url(self, build: str) -> str:
        return self.base + build

    def serves(self, build: str) -> bool:
        return self.carries is None or build in self.carries


@dataclass(frozen=True)
class Mirror:
    """A mirror site: its PyPI mirror, its PyTorch wheel mirror, or both."""

    name: str
    title: str
    source: str
    aliases: tuple[str, ...] = ()
    pypi: str | None = None
    pytorch: PytorchMirror | None = None


@dataclass(frozen=True)
class MirrorTable:
    description: str
    checked: str
    mirrors: tuple[Mirror, ...]


@cache
def mirror_table() -> MirrorTable:
    try:
        data = json.loads(MIRRORS_FILE.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GpuflyError(f"cannot read gpufly's table {MIRRORS_FILE}: {exc}") from exc
    return from_dict(MirrorTable, data, MIRRORS_FILE.name)


def mirrors() -> tuple[Mirror, ...]:
    return mirror_table().mirrors


def mirror_names() -> tuple[str, ...]:
    return tuple(m.name for m in mirrors())


def find_mirror(name: str) -> Mirror:
    """The mirror called ``name`` (or one of its aliases, any case); an unknown name lists the known ones."""
    wanted = name.strip().lower()
    for mirror in mirrors():
        if wanted == mirror.name or wanted in mirror.aliases:
            return mirror
    names = mirror_names()
    raise unknown_choice("mirror", name, names,
                         hint=f"gpufly knows these mirrors: {', '.join(names)}; or leave --mirror out and set the "
                              "index in pip's configuration (PIP_INDEX_URL), which gpufly reads")


def _normalized(url: str) -> str:
    return url.strip().rstrip("/").lower().replace("http://", "https://", 1)


def mirror_of_url(url: str) -> tuple[Mirror, str] | None:
    """The known mirror an index URL belongs to, and which side of it ("pypi" or "pytorch")."""
    address = _normalized(url)
    for mirror in mirrors():
        if mirror.pypi is not None and address == _normalized(mirror.pypi):
            return mirror, "pypi"
        if mirror.pytorch is not None and address.startswith(_normalized(mirror.pytorch.base)):
            return mirror, "pytorch"
    return None


def serving(build: str) -> tuple[Mirror, ...]:
    """The mirrors known to serve a PyTorch build."""
    return tuple(m for m in mirrors() if m.pytorch is not None and m.pytorch.serves(build))


# --- pip's own configuration ----------------------------------------------------------------------

@dataclass(frozen=True)
class PipIndex:
    """The indexes pip already uses on this machine, and where each was set."""

    index_url: str | None = None
    index_origin: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    extra_origin: str | None = None

    @property
    def urls(self) -> tuple[str, ...]:
        return ((self.index_url,) if self.index_url else ()) + self.extra_index_urls


def pip_config_files(environ: Mapping[str, str], home: Path, root: Path = Path("/")) -> tuple[Path, ...]:
    """pip's configuration files in the order pip loads them, each overriding the ones before.

    pip's order (https://pip.pypa.io/en/stable/topics/configuration/#loading-order): PIP_CONFIG_FILE, then the
    global files (each ``$XDG_CONFIG_DIRS/pip/pip.conf``, ``/etc/pip.conf``), then the user's (``~/.pip/pip.conf``,
    ``%APPDATA%\\pip\\pip.ini``, ``~/Library/Application Support/pip/pip.conf``, ``$XDG_CONFIG_HOME/pip/pip.conf``
    defaulting to ``~/.config/pip/pip.conf``), then the environment's (``$VIRTUAL_ENV/pip.conf``). ``root`` is
    where the system's own files are looked for (a test's folder instead of ``/``).
    """
    files: list[Path] = []
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    for folder in reversed((environ.get("XDG_CONFIG_DIRS") or str(root / "etc" / "xdg")).split(os.pathsep)):
        if folder:
            files.append(Path(folder) / "pip" / "pip.conf")
    files.append(root / "etc" / "pip.conf")
    files.append(home / ".pip" / "pip.conf")
    if environ.get("APPDATA"):
        files.append(Path(environ["APPDATA"]) / "pip" / "pip.ini")
    files.append(home / "Library" / "Application Support" / "pip" / "pip.conf")
    files.append(Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf")
    if environ.get("VIRTUAL_ENV"):
        files.append(Path(environ["VIRTUAL_ENV"]) / "pip.conf")
        files.append(Path(environ["VIRTUAL_ENV"]) / "pip.ini")
    return tuple(files)


def _file_settings(path: Path) -> dict[str, str]:
    """index-url and extra-index-url from one file: ``[install]`` over ``[global]``, ``_`` read as ``-`` as pip
    does. A file pip could not parse is an error here too: pip would stop on it."""
    parser = configparser.RawConfigParser()
    try:
        parser.read_string(path.read_text(encoding="utf-8"), source=str(path))
    except (OSError, UnicodeDecodeError):
        return {}
    except configparser.Error as exc:
        raise GpuflyError(f"cannot read pip's configuration {path}: {str(exc).splitlines()[0]}",
                          hint="pip stops on this file too: fix it, or set PIP_CONFIG_FILE=/dev/null") from exc
    found: dict[str, str] = {}
    for section in ("global", "install"):
        if parser.has_section(section):
            for key, value in parser.items(section):
                name = key.replace("_", "-")
                if name in ("index-url", "extra-index-url") and value.strip():
                    found[name] = value.strip()
    return found


def read_pip_index(environ: Mapping[str, str], home: Path, root: Path = Path("/")) -> PipIndex:
    """The index and extra indexes pip uses here: ``PIP_INDEX_URL``/``PIP_EXTRA_INDEX_URL`` over the files."""
    settings: dict[str, tuple[str, str]] = {}
    if environ.get("PIP_CONFIG_FILE") != os.devnull:
        for path in pip_config_files(environ, home, root):
            if path.is_file():
                for name, value in _file_settings(path).items():
                    settings[name] = (value, str(path))
    for name, variable in (("index-url", "PIP_INDEX_URL"), ("extra-index-url", "PIP_EXTRA_INDEX_URL")):
        if environ.get(variable, "").strip():
            settings[name] = (environ[variable].strip(), variable)
    index = settings.get("index-url")
    extra = settings.get("extra-index-url")
    return PipIndex(index_url=index[0] if index else None, index_origin=index[1] if index else None,
                    extra_index_urls=tuple(extra[0].split()) if extra else (),
                    extra_origin=extra[1] if extra else None)


# --- where a command takes its packages from ------------------------------------------------------

@dataclass(frozen=True)
class Sources:
    """Where the printed command takes PyPI packages and PyTorch wheels from."""

    pypi: str | None = None
    """The PyPI index in effect (a mirror); None: pypi.org."""
    pypi_origin: str | None = None
    """Where it was set: "--mirror tuna", "PIP_INDEX_URL", a pip.conf path."""
    pypi_named: bool = False
    """Whether a pip command must name it (--mirror); pip finds one set in its own configuration by itself."""
    pytorch: PytorchMirror | None = None
    pytorch_name: str | None = None
    """The mirror's name ("sjtu"), for the notes."""
    pytorch_origin: str | None = None

    @property
    def pypi_label(self) -> str:
        known = mirror_of_url(self.pypi) if self.pypi else None
        return f"{known[0].title} ({self.pypi})" if known else str(self.pypi)


def _configured_pytorch(configured: PipIndex) -> tuple[Mirror, str] | None:
    """A PyTorch wheel mirror set as pip's index or an extra index, and where it was set."""
    for url in configured.urls:
        known = mirror_of_url(url)
        if known is not None and known[1] == "pytorch":
            origin = configured.index_origin if url == configured.index_url else configured.extra_origin
            return known[0], str(origin)
    return None


def choose_sources(mirror: str | None, configured: PipIndex | None) -> Sources:
    """The mirror named with --mirror first; what pip is already set to use fills in what it lacks.

    A PyTorch wheel mirror set in pip's configuration (``extra-index-url = .../pytorch-wheels/cu126``) is
    recognised and used for every build it serves; an index pip uses that gpufly does not know (a company's)
    is still honoured as the place PyPI packages come from.
    """
    configured = configured or PipIndex()
    found = _configured_pytorch(configured)
    index = configured.index_url
    known = mirror_of_url(index) if index else None
    pypi = None if known is not None and known[1] == "pytorch" else index
    sources = Sources(pypi=pypi, pypi_origin=configured.index_origin if pypi else None,
                      pytorch=found[0].pytorch if found else None, pytorch_name=found[0].name if found else None,
                      pytorch_origin=found[1] if found else None)
    if mirror is None:
        return sources
    named = find_mirror(mirror)
    if named.pypi is not None:
        sources = replace(sources, pypi=named.pypi, pypi_origin=f"--mirror {named.name}", pypi_named=True)
    if named.pytorch is not None:
        sources = replace(sources, pytorch=named.pytorch, pytorch_name=named.name,
                          pytorch_origin=f"--mirror {named.name}")
    return sources
