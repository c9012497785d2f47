"""The version tables validate, and the rules over them hold at their boundaries."""

from __future__ import annotations

import copy
import doctest
import json
import re

import pytest

import gpufly.doctor.compat
from gpufly.doctor.compat import (
    DATA_DIR,
    TABLES,
    arch_covers,
    driver_runs_natively,
    driver_supports,
    jax_extras,
    min_driver_for,
    parse_arch,
    tensorflow_facts,
    tensorflow_releases,
    toolkit_driver,
    torch_release,
    torch_releases,
    torch_variants,
    validate_tables,
    version_at_least,
)
from gpufly.errors import GpuflyError


def _raw(name: str) -> dict:
    return json.loads((DATA_DIR / f"{name}.json").read_text())


def test_shipped_tables_validate() -> None:
    assert validate_tables() == []


def test_every_row_of_every_table_has_a_source() -> None:
    def rows(node):
        if isinstance(node, dict):
            yield node
            for value in node.values():
                yield from rows(value)
        elif isinstance(node, list):
            for value in node:
                yield from rows(value)

    for name in TABLES:
        doc = _raw(name)
        for key in ("toolkits", "families", "releases", "variants", "extras", "removed_packages"):
            for row in (r for r in rows(doc) if key in r for r in r[key]):
                assert str(row.get("source", "")).startswith("https://"), (name, row)


def test_validation_reports_a_row_without_source_and_a_bad_arch() -> None:
    tables = {name: copy.deepcopy(_raw(name)) for name in TABLES}
    del tables["cuda_drivers"]["toolkits"][0]["source"]
    tables["torch_wheels"]["releases"][0]["variants"][0]["arch_list"].append("sm_6")
    tables["jax"]["extras"][0]["min_driver_linux"] = "580.x"
    problems = validate_tables(tables)
    assert any("CUDA 13.1: no https source" in p for p in problems)
    assert any("'sm_6' is not sm_XY" in p for p in problems)
    assert any("jax[cuda13] driver" in p for p in problems)


def test_validation_refuses_cu113_era_indexes() -> None:
    tables = {name: copy.deepcopy(_raw(name)) for name in TABLES}
    tables["torch_wheels"]["releases"][-1]["variants"].append(
        {"variant": "cu113", "cuda": "11.3", "status": "stable", "source": "https://example.org"})
    assert any("too old to recommend" in p for p in validate_tables(tables))


def test_docstring_examples_run() -> None:
    result = doctest.testmod(gpufly.doctor.compat)
    assert result.attempted > 0 and result.failed == 0


# --- drivers ------------------------------------------------------------------------------------

def test_versions_compare_as_numbers() -> None:
    assert version_at_least("550.54.15", "550.9")
    assert version_at_least("580", "580.0.0")
    assert not version_at_least("525.60.12", "525.60.13")
    with pytest.raises(GpuflyError, match=re.escape("cannot read")):
        version_at_least("N/A", "525")


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
