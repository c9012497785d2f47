"""The doctor's version tables: each matches its JSON Schema, and keeps the rules a schema cannot say.

The schemas (``doctor/data/*.schema.json``) hold the shape: every row has an https source, versions are
dotted numbers, architectures are sm_XY or compute_XY. This file holds the rest: rows newest first, names
unique within a release, one column agreeing with another, one table agreeing with another. Each rule has
a broken table below that it catches.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from packaging.version import Version

from gpufly.doctor.compat import DATA_DIR, TABLES, cuda_key, min_driver_for
from gpufly.errors import GpuflyError

OLDEST_RECOMMENDED_CUDA = (11, 7)
"""download.pytorch.org indexes before CUDA 11.7 (cu113 and older) are too old to recommend."""


def _load(name: str) -> Any:
    return json.loads((DATA_DIR / name).read_text())


SHIPPED = {name: _load(f"{name}.json") for name in TABLES}
SCHEMAS = {name: _load(f"{name}.schema.json") for name in TABLES}


def schema_problems(name: str, table: Any) -> list[str]:
    """Every place ``table`` breaks its schema, as "name: path: message"."""
    validator = jsonschema.Draft202012Validator(SCHEMAS[name])
    return [f"{name}: {'/'.join(str(part) for part in error.absolute_path)}: {error.message}"
            for error in validator.iter_errors(table)]


def _newest_first(keys: list[Any], where: str) -> Iterator[str]:
    if keys != sorted(keys, reverse=True) or len(set(keys)) != len(keys):
        yield f"{where}: rows not unique and newest first"


def _torch_release_problems(release: dict[str, Any]) -> Iterator[str]:
    where = f"torch {release['release']}"
    names = [variant["variant"] for variant in release["variants"]]
    if len(set(names)) != len(names):
        yield f"{where}: variants repeated"
    default = release.get("pypi_default_linux")
    if default is not None and default["variant"] not in names:
        yield f"{where}: PyPI default {default['variant']!r} is not one of its variants"
    for variant in release["variants"]:
        cuda = variant["cuda"]
        if variant["variant"] != "cu" + cuda.replace(".", ""):
            yield f"{where} {variant['variant']}: name does not match CUDA {cuda}"
        if cuda_key(cuda) < OLDEST_RECOMMENDED_CUDA:
            yield f"{where} {variant['variant']}: CUDA {cuda} indexes are too old to recommend"
        try:
            min_driver_for(cuda)
        except GpuflyError:
            yield f"{where} {variant['variant']}: CUDA {cuda} has no driver in cuda_drivers"


def rule_problems(tables: dict[str, Any]) -> list[str]:
    """What the schemas cannot say, for tables that already match them."""
    torch, tensorflow, jax = tables["torch_wheels"], tables["tensorflow"], tables["jax"]
    problems = [
        *_newest_first([cuda_key(row["cuda"]) for row in tables["cuda_drivers"]["toolkits"]], "cuda_drivers toolkits"),
        *_newest_first([Version(row["release"]) for row in torch["releases"]], "torch_wheels releases"),
        *_newest_first([Version(row["release"]) for row in tensorflow["releases"]], "tensorflow releases"),
        *_newest_first([cuda_key(row["cuda"]) for row in jax["extras"]], "jax extras"),
    ]
    for release in torch["releases"]:
        problems += _torch_release_problems(release)
    for extra in jax["extras"]:
        if f'"jax[{extra["extra"]}]"' not in extra["command"]:
            problems.append(f"jax[{extra['extra']}]: command does not install that extra")
    return problems


@pytest.mark.parametrize("name", TABLES)
def test_shipped_table_matches_its_schema(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMAS[name])
    assert schema_problems(name, SHIPPED[name]) == []


def test_shipped_tables_keep_the_rules_a_schema_cannot_say() -> None:
    assert rule_problems(SHIPPED) == []


def test_every_row_of_every_table_has_a_source() -> None:
    def rows(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            yield node
            for value in node.values():
                yield from rows(value)
        elif isinstance(node, list):
            for value in node:
                yield from rows(value)

    for name, table in SHIPPED.items():
        for key in ("toolkits", "families", "releases", "variants", "extras", "removed_packages"):
            for row in (r for r in rows(table) if key in r for r in r[key]):
                assert str(row.get("source", "")).startswith("https://"), (name, row)


# --- each rule catches a broken table -----------------------------------------------------------

DELETE = object()


def _broken(name: str, path: str, value: Any) -> dict[str, Any]:
    """The shipped tables with one value of ``name`` replaced (or deleted); ``path`` is dotted ("toolkits.0.cuda")."""
    tables = copy.deepcopy(SHIPPED)
    *parents, last = path.split(".")
    target = tables[name]
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    key = int(last) if isinstance(target, list) else last
    if value is DELETE:
        del target[key]
    else:
        target[key] = value
    return tables


def _append(name: str, path: str, row: Any) -> dict[str, Any]:
    tables = copy.deepcopy(SHIPPED)
    target = tables[name]
    for key in path.split("."):
        target = target[int(key)] if isinstance(target, list) else target[key]
    target.append(row)
    return tables


def _reversed(name: str, key: str) -> dict[str, Any]:
    tables = copy.deepcopy(SHIPPED)
    tables[name][key].reverse()
    return tables


def _without_family(major: int) -> dict[str, Any]:
    tables = copy.deepcopy(SHIPPED)
    tables["cuda_drivers"]["families"] = [f for f in tables["cuda_drivers"]["families"] if f["major"] != major]
    return tables


OLD_CU113 = {"variant": "cu113", "cuda": "11.3", "status": "stable", "source": "https://example.org"}
UNKNOWN_CUDA = {"variant": "cu99", "cuda": "9.9", "status": "stable", "source": "https://example.org"}

SCHEMA_RULES = [
    ("no table source", "cuda_drivers", _broken("cuda_drivers", "source", DELETE), "'source' is a required"),
    ("toolkit row without source", "cuda_drivers", _broken("cuda_drivers", "toolkits.0.source", DELETE),
     "toolkits/0: 'source' is a required"),
    ("http source", "jax", _broken("jax", "extras.0.source", "http://example.org"), "extras/0/source"),
    ("toolkit cuda not dotted", "cuda_drivers", _broken("cuda_drivers", "toolkits.0.cuda", "13.x"), "toolkits/0/cuda"),
    ("toolkit linux driver not dotted", "cuda_drivers", _broken("cuda_drivers", "toolkits.0.linux", "N/A"),
     "toolkits/0/linux"),
    ("toolkit windows driver not dotted", "cuda_drivers", _broken("cuda_drivers", "toolkits.1.windows", "n/a"),
     "toolkits/1/windows"),
    ("family 12 missing", "cuda_drivers", _without_family(12), "families: "),
    ("family without source", "cuda_drivers", _broken("cuda_drivers", "families.0.source", DELETE), "families/0"),
    ("family windows not dotted", "cuda_drivers", _broken("cuda_drivers", "families.0.windows", None),
     "families/0/windows"),
    ("minor-version compatibility without its source", "cuda_drivers",
     _broken("cuda_drivers", "minor_version_compatibility.source", DELETE), "minor_version_compatibility: 'source'"),
    ("minor-version compatibility missing", "cuda_drivers",
     _broken("cuda_drivers", "minor_version_compatibility", DELETE), "'minor_version_compatibility' is a required"),
    ("torch index url", "torch_wheels", _broken("torch_wheels", "index_url", "https://pypi.org/simple/"),
     "index_url"),
    ("torch release without source", "torch_wheels", _broken("torch_wheels", "releases.0.source", DELETE),
     "releases/0: 'source' is a required"),
    ("torch release not dotted", "torch_wheels", _broken("torch_wheels", "releases.0.release", "2.x"),
     "releases/0/release"),
    ("torch python max not dotted", "torch_wheels", _broken("torch_wheels", "releases.0.python.max", "3.x"),
     "releases/0/python/max"),
    ("torch release without variants", "torch_wheels", _broken("torch_wheels", "releases.0.variants", []),
     "releases/0/variants"),
    ("PyPI default without source", "torch_wheels",
     _broken("torch_wheels", "releases.0.pypi_default_linux.source", DELETE), "releases/0/pypi_default_linux"),
    ("variant without source", "torch_wheels", _broken("torch_wheels", "releases.0.variants.0.source", DELETE),
     "releases/0/variants/0: 'source' is a required"),
    ("variant cuda not dotted", "torch_wheels", _broken("torch_wheels", "releases.0.variants.0.cuda", "12.six"),
     "releases/0/variants/0/cuda"),
    ("unknown status", "torch_wheels", _broken("torch_wheels", "releases.0.variants.0.status", "nightly"),
     "releases/0/variants/0/status"),
    ("bad arch entry", "torch_wheels", _append("torch_wheels", "releases.0.variants.0.arch_list", "sm_6"),
     "releases/0/variants/0/arch_list/7: 'sm_6' does not match"),
    ("repeated arch entry", "torch_wheels", _append("torch_wheels", "releases.0.variants.0.arch_list", "sm_50"),
     "releases/0/variants/0/arch_list: "),
    ("empty arch list", "torch_wheels", _broken("torch_wheels", "releases.0.variants.0.arch_list_aarch64", []),
     "releases/0/variants/0/arch_list_aarch64"),
    ("tensorflow without source", "tensorflow", _broken("tensorflow", "source", 5), "tensorflow: source"),
    ("tensorflow row without source", "tensorflow", _broken("tensorflow", "releases.0.source", DELETE),
     "releases/0: 'source' is a required"),
    ("tensorflow tested version not dotted", "tensorflow",
     _broken("tensorflow", "releases.0.tested_version", "2.21.0rc1"), "releases/0/tested_version"),
    ("tensorflow cudnn not dotted", "tensorflow", _broken("tensorflow", "releases.0.cudnn", "nine"),
     "releases/0/cudnn"),
    ("tensorflow python min not dotted", "tensorflow", _broken("tensorflow", "releases.0.python.min", "three"),
     "releases/0/python/min"),
    ("and-cuda without source", "tensorflow", _broken("tensorflow", "and_cuda.source", DELETE), "and_cuda"),
    ("and-cuda since not dotted", "tensorflow", _broken("tensorflow", "and_cuda.since", "soon"), "and_cuda/since"),
    ("native Windows without source", "tensorflow", _broken("tensorflow", "native_windows_gpu.source", DELETE),
     "native_windows_gpu"),
    ("native Windows release not dotted", "tensorflow",
     _broken("tensorflow", "native_windows_gpu.last_release", "two"), "native_windows_gpu/last_release"),
    ("GPU check without source", "tensorflow", _broken("tensorflow", "gpu_check.source", DELETE), "gpu_check"),
    ("removed package without source", "tensorflow", _broken("tensorflow", "removed_packages.0.source", DELETE),
     "removed_packages/0"),
    ("jax without source", "jax", _broken("jax", "source", DELETE), "jax: : 'source' is a required"),
    ("jax extra without source", "jax", _broken("jax", "extras.0.source", DELETE), "extras/0"),
    ("jax cuda not dotted", "jax", _broken("jax", "extras.0.cuda", "13.x"), "extras/0/cuda"),
    ("jax driver not dotted", "jax", _broken("jax", "extras.0.min_driver_linux", "580.x"),
     "extras/0/min_driver_linux"),
    ("jax compute capability not dotted", "jax", _broken("jax", "extras.0.min_compute_capability", "7"),
     "extras/0/min_compute_capability"),
    ("jax platforms without source", "jax", _broken("jax", "gpu_platforms.source", DELETE), "gpu_platforms"),
    ("jax warning without source", "jax", _broken("jax", "warnings.0.source", DELETE), "warnings/0"),
]


@pytest.mark.parametrize(("case", "name", "tables", "expected"), SCHEMA_RULES, ids=[c[0] for c in SCHEMA_RULES])
def test_the_schema_catches_a_broken_table(case: str, name: str, tables: dict[str, Any], expected: str) -> None:
    problems = schema_problems(name, tables[name])
    assert any(expected in problem for problem in problems), problems


TEST_RULES = [
    ("toolkits out of order", _reversed("cuda_drivers", "toolkits"), "cuda_drivers toolkits: rows not unique"),
    ("torch releases out of order", _reversed("torch_wheels", "releases"), "torch_wheels releases: rows not"),
    ("tensorflow releases out of order", _reversed("tensorflow", "releases"), "tensorflow releases: rows not"),
    ("jax extras out of order", _reversed("jax", "extras"), "jax extras: rows not unique"),
    ("repeated variant", _append("torch_wheels", "releases.0.variants", SHIPPED["torch_wheels"]["releases"][0]
                                 ["variants"][0]), "torch 2.14: variants repeated"),
    ("PyPI default not a variant", _broken("torch_wheels", "releases.0.pypi_default_linux.variant", "cu999"),
     "PyPI default 'cu999' is not one of its variants"),
    ("variant name and CUDA disagree", _broken("torch_wheels", "releases.0.variants.0.cuda", "12.8"),
     "cu126: name does not match CUDA 12.8"),
    ("cu113-era index", _append("torch_wheels", "releases.-1.variants", OLD_CU113), "too old to recommend"),
    ("CUDA without a driver row", _append("torch_wheels", "releases.-1.variants", UNKNOWN_CUDA),
     "CUDA 9.9 has no driver in cuda_drivers"),
    ("jax command installs another extra", _broken("jax", "extras.0.command", 'pip install -U "jax[cuda12]"'),
     "jax[cuda13]: command does not install that extra"),
]


@pytest.mark.parametrize(("case", "tables", "expected"), TEST_RULES, ids=[c[0] for c in TEST_RULES])
def test_the_rules_catch_a_broken_table(case: str, tables: dict[str, Any], expected: str) -> None:
    problems = rule_problems(tables)
    assert any(expected in problem for problem in problems), problems
