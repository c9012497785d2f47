"""The rules over the version tables hold at their boundaries (the tables themselves: test_tables.py)."""

from __future__ import annotations

import doctest
import re

import pytest

import gpufly.doctor.compat
from gpufly.doctor.compat import (
    arch_covers,
    cuda_key,
    driver_runs_natively,
    driver_supports,
    jax_extras,
    min_driver_for,
    minor_compat,
    parse_arch,
    python_key,
    runs_by_minor_compat,
    tensorflow_facts,
    tensorflow_releases,
    toolkit_driver,
    torch_release,
    torch_releases,
    torch_variants,
    version_at_least,
)
from gpufly.errors import GpuflyError


def test_docstring_examples_run() -> None:
    result = doctest.testmod(gpufly.doctor.compat)
    assert result.attempted > 0 and result.failed == 0


# --- drivers ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("version", "floor", "at_least"), [
    ("550.54.15", "550.9", True),     # numbers, not text: 54 > 9
    ("580", "580.0.0", True),         # missing parts count as 0
    ("580.0.0", "580", True),
    ("525.60.12", "525.60.13", False),
    ("2.13.0+cpu", "2.13", True),     # a PEP 440 local version reads as its release
    ("2.5.0a0+872d972e41", "2.5", False),  # a pre-release comes before its release
])
def test_versions_compare_as_numbers(version: str, floor: str, at_least: bool) -> None:
    assert version_at_least(version, floor) is at_least


@pytest.mark.parametrize(("call", "message", "hint"), [
    (lambda: version_at_least("N/A", "525"), "cannot read version 'N/A'", "expected dotted numbers, e.g. 550.54.15"),
    (lambda: cuda_key("twelve"), "cannot read CUDA version 'twelve'", "expected dotted numbers, e.g. 12.6"),
    (lambda: python_key("3"), "cannot read Python version '3'", "expected e.g. 3.12"),
    (lambda: python_key("three"), "cannot read Python version 'three'", "expected dotted numbers, e.g. 3.12"),
])
def test_an_unreadable_version_is_one_error_with_an_example(call, message: str, hint: str) -> None:
    with pytest.raises(GpuflyError) as caught:
        call()
    assert (caught.value.message, caught.value.hint) == (message, hint)


@pytest.mark.parametrize(("text", "key"), [("12.6", (12, 6)), ("12.6.3", (12, 6)), ("13", (13, 0))])
def test_cuda_key_is_major_and_minor(text: str, key: tuple[int, int]) -> None:
    assert cuda_key(text) == key


@pytest.mark.parametrize(("driver", "cuda", "platform", "runs"), [
    ("525.60.13", "12.0", "linux", True),
    ("525.60.12", "12.0", "linux", False),
    ("525.60.13", "12.9", "linux", True),   # minor-version compatibility: any 12.x
    ("579.99", "13.0", "linux", False),
    ("580", "13.0", "linux", True),
    ("580.65.06", "13.2", "linux", True),   # 13.2 is not in the toolkit table; the family floor decides
    ("450.80.02", "11.8", "linux", True),
    ("450.80.01", "11.8", "linux", False),
    ("470.82.01", "12.6", "linux", False),
    ("528.33", "12.8", "windows", True),
    ("528.32", "12.8", "windows", False),
    ("528.33", "12.8", "wsl", True),        # WSL runs the Windows driver
    ("418.39", "10.1", "linux", True),      # before 11.x only the toolkit's own driver counts
    ("418.39", "10.2", "linux", False),
])
def test_driver_supports_at_the_boundaries(driver: str, cuda: str, platform: str, runs: bool) -> None:
    assert driver_supports(driver, cuda, platform) is runs


def test_min_driver_is_the_family_floor_or_the_toolkit_driver_if_lower() -> None:
    assert min_driver_for("12.6") == "525.60.13"
    assert min_driver_for("12.6", "windows") == "528.33"
    assert min_driver_for("12.0", "windows") == "527.41"
    assert min_driver_for("13.0", "windows") == "580"
    assert min_driver_for("11.8") == "450.80.02"
    assert min_driver_for("10.2") == "440.33"


def test_an_unknown_cuda_version_is_an_error_with_suggestions() -> None:
    with pytest.raises(GpuflyError, match=re.escape("unknown CUDA version '9.9'")):
        min_driver_for("9.9")


def test_native_support_prefers_the_drivers_own_cuda_version() -> None:
    assert driver_runs_natively("560.28.03", "12.6") is True
    assert driver_runs_natively("535.54.03", "12.6") is False
    assert driver_runs_natively("580.82.07", "13.2") is None
    assert driver_runs_natively("595.45.04", "13.2", driver_cuda="13.2") is True
    assert driver_runs_natively("580.82.07", "13.2", driver_cuda="13.0") is False
    assert toolkit_driver("13.0", "windows") is None


