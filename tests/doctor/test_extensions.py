"""GPU extension packages beside torch: recorded machines and import errors in, findings out; the child probe
against fake packages on a temporary path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufly.doctor.checks import diagnose
from gpufly.doctor.extension_probe import MARKER, import_modules, installed_extensions, probe_extensions
from gpufly.doctor.extensions import (
    Build,
    ExtensionFact,
    build_of,
    extension_findings,
    extension_table,
    read_extension_fact,
)
from gpufly.doctor.facts import Facts, facts_from_dict
from gpufly.errors import GpuflyError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "doctor"
SCENARIOS = sorted((FIXTURES / "extensions").glob("*.json"))
HEALTHY = json.loads((FIXTURES / "scenarios" / "healthy_gpu.json").read_text())["facts"]


def machine(gpus: list[list[str]], torch: str | None, torch_cuda: str | None,
            torch_import_error: str | None = None) -> Facts:
    """The healthy GPU machine with these GPUs ([name, compute capability]) and this torch (None: not installed)."""
    data = json.loads(json.dumps(HEALTHY))
    template = data["gpus"][0]
    data["gpus"] = [{**template, "index": index, "name": name, "compute_capability": cc}
                    for index, (name, cc) in enumerate(gpus)]
    if torch is None:
        data["frameworks"] = []
    else:
        data["frameworks"][0].update(version=None if torch_import_error else torch, cuda_version=torch_cuda,
                                     import_error=torch_import_error, arch_list=None)
    return facts_from_dict(data, where="machine")


def scenario(path: Path) -> tuple[Facts, list[ExtensionFact], dict[str, Any]]:
    data = json.loads(path.read_text())
    extensions = [read_extension_fact(item, path.name) for item in data["extensions"]]
    return machine(**data["machine"]), extensions, data["expect"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_recorded_scenario(path: Path) -> None:
    facts, extensions, expect = scenario(path)
    findings = diagnose(facts) + extension_findings(facts, extensions)
    package_ids = {p.id for p in extension_table().packages}

    def checks(status: str) -> list[str]:
        return sorted({f.check for f in findings if f.status == status})

    assert checks("fail") == expect["fail"]
    assert checks("warn") == expect["warn"]
    assert sorted({c for c in checks("ok") if c in package_ids}) == expect["ok"]
    ours = [f for f in findings if f.check.startswith(tuple(package_ids))]
    for key in ("what", "why", "fix"):
        text = " | ".join(getattr(f, key) for f in ours)
        for expected in expect.get(key, []):
            assert expected in text, f"{key} lacks {expected!r}: {text}"
    for finding in findings:
        assert finding.status == "ok" or finding.fix, f"{finding.check} names no fix"


def test_every_scenario_cites_where_its_text_comes_from() -> None:
    for path in SCENARIOS:
        sources = json.loads(path.read_text())["sources"]
        assert sources and all(source.startswith("https://") for source in sources), path.name


def test_every_package_the_issue_names_is_in_the_table() -> None:
    distributions = {p.distribution for p in extension_table().packages}
    assert {"flash-attn", "xformers", "bitsandbytes", "torchao", "triton", "apex", "deepspeed", "vllm", "auto-gptq",
            "autoawq", "causal-conv1d", "mamba-ssm"} <= distributions


def test_every_rule_and_message_has_a_source() -> None:
    table = extension_table()
    for package in table.packages:
        assert package.sources and all(s.startswith("https://") for s in package.sources), package.id
        assert all(rule.source.startswith("https://") for rule in package.gpu_rules), package.id
    assert all(message.source.startswith("https://") for message in table.import_messages)


def test_fixes_name_their_placeholders_only() -> None:
    facts = machine([["NVIDIA GeForce RTX 4090", "8.9"]], "2.5.1+cu124", "12.4")
    for package in extension_table().packages:
        fact = ExtensionFact(package.id, package.distribution, "1.0", imported=False,
                             import_error="ImportError: undefined symbol: _ZN3c10")
        (finding,) = [f for f in extension_findings(facts, [fact]) if f.status == "fail"]
        assert "{" not in finding.fix.replace("{b", "").replace("{h", ""), finding.fix


@pytest.mark.parametrize(("version", "expected"), [
    ("2.6.3+cu123torch2.4cxx11abiFALSE", Build(torch="2.4", cuda="12.3", cxx11_abi=False)),
    ("2.7.4.post1+cu12torch2.6cxx11abiTRUE", Build(torch="2.6", cuda="12", cxx11_abi=True)),
    ("2.6.3", Build()),
])
def test_wheel_tags_are_read(version: str, expected: Build) -> None:
    package = extension_table().package("flash_attn")
    assert build_of(ExtensionFact("flash_attn", "flash_attn", version), package) == expected


def test_auto_gptq_tag_names_cuda_only() -> None:
    package = extension_table().package("auto_gptq")
    assert build_of(ExtensionFact("auto_gptq", "auto_gptq", "0.7.1+cu118"), package) == Build(cuda="11.8")


def test_a_cuda_11_build_beside_a_cuda_12_torch_is_named() -> None:
    facts = machine([["NVIDIA GeForce RTX 4090", "8.9"]], "2.4.0+cu121", "12.1")
    fact = ExtensionFact("auto_gptq", "auto_gptq", "0.7.1+cu118")
    (finding,) = extension_findings(facts, [fact])
    assert (finding.check, finding.status) == ("auto_gptq_build", "fail")
    assert "built for CUDA 11.8, this torch uses CUDA 12.1" in finding.what


def test_deepspeed_ops_need_torch_s_cuda_minor_version_too() -> None:
    facts = machine([["NVIDIA GeForce RTX 4090", "8.9"]], "2.3.1+cu124", "12.4")
    fact = ExtensionFact("deepspeed", "deepspeed", "0.15.0", built_torch="2.3", built_cuda="12.1", imported=True)
    (finding,) = extension_findings(facts, [fact])
    assert (finding.check, finding.status) == ("deepspeed_build", "fail")
    assert "built for CUDA 12.1, this torch uses CUDA 12.4" in finding.what
    assert finding.fix.startswith("pip uninstall -y deepspeed && pip install --no-cache-dir deepspeed==0.15.0;")


def test_post_releases_keep_their_number_in_the_fix() -> None:
    facts = machine([["NVIDIA GeForce RTX 4090", "8.9"]], "2.6.0+cu124", "12.4")
    fact = ExtensionFact("flash_attn", "flash_attn", "2.7.4.post1+cu12torch2.5cxx11abiFALSE")
    (finding,) = extension_findings(facts, [fact])
    assert "--no-build-isolation flash-attn==2.7.4.post1;" in finding.fix


def test_torchao_for_a_torch_its_table_does_not_list_points_to_the_table() -> None:
    facts = machine([["NVIDIA GeForce RTX 4090", "8.9"]], "2.4.1+cu124", "12.4")
    fact = ExtensionFact("torchao", "torchao", "0.14.1", imported=True,
                         import_output="Skipping import of cpp extensions due to incompatible torch version 2.4.1")
    (finding,) = extension_findings(facts, [fact])
    assert (finding.check, finding.status) == ("torchao_kernels", "warn")
    assert "https://github.com/pytorch/ao/issues/2919) pairs with torch 2.4" in finding.fix


def test_only_gpus_below_the_floor_are_named_and_the_others_offered() -> None:
    facts = machine([["NVIDIA GeForce RTX 5090", "12.0"], ["NVIDIA GeForce GTX 1080 Ti", "6.1"]], "2.7.1+cu128", "12.8")
    fact = ExtensionFact("flash_attn", "flash_attn", "2.8.3", imported=True)
    (finding,) = extension_findings(facts, [fact])
    assert "GTX 1080 Ti" in finding.what and "5090" not in finding.what
    assert "CUDA_VISIBLE_DEVICES" in finding.fix


def test_no_extensions_no_findings() -> None:
    assert extension_findings(machine([], "2.5.1+cpu", None), []) == []


@pytest.mark.parametrize(("data", "message"), [
    ({"package": "flashattn", "distribution": "x", "version": "1"}, "did you mean"),
    ({"package": "vllm", "distribution": "vllm", "version": "banana"}, "cannot read version"),
    ({"package": "vllm", "distribution": "vllm", "version": "0.6.4", "imported": "yes"}, "imported"),
])
def test_saved_extension_facts_are_read_strictly(data: dict[str, Any], message: str) -> None:
    with pytest.raises(GpuflyError, match=message):
        read_extension_fact(data, "facts.json")


# --- the probe ----------------------------------------------------------------------------------------

def install(root: Path, name: str, version: str, init: str, requires: tuple[str, ...] = (),
            files: dict[str, str] | None = None) -> None:
    """A fake installed package: its module and a dist-info folder with METADATA and RECORD."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(init)
    for relative, text in (files or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             *(f"Requires-Dist: {requirement}" for requirement in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    record = [f"{name}/__init__.py,,", *(f"{relative},," for relative in files or {})]
    (info / "RECORD").write_text("\n".join(record) + "\n")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages with a flash-attn whose compiled part lost a torch symbol, an xformers whose kernels warn,
    a bitsandbytes with its CUDA libraries, a vLLM that imports fine, and an apex built without its kernels."""
    install(tmp_path, "flash_attn", "2.6.3+cu12torch2.4cxx11abiFALSE",
            'raise ImportError("/site/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: '
            '_ZN3c104cuda9SetDeviceEi")\n', requires=("torch", "einops"))
    install(tmp_path, "xformers", "0.0.28.post3",
            "import logging\nlogging.getLogger('xformers').warning(\"WARNING[XFORMERS]: xFormers can't load C++/CUDA "
            "extensions. xFormers was built for:\\n    PyTorch 2.5.1+cu124 with CUDA 1204 (you have 2.6.0+cu124)\")\n",
            requires=("numpy", "torch==2.5.1"),
            files={"xformers/cpp_lib.json": '{"version": {"torch": "2.5.1+cu124", "cuda": 1204}, "env": {}}',
                   "xformers/ops.py": ""})
    install(tmp_path, "bitsandbytes", "0.45.0", "",
            files={"bitsandbytes/libbitsandbytes_cuda118.so": "", "bitsandbytes/libbitsandbytes_cuda124.so": "",
                   "bitsandbytes/libbitsandbytes_cpu.so": ""})
    install(tmp_path, "vllm", "0.6.4", "print('INFO vllm loaded')\n", requires=('torch==2.5.1; extra == "never"',))
    install(tmp_path, "apex", "0.1", "")
    return tmp_path


def test_metadata_is_read_without_importing(site: Path) -> None:
    found = {fact.package: fact for fact in installed_extensions(path=[str(site)])}
    assert sorted(found) == ["apex", "bitsandbytes", "flash_attn", "vllm", "xformers"]
    assert found["xformers"].requires_torch == "torch==2.5.1"
    assert (found["xformers"].built_torch, found["xformers"].built_cuda) == ("2.5.1+cu124", "12.4")
    assert found["bitsandbytes"].cuda_libraries == ("11.8", "12.4")
    assert found["vllm"].requires_torch is None, "a requirement behind an extra does not apply"
    assert all(fact.imported is None for fact in found.values())
    assert "flash_attn" not in sys.modules


def test_child_imports_each_package_and_reports_what_it_saw(site: Path) -> None:
    environ = {**os.environ, "PYTHONPATH": str(site)}
    found = {fact.package: fact for fact in probe_extensions(path=[str(site)], environ=environ)}
    flash = found["flash_attn"]
    assert flash.imported is False and "undefined symbol: _ZN3c104cuda9SetDeviceEi" in (flash.import_error or "")
    xformers = found["xformers"]
    assert xformers.imported is True and "xFormers was built for" in (xformers.import_output or "")
    assert found["vllm"].imported is True and found["vllm"].import_output == "INFO vllm loaded\n"
    facts = machine([["NVIDIA GeForce RTX 4090", "8.9"]], "2.6.0+cu124", "12.4")
    checks = {f.check: f.status for f in extension_findings(facts, list(found.values()))}
    assert found["apex"].absent_kernels == ("amp_C", "fused_layer_norm_cuda", "apex_C")
    assert checks == {"flash_attn_import": "fail", "xformers_kernels": "fail", "xformers_torch": "fail",
                      "bitsandbytes": "ok", "vllm": "ok", "apex_kernels": "warn"}


def test_a_crash_and_a_hang_are_facts(site: Path) -> None:
    def crashed(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, -11, "", "Fatal Python error: Segmentation fault\n")

    def hung(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.TimeoutExpired(args, kwargs["timeout"])

    (crash, *_) = probe_extensions(run=crashed, path=[str(site)])
    assert crash.import_error == ("crashed with SIGSEGV while importing flash_attn: "
                                  "Fatal Python error: Segmentation fault")
    (hang, *_) = probe_extensions(run=hung, path=[str(site)], timeout=7)
    assert hang.timed_out and "within 7 s" in (hang.import_error or "")


def test_the_child_runs_without_gpufly_and_prints_one_marked_line(site: Path) -> None:
    source = (Path(__file__).parents[2] / "src" / "gpufly" / "doctor" / "extension_probe.py").read_text()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", source, "json"], capture_output=True, text=True,
                          timeout=30, check=False)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    assert json.loads(line[len(MARKER):]) == {"imported": True, "import_error": None, "absent_kernels": [],
                                              "torch_cxx11_abi": None, "import_output": None}


@pytest.mark.slow
def test_the_child_reads_the_abi_of_the_torch_a_package_imported(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    install(tmp_path, "mamba_ssm", "2.2.2+cu12torch2.4cxx11abiFALSE", "import torch\n", requires=("torch",))
    (fact,) = probe_extensions(path=[str(tmp_path)], environ={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert fact.imported is True and isinstance(fact.torch_cxx11_abi, bool)


def test_optional_kernel_modules_are_imported_only_when_present() -> None:
    answer = import_modules(["json", "?csv", "?no_such_kernel_module"])
    assert answer["imported"] is True and answer["absent_kernels"] == ["no_such_kernel_module"]
    failed = import_modules(["no_such_package"])
    assert failed["import_error"] == "ModuleNotFoundError: No module named 'no_such_package'"
