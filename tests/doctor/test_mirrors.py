"""Mirrors: the table of well-known mirrors in China, pip's own configuration read from fake files, and where a
command takes its packages from when a mirror is named or already set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufly.doctor.install import (
    PipIndex,
    Sources,
    Target,
    choose_sources,
    choose_torch,
    find_mirror,
    for_tool,
    mirror_names,
    mirrors,
    read_pip_index,
)
from gpufly.doctor.install.mirrors import mirror_table
from gpufly.doctor.install.tools import PipInstall
from gpufly.errors import GpuflyError
from tests.doctor.test_install import DRIVER_570, DRIVER_580, GTX_1080_TI, RTX_4090, RTX_5090

LINUX = Target("linux", "x86_64", "3.12.3")
TUNA = "https://pypi.tuna.tsinghua.edu.cn/simple"
SJTU = "https://mirror.sjtu.edu.cn/pytorch-wheels/"
NJU = "https://mirrors.nju.edu.cn/pytorch/whl/"
OFFICIAL = "https://download.pytorch.org/whl/"


# --- the table ------------------------------------------------------------------------------------

def test_every_mirror_has_a_source_and_https_addresses() -> None:
    for mirror in mirrors():
        assert mirror.source.startswith("http"), mirror.name
        assert mirror.pypi or mirror.pytorch, mirror.name
        if mirror.pypi:
            assert mirror.pypi.startswith("https://"), mirror.name
        if mirror.pytorch:
            assert mirror.pytorch.base.startswith("https://") and mirror.pytorch.base.endswith("/")
            assert "https://" in mirror.pytorch.source and mirror.pytorch.note


def test_the_table_says_when_it_was_checked_and_names_are_unique() -> None:
    assert mirror_table().checked == "2026-12-03"
    names = [n for m in mirrors() for n in (m.name, *m.aliases)]
    assert len(names) == len(set(names))
    assert {"tuna", "aliyun", "ustc", "tencent", "huawei", "sjtu", "nju"} <= set(mirror_names())


def test_a_mirror_is_found_by_name_or_alias_in_any_case() -> None:
    assert find_mirror("TUNA").name == "tuna"
    assert find_mirror("tsinghua").name == "tuna"
    assert find_mirror("sjtug").name == "sjtu"


def test_an_unknown_mirror_is_refused_with_the_names() -> None:
    with pytest.raises(GpuflyError) as raised:
        find_mirror("tsinhua-mirror")
    assert raised.value.message.startswith("unknown mirror 'tsinhua-mirror'")
    assert all(name in raised.value.hint for name in mirror_names())


# --- pip's configuration, from fake files ---------------------------------------------------------

def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _read(environ: dict[str, str], home: Path) -> PipIndex:
    """pip's index as read with the system's files under ``home`` too, never this machine's /etc."""
    return read_pip_index(environ, home, root=home)


def test_the_user_config_file_sets_the_index(tmp_path: Path) -> None:
    conf = _write(tmp_path / ".config" / "pip" / "pip.conf", f"[global]\nindex-url = {TUNA}\n")
    found = _read({}, tmp_path)
    assert (found.index_url, found.index_origin) == (TUNA, str(conf))


def test_the_legacy_file_xdg_home_and_appdata_are_read(tmp_path: Path) -> None:
    legacy = _write(tmp_path / ".pip" / "pip.conf", "[global]\nindex_url = https://legacy.example/simple\n")
    assert _read({}, tmp_path).index_origin == str(legacy)
    xdg = _write(tmp_path / "xdg-home" / "pip" / "pip.conf", f"[global]\nindex-url = {TUNA}\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg-home")}
    assert _read(env, tmp_path).index_origin == str(xdg)
    ini = _write(tmp_path / "AppData" / "pip" / "pip.ini", "[global]\nindex-url = https://ini.example/simple\n")
    found = _read({"APPDATA": str(tmp_path / "AppData")}, tmp_path)
    assert (found.index_url, found.index_origin) == ("https://ini.example/simple", str(ini))