# --- architectures ------------------------------------------------------------------------------

@pytest.mark.parametrize(("cc", "arches", "kind"), [
    ("8.6", ["sm_80"], "sass"),
    ("8.9", ["sm_80", "sm_86"], "sass"),
    ("9.0", ["sm_86"], None),
    ("9.0", ["sm_80", "compute_80"], "ptx"),
    ("12.1", ["compute_120"], "ptx"),
    ("12.1", ["sm_120"], "sass"),
    ("12.0", ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], None),
    ("6.1", ["sm_60"], "sass"),
    ("6.0", ["sm_61"], None),
    ("7.5", ["compute_80"], None),
    ("9.0", ["sm_90a"], "sass"),
    ("10.0", ["sm_90a"], None),
])
def test_arch_matching_rule(cc: str, arches: list[str], kind: str | None) -> None:
    assert arch_covers(cc, arches) == kind


def test_arch_names_split_major_and_minor_as_nvcc_does() -> None:
    assert parse_arch("sm_120") == ("sm", 12, 0, "")
    assert parse_arch("compute_90") == ("compute", 9, 0, "")
    with pytest.raises(GpuflyError):
        parse_arch("sm_6")
    with pytest.raises(GpuflyError):
        arch_covers("8", ["sm_80"])


# --- loaders ------------------------------------------------------------------------------------

def test_torch_table_covers_2_4_to_2_14_newest_first() -> None:
    releases = [r.release for r in torch_releases()]
    assert releases[0] == "2.14"
    assert {"2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11", "2.12", "2.13", "2.14"} <= set(releases)
    assert [v.name for v in torch_variants()] == ["cu126", "cu130", "cu132"]
    assert torch_release("2.14.1").release == "2.14"


def test_torch_variants_know_their_arches_and_index() -> None:
    cu126 = torch_release("2.14").variant("cu126")
    assert cu126.arch_list == ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
    assert cu126.index_url == "https://download.pytorch.org/whl/cu126"
    cu130 = torch_release("2.14").variant("cu130")
    assert "compute_120" in cu130.arches("linux")
    assert "compute_120" not in cu130.arches("windows")
    assert cu130.arches("linux", machine="aarch64")[-1] == "compute_120"
    assert torch_release("2.14").variant("cu132").pypi_default_linux


def test_unsourced_arch_lists_are_left_out() -> None:
    assert all(v.arch_list is None for v in torch_variants("2.10"))
    assert torch_release("2.13").variant("cu129").arch_list is None


def test_unknown_release_suggests_close_ones() -> None:
    with pytest.raises(GpuflyError, match=re.escape("unknown torch release '2.41'")):
        torch_release("2.41")
    with pytest.raises(GpuflyError, match=re.escape("unknown CUDA build of torch 2.14 'cu128'")):
        torch_release("2.14").variant("cu128")


def test_tensorflow_and_jax_tables() -> None:
    newest = tensorflow_releases()[0]
    assert (newest.release, newest.cuda, newest.cudnn, newest.and_cuda) == ("2.21", "12.5", "9.3", True)
    assert not next(r for r in tensorflow_releases() if r.release == "2.13").and_cuda
    facts = tensorflow_facts()
    assert facts["native_windows_gpu"]["last_release"] == "2.10"
    assert facts["gpu_check"]["use"] == "tf.config.list_physical_devices('GPU')"
    assert [e.extra for e in jax_extras()] == ["cuda13", "cuda12"]
    assert jax_extras()[0].min_driver_linux == "580"


# --- minor-version compatibility ----------------------------------------------------------------

@pytest.mark.parametrize(("driver", "cuda", "driver_cuda", "expected"), [
    ("580.82.07", "13.2", "13.0", True),    # same major, newer minor: only by compatibility
    ("580.82.07", "13.0", "13.0", False),   # its own CUDA: natively
    ("580.82.07", "12.8", "13.0", False),   # an older CUDA: natively (backward compatibility)
    ("570.133.07", "13.0", "12.8", False),  # another major: not at all
    ("560.35.03", "12.8", None, True),      # the toolkit table: 12.8 shipped with 570.26
    ("580.82.07", "13.2", None, True),      # neither tells: the side that asks for native code
])
def test_runs_by_minor_compat(driver: str, cuda: str, driver_cuda: str | None, expected: bool) -> None:
    assert runs_by_minor_compat(driver, cuda, driver_cuda=driver_cuda) is expected


def test_the_minor_compat_rule_cites_nvidia() -> None:
    rule = minor_compat()
    assert rule.source == "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html"
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in rule.ptx_error and "newer driver" in rule.caveat