def test_the_virtualenv_file_wins_over_the_user_file_and_the_install_section_over_global(tmp_path: Path) -> None:
    _write(tmp_path / ".config" / "pip" / "pip.conf", f"[global]\nindex-url = {TUNA}\n")
    venv = _write(tmp_path / "venv" / "pip.conf", "[global]\nindex-url = https://global.example/simple\n"
                                                  "[install]\nindex-url = https://install.example/simple\n"
                                                  f"extra-index-url =\n    {SJTU}cu126\n    https://x.example\n")
    found = _read({"VIRTUAL_ENV": str(tmp_path / "venv")}, tmp_path)
    assert (found.index_url, found.index_origin) == ("https://install.example/simple", str(venv))
    assert found.extra_index_urls == (f"{SJTU}cu126", "https://x.example")


def test_the_environment_wins_over_every_file(tmp_path: Path) -> None:
    _write(tmp_path / ".config" / "pip" / "pip.conf", "[global]\nindex-url = https://file.example/simple\n")
    env = {"PIP_INDEX_URL": TUNA, "PIP_EXTRA_INDEX_URL": "https://a.example https://b"}
    found = _read(env, tmp_path)
    assert (found.index_url, found.index_origin) == (TUNA, "PIP_INDEX_URL")
    assert (found.extra_index_urls, found.extra_origin) == (("https://a.example", "https://b"), "PIP_EXTRA_INDEX_URL")


def test_pip_config_file_is_read_first_and_devnull_turns_files_off(tmp_path: Path) -> None:
    named = _write(tmp_path / "named.conf", "[global]\nindex-url = https://named.example/simple\n")
    _write(tmp_path / ".config" / "pip" / "pip.conf", f"[global]\nindex-url = {TUNA}\n")
    env = {"PIP_CONFIG_FILE": str(named)}
    assert _read(env, tmp_path).index_url == TUNA  # the user's file overrides PIP_CONFIG_FILE's, as in pip
    assert _read({**env, "PIP_CONFIG_FILE": os.devnull}, tmp_path) == PipIndex()


def test_a_machine_without_pip_configuration_has_no_index(tmp_path: Path) -> None:
    assert _read({}, tmp_path) == PipIndex()


def test_a_broken_pip_conf_is_one_error_naming_the_file(tmp_path: Path) -> None:
    broken = _write(tmp_path / ".config" / "pip" / "pip.conf", "index-url = no section header\n")
    with pytest.raises(GpuflyError) as raised:
        _read({}, tmp_path)
    assert str(broken) in raised.value.message and "PIP_CONFIG_FILE" in raised.value.hint


# --- where packages come from ---------------------------------------------------------------------

def test_a_named_mirror_is_named_in_pip_commands_a_configured_one_is_not() -> None:
    assert choose_sources("tuna", None) == Sources(pypi=TUNA, pypi_origin="--mirror tuna", pypi_named=True)
    configured = choose_sources(None, PipIndex(index_url=TUNA, index_origin="PIP_INDEX_URL"))
    assert (configured.pypi, configured.pypi_named, configured.pytorch) == (TUNA, False, None)


def test_a_pytorch_mirror_in_pip_config_is_recognised_and_a_pypi_mirror_kept_beside_it() -> None:
    configured = PipIndex(index_url=TUNA, index_origin="/etc/pip.conf", extra_index_urls=(f"{SJTU}cu126",),
                          extra_origin="/etc/pip.conf")
    sources = choose_sources(None, configured)
    assert (sources.pypi, sources.pytorch_name) == (TUNA, "sjtu")
    with_nju = choose_sources("nju", configured)
    assert (with_nju.pypi, with_nju.pypi_named, with_nju.pytorch_name) == (TUNA, False, "nju")


def test_an_unknown_company_index_is_honoured_as_the_pypi_index() -> None:
    sources = choose_sources(None, PipIndex(index_url="https://pypi.corp.example/simple", index_origin="PIP_INDEX_URL"))
    assert sources.pypi == "https://pypi.corp.example/simple" and sources.pytorch is None


# --- each mirror with each tool -------------------------------------------------------------------

PLANS = {
    "pascal-cu126": choose_torch([GTX_1080_TI], DRIVER_580, python_version="3.12"),
    "blackwell-cu132": choose_torch([RTX_5090], DRIVER_580, python_version="3.12"),
    "ada-old-driver": choose_torch([RTX_4090], DRIVER_570, release="2.11", python_version="3.12"),
}


@pytest.mark.parametrize("tool", ["pip", "uv", "pixi", "conda"])
@pytest.mark.parametrize("name", ["tuna", "aliyun", "ustc", "tencent", "huawei", "sjtu", "nju"])
@pytest.mark.parametrize("case", sorted(PLANS))
def test_each_mirror_with_each_tool_takes_torch_from_the_right_place(case: str, name: str, tool: str) -> None:
    plan = PLANS[case]
    mirror = find_mirror(name)
    written = for_tool(plan, tool, choose_sources(name, None), LINUX)
    text = "\n".join(filter(None, (written.command, written.snippet, *written.warnings)))
    build = plan.variant
    if mirror.pytorch is not None and mirror.pytorch.serves(build):
        assert mirror.pytorch.url(build) in text
        assert f"{OFFICIAL}{build}" not in text
    elif mirror.pypi is not None and case == "blackwell-cu132":
        # torch 2.14's PyPI wheel for Linux x86_64 is the cu132 build: the PyPI mirror serves it, pinned
        assert OFFICIAL not in (written.snippet or written.command)
        assert mirror.pypi in text and "2.14.*" in text
    else:
        assert f"{OFFICIAL}{build}" in text or f"--torch-backend={build}" in text
        assert any("torch comes from download.pytorch.org" in w for w in written.warnings)


def test_nju_does_not_serve_cu128_and_says_so_naming_the_mirror_that_does() -> None:
    plan = PLANS["ada-old-driver"]
    assert plan.variant == "cu128"
    written = for_tool(plan, "pip", choose_sources("nju", None), LINUX)
    assert written.command == f"pip install torch==2.11.* --index-url {OFFICIAL}cu128"
    assert any(w.startswith("the nju mirror is not known to serve torch cu128 (as of 2026-12-03")
               and w.endswith("torch comes from download.pytorch.org; --mirror sjtu serves it")
               for w in written.warnings)


def test_pypi_mirror_serves_the_pypi_default_build_pinned_to_the_release() -> None:
    plan = PLANS["blackwell-cu132"]
    assert plan.command == f"pip install torch==2.14.* --index-url {OFFICIAL}cu132"
    named = for_tool(plan, "pip", choose_sources("tuna", None), LINUX)
    assert named.command == f"pip install torch==2.14.* --index-url {TUNA}"
    configured = for_tool(plan, "pip", choose_sources(None, PipIndex(TUNA, "PIP_INDEX_URL")), LINUX)
    assert configured.command == "pip install torch==2.14.*"
    assert any("set by PIP_INDEX_URL" in w for w in configured.warnings)


def test_an_unpinned_torch_from_pypi_is_pinned_to_the_planned_release() -> None:
    """From PyPI, a bare "torch" is whatever release is newest there, and its default build may not be this one."""
    plan = choose_torch([], DRIVER_580)
    assert plan.command == f"pip install torch --index-url {OFFICIAL}cpu"
    sources = Sources(pypi=TUNA, pypi_origin="PIP_INDEX_URL")
    written = for_tool(plan, "pip", sources, LINUX)
    assert written.command == f"pip install torch --index-url {OFFICIAL}cpu"
    assert any("torch comes from download.pytorch.org; --mirror sjtu or --mirror nju serves it" in w
               for w in written.warnings)


def test_arm_machines_do_not_take_torch_from_pypi() -> None:
    plan = choose_torch([RTX_5090], DRIVER_580, machine="aarch64")
    written = for_tool(plan, "pip", choose_sources("tuna", None), Target("linux", "aarch64", "3.12.1"))
    assert OFFICIAL in written.command


@pytest.mark.parametrize("tool", ["pip", "uv", "pixi", "conda"])
def test_tensorflow_and_jax_take_everything_from_the_pypi_mirror(tool: str) -> None:
    from gpufly.doctor.install import choose_jax, choose_tensorflow

    for plan in (choose_tensorflow([RTX_4090], DRIVER_580), choose_jax([RTX_4090], DRIVER_580)):
        written = for_tool(plan, tool, choose_sources("aliyun", None), LINUX)
        text = "\n".join(filter(None, (written.command, written.snippet)))
        assert "https://mirrors.aliyun.com/pypi/simple/" in text
        install = PipInstall.parse(plan.command)
        assert install is not None and install.index_url is None
