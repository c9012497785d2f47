"""Recorded machines in, findings out: one scenario per failure the doctor knows, plus healthy ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpufly.catalog import Catalog, GpuSpec
from gpufly.doctor.checks import diagnose, slow_half_precision, smoke_findings
from gpufly.doctor.facts import (
    CpuFact,
    DriverFact,
    Facts,
    FrameworkFact,
    GpuFact,
    SystemFact,
    facts_from_dict,
    load_facts,
    summary_lines,
)
from gpufly.doctor.smoke import SmokeResult
from gpufly.errors import GpuflyError

SCENARIOS = sorted((Path(__file__).parent.parent / "fixtures" / "doctor" / "scenarios").glob("*.json"))


def _scenario(path: Path) -> tuple[Facts, dict]:
    data = json.loads(path.read_text())
    return facts_from_dict(data["facts"], where=path.name), data["expect"]


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_findings(path: Path) -> None:
    facts, expect = _scenario(path)
    findings = diagnose(facts)
    assert sorted({f.check for f in findings if f.status == "fail"}) == expect["fail"]
    assert sorted({f.check for f in findings if f.status == "warn"}) == expect["warn"]
    statuses = [f.status for f in findings]
    assert statuses == sorted(statuses, key=["fail", "warn", "ok"].index), "fails first"
    for finding in findings:
        if finding.status == "fail":
            assert finding.fix, f"{finding.check} says what is wrong but not how to fix it"


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_scenario_install_command(path: Path) -> None:
    from gpufly.doctor.install import choose_torch

    facts, expect = _scenario(path)
    plan = choose_torch(list(facts.gpus), facts.driver, facts.env.platform, facts.env.python_version)
    assert plan.command == expect["install_torch"]
    assert (plan.needs_driver if plan.advice else None) == expect["update_driver_to"]
    assert "cu113" not in plan.command and "tensorflow-gpu" not in plan.command


def test_at_least_twelve_scenarios() -> None:
    assert len(SCENARIOS) >= 12


def test_facts_round_trip(tmp_path) -> None:
    facts, _ = _scenario(SCENARIOS[0])
    path = tmp_path / "facts.json"
    facts.save(path)
    assert load_facts(path) == facts


HEALTHY = json.loads((SCENARIOS[0].parent / "healthy_gpu.json").read_text())["facts"]


def _with(path: str, value: object) -> str:
    """The healthy GPU machine's facts with one value replaced; ``path`` is dotted ("gpus.0.name")."""
    data = json.loads(json.dumps(HEALTHY))
    *parents, last = path.split(".")
    target = data
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[last] = value
    return json.dumps(data)


MALFORMED = [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "is not a facts document"),
    ('{"schema_version": 99, "driver": {"found": false}}', "schema_version 99"),
    ('{"schema_version": true, "driver": {"found": false}}', "schema_version true"),
    ('{"schema_version": 1, "driver": {"found": false}, "gpus": {"a": 1}}', 'gpus must be a list, got {"a": 1}'),
    ('{"schema_version": 1, "driver": {"found": false, "colour": "green"}}', "driver has unknown field(s) colour"),
    ('{"schema_version": 1}', "driver is missing"),
    (_with("env", None), "env must be an object, got null"),
    (_with("driver", None), "driver must be an object, got null"),
    (_with("gpus", None), "gpus must be a list, got null"),
    (_with("env.cuda_visible_devices", 0), "env.cuda_visible_devices must be a string, got 0"),
    (_with("gpus.0.memory_total_bytes", "lots"), 'gpus[0].memory_total_bytes must be a whole number, got "lots"'),
    (_with("gpus.0.pcie_width_current", -1), "gpus[0].pcie_width_current must not be negative"),
    (_with("gpus.0.compute_capability", 89), "gpus[0].compute_capability must be a string, got 89"),
    (_with("gpus.0.name", None), "gpus[0].name must be a string, got null"),
    (_with("gpus.0.processes", [{"pid": "x"}]), 'gpus[0].processes[0].pid must be a whole number, got "x"'),
    (_with("driver.found", "yes"), 'driver.found must be true or false, got "yes"'),
    (_with("driver.version", 570), "driver.version must be a string, got 570"),
    (_with("driver.version", "abc"), "driver.version is not valid: cannot read version 'abc'"),
    (_with("driver.source", "magic"), "driver.source is not valid: unknown driver source 'magic'"),
    (_with("collected_at", 5), "collected_at must be a string, got 5"),
    (_with("toolkit.nvcc_version", "new"), "toolkit.nvcc_version is not valid: cannot read version 'new'"),
    (_with("toolkit.cudnn_version", "nine"), "toolkit.cudnn_version is not valid: cannot read version 'nine'"),
    (_with("frameworks.0.name", "mxnet"), "frameworks[0].name is not valid: unknown framework 'mxnet'"),
    (_with("frameworks.0.version", "banana"), "frameworks[0].version is not valid: cannot read version 'banana'"),
    (_with("frameworks.0.cuda_version", "banana"), "frameworks[0].cuda_version is not valid: cannot read version"),
    (_with("frameworks.0.arch_list", "sm_80"), 'frameworks[0].arch_list must be a list, got "sm_80"'),
    (_with("frameworks.0.arch_list", ["zz"]), "frameworks[0].arch_list[0] is not valid: cannot read architecture"),
    (_with("env.platform", "plan9"), "env.platform is not valid: unknown platform 'plan9'"),
    (_with("env.python_version", "three"), "env.python_version is not valid: cannot read version 'three'"),
]


ODD_BUT_VALID = [
    ("frameworks.0.version", "2.13.0+cpu"),            # a PEP 440 local version, as pip shows it
    ("frameworks.0.version", "2.5.0a0+872d972e41"),    # NVIDIA's containers build pre-releases
    ("driver.version", "580"),                          # a driver version may have one part
    ("frameworks.0.arch_list", ["sm_90a", "compute_120"]),
    ("gpus.0.memory_free_bytes", None),                 # a figure the probe could not read
    ("gpus.0.pcie_width_current", 0),
]


@pytest.mark.parametrize("path, value", ODD_BUT_VALID, ids=[f"{p}={v}" for p, v in ODD_BUT_VALID])
def test_odd_but_valid_values_are_read(tmp_path, path: str, value: object) -> None:
    saved = tmp_path / "facts.json"
    saved.write_text(_with(path, value))
    facts = load_facts(saved)
    assert facts_from_dict(json.loads(json.dumps(facts.to_dict())), "again") == facts


@pytest.mark.parametrize("text, message", MALFORMED, ids=[m for _, m in MALFORMED])
def test_malformed_fact_files_are_clear_errors(cli, tmp_path, text: str, message: str) -> None:
    """Each wrong value is refused when the file is read, naming its field, the same for doctor and install."""
    path = tmp_path / "facts.json"
    path.write_text(text)
    with pytest.raises(GpuflyError) as caught:
        load_facts(path)
    assert message in caught.value.message and caught.value.message.startswith(str(path))
    assert caught.value.hint
    for command in (("doctor", "--facts", str(path)), ("install", "torch", "--facts", str(path))):
        result = cli(*command)
        assert result.code == 2 and "Traceback" not in result.stderr, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], result.stderr
        assert any(line.startswith("hint:") for line in result.stderr.splitlines())


def test_a_saved_probe_of_this_machine_reads_back(tmp_path) -> None:
    from gpufly.doctor.probes import probe_all

    facts = probe_all(import_frameworks=False)
    facts.save(tmp_path / "facts.json")
    assert load_facts(tmp_path / "facts.json") == facts


def test_smoke_findings() -> None:
    facts = Facts(DriverFact(True, "570.1", "12.8"))
    good = SmokeResult(0, "NVIDIA H100 80GB HBM3", "bfloat16", 3e-3, True, 700.0)
    bad = SmokeResult(1, "NVIDIA H100 80GB HBM3", "float32", 0.4, False, 50.0)
    findings = smoke_findings([good, bad], None, facts)
    assert findings[0].status == "ok" and "71% of the 989.4 TFLOPS datasheet peak" in findings[0].what
    assert findings[1].status == "fail" and "wrong float32 matmul" in findings[1].what
    assert smoke_findings([], "the GPU smoke test did not finish within 120 s", facts)[0].status == "fail"


def test_doctor_replays_saved_facts(cli, tmp_path) -> None:
    path = SCENARIOS[0].parent / "old_gpu_dropped.json"
    facts_path = tmp_path / "facts.json"
    facts_path.write_text(json.dumps(json.loads(path.read_text())["facts"]))
    result = cli("doctor", "--facts", str(facts_path), "--json")
    assert result.code == 1
    data = json.loads(result.stdout)
    dropped = ("this PyTorch build dropped the NVIDIA GeForce GTX 1080 Ti (compute capability 6.1; oldest "
               "compiled: sm_75)")
    assert data["ok"] is False and (data["findings"][0]["check"], data["findings"][0]["what"]) == (
        "arch_missing", dropped)
    text = cli("doctor", "--facts", str(facts_path), env={"COLUMNS": "200"})
    assert f"1   fail     {dropped}" in text.stdout


def test_doctor_on_a_broken_fact_file_is_one_error_line(cli, tmp_path) -> None:
    path = tmp_path / "facts.json"
    path.write_text("{oops")
    result = cli("doctor", "--facts", str(path))
    assert result.code == 2 and "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {path} is not valid JSON (line 1: Expecting property name enclosed in double quotes)"]


# --- half precision: the catalog decides where it knows the card ---------------------------------

def _spec(name: str, cc: str, fp32: float, fp16: float | None, tensor: float | None = None) -> GpuSpec:
    return GpuSpec(id=name.lower().replace(" ", "-"), name=name, full_name=f"NVIDIA {name}", vendor="nvidia",
                   segment="consumer", architecture="Pascal", vram_gib=8, memory_type="GDDR5",
                   memory_bandwidth_gbps=256, launch_year=2016, sources=("https://example.com",),
                   compute_capability=cc, fp32_tflops=fp32, fp16_tflops=fp16, fp16_tensor_tflops=tensor)


def _gpu(name: str, cc: str) -> GpuFact:
    return GpuFact(index=0, name=name, compute_capability=cc)


def test_slow_fp16_follows_the_matched_catalog_entry() -> None:
    catalog = Catalog([_spec("Fast Half 61", "6.1", fp32=5.0, fp16=10.0), _spec("Slow Half 60", "6.0", 5.0, 0.1),
                       _spec("No Figure 61", "6.1", fp32=5.0, fp16=None)])
    assert not slow_half_precision(_gpu("NVIDIA Fast Half 61", "6.1"), catalog), "the catalog beats the CC rule"
    assert slow_half_precision(_gpu("NVIDIA Slow Half 60", "6.0"), catalog)
    assert slow_half_precision(_gpu("NVIDIA No Figure 61", "6.1"), catalog), "no FP16 figure: the CC decides"


@pytest.mark.parametrize(("name", "cc", "slow"), [
    ("NVIDIA GeForce GTX 1080 Ti", "6.1", True),
    ("Tesla P100-PCIE-16GB", "6.0", False),
    # not in the catalog: the compute capability decides; the Jetsons run FP16 at twice the FP32 rate
    ("Quadro P4000", "6.1", True),
    ("GeForce GTX 980", "5.2", True),
    ("NVIDIA Tegra X2", "6.2", False),
    ("NVIDIA Tegra X1", "5.3", False),
])
def test_slow_fp16_with_the_shipped_catalog_and_without_an_entry(catalog, name: str, cc: str, slow: bool) -> None:
    assert slow_half_precision(_gpu(name, cc), catalog) is slow


def test_only_the_slow_card_is_warned_about() -> None:
    facts = Facts(DriverFact(True, "540.4.0", "12.6"), gpus=(_gpu("NVIDIA Tegra X2", "6.2"),
                                                              _gpu("Quadro P4000", "6.1")))
    warned = [f.what for f in diagnose(facts) if f.check == "slow_fp16"]
    assert warned == ["the Quadro P4000 (compute capability 6.1) has no fast half precision"]


def test_a_driver_without_a_cuda_version_says_unknown() -> None:
    facts = Facts(DriverFact(True, "570.133.07", None), gpus=(_gpu("NVIDIA GeForce RTX 4090", "8.9"),))
    driver = next(f for f in diagnose(facts) if f.check == "driver")
    assert driver.what == "NVIDIA driver 570.133.07 (CUDA version unknown), 1 GPU"
    assert "None" not in driver.what


def _scenario_named(name: str) -> Facts:
    return _scenario(next(path for path in SCENARIOS if path.stem == name))[0]


def test_a_driver_too_old_fix_names_the_update_once_and_one_command() -> None:
    fix = next(f.fix for f in diagnose(_scenario_named("driver_too_old")) if f.check == "driver_too_old")
    assert fix == ("install a build this driver runs: pip install torch==2.7.* --index-url "
                   "https://download.pytorch.org/whl/cu118; or update the NVIDIA driver to at least 525.60.13, "
                   "then run: pip install torch==2.14.* --index-url https://download.pytorch.org/whl/cu126")


def test_a_fix_with_a_command_and_a_driver_update_keeps_them_apart() -> None:
    """A CPU wheel on a 470 driver: the command this driver runs, then the update as a second choice."""
    facts = _scenario_named("cpu_wheel_on_gpu")
    old = dataclasses.replace(facts, driver=DriverFact(found=True, version="470.223.02", cuda_version="11.4",
                                                       source="nvml"))
    fix = next(f.fix for f in diagnose(old) if f.check == "torch_cpu_wheel")
    assert fix.startswith("pip install torch==2.7.* --index-url https://download.pytorch.org/whl/cu118; or update "
                          "the NVIDIA driver to at least 525.60.13, then run: pip install torch==2.14.*")


# --- slow is not hung -----------------------------------------------------------------------------

def _timed_out(name: str, stalled: bool, error: str | None = None) -> Facts:
    facts, _ = _scenario(SCENARIOS[0].parent / "slow_import.json")
    fact = FrameworkFact(name, installed=True, timed_out=True, stalled=stalled, last_stage=f"import {name}.core",
                         import_error=error)
    return dataclasses.replace(facts, frameworks=(fact,))


@pytest.mark.parametrize("name", ["torch", "tensorflow", "jax"])
@pytest.mark.parametrize(("stalled", "status"), [(False, "warn"), (True, "fail")])
def test_a_timed_out_import_is_never_advised_a_reinstall(name: str, stalled: bool, status: str) -> None:
    (finding,) = [f for f in diagnose(_timed_out(name, stalled)) if f.check == f"{name}_import_timeout"]
    assert finding.status == status
    assert f"(last stage: import {name}.core)" in finding.what
    assert "gpufly doctor --import-timeout 300" in finding.fix
    assert f"`python -X importtime -c 'import {name}' 2>&1 | sort -t'|' -k2 -n | tail`" in finding.fix
    assert "reinstall" not in finding.fix and "pip install" not in finding.fix


def test_a_slow_import_says_slow_is_not_broken() -> None:
    error = "importing torch was still making progress at import torch.core when stopped at the 180 s limit (2 tries)"
    (finding,) = [f for f in diagnose(_timed_out("torch", False, error)) if f.check == "torch_import_timeout"]
    assert finding.what == error and "slow is not broken" in finding.why


# --- minor-version compatibility, mixed GPUs, an old driver -------------------------------------------

def test_a_build_that_runs_by_minor_compat_is_ok_with_its_caveat() -> None:
    facts, _ = _scenario(SCENARIOS[0].parent / "minor_compat_sass.json")
    (finding,) = [f for f in diagnose(facts) if f.check == "minor_compat"]
    assert finding.status == "ok"
    assert finding.what == ("driver 580.82.07 (it reports CUDA 13.0) runs PyTorch's CUDA 13.2 through minor-version "
                            "compatibility: the build has native code for NVIDIA GeForce RTX 4090 (sm_86)")
    assert "no PTX JIT is needed; features of the newer CUDA minor that need the newer driver are unavailable" \
        in finding.why


def test_a_build_the_gpu_runs_only_from_ptx_fails_under_minor_compat() -> None:
    facts, _ = _scenario(SCENARIOS[0].parent / "minor_compat_ptx.json")
    (finding,) = [f for f in diagnose(facts) if f.status == "fail"]
    assert finding.check == "minor_compat_ptx" and "only PTX (compute_75)" in finding.what
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in finding.why
    assert finding.fix == ("install a build with native code for it: pip install torch==2.14.* --index-url "
                           "https://download.pytorch.org/whl/cu132; or update the NVIDIA driver to one that reports "
                           "CUDA 13.2 or newer, which can JIT-compile that PTX")


def test_mixed_gpus_say_so_with_a_build_and_a_cuda_visible_devices_per_gpu() -> None:
    facts, _ = _scenario(SCENARIOS[0].parent / "mixed_gpus.json")
    (finding,) = [f for f in diagnose(facts) if f.check == "mixed_gpus"]
    assert finding.what == ("no torch build has native code for every GPU here: NVIDIA GeForce RTX 5090 (GPU 0, "
                            "12.0), NVIDIA GeForce GTX 1080 Ti (GPU 1, 6.1)")
    index = "https://download.pytorch.org/whl/"
    assert finding.fix == (f"for the NVIDIA GeForce RTX 5090 (GPU 0, 12.0), run with CUDA_DEVICE_ORDER=PCI_BUS_ID "
                           f"CUDA_VISIBLE_DEVICES=0: pip install torch==2.14.* --index-url {index}cu132; for the "
                           f"NVIDIA GeForce GTX 1080 Ti (GPU 1, 6.1), run with CUDA_DEVICE_ORDER=PCI_BUS_ID "
                           f"CUDA_VISIBLE_DEVICES=1: pip install torch==2.14.* --index-url {index}cu126")


def test_an_old_driver_is_a_finding_with_nothing_installed() -> None:
    facts, _ = _scenario(SCENARIOS[0].parent / "old_driver_nothing_installed.json")
    assert facts.frameworks == ()
    (finding,) = [f for f in diagnose(facts) if f.check == "driver_old"]
    assert finding.status == "warn"
    assert finding.what == ("NVIDIA driver 535.54.03 is too old for the newest torch builds with code for these GPUs "
                            "(they need 580 or newer)")
    assert finding.fix.startswith("update the NVIDIA driver to at least 580, then run: ")


def test_a_driver_that_runs_only_a_legacy_build_is_noted() -> None:
    facts, _ = _scenario(SCENARIOS[0].parent / "healthy_gpu.json")
    (finding,) = [f for f in diagnose(facts) if f.check == "driver_old"]
    assert finding.status == "ok"
    assert finding.what.startswith("NVIDIA driver 570.133.07 runs only the legacy cu126 build of torch 2.14")
    assert finding.fix == "update the NVIDIA driver to 580 or newer before the next torch release"


def test_a_gpu_no_current_build_has_is_not_blamed_on_the_driver() -> None:
    """A GTX 1080 Ti gets torch 2.14's legacy CUDA 12.6 build on any driver: its card, not its driver, ages out."""
    facts, _ = _scenario(SCENARIOS[0].parent / "old_gpu_dropped.json")
    assert not [f for f in diagnose(facts) if f.check == "driver_old"]


# --- the facts a bug report needs ----------------------------------------------------------------

def test_summary_names_a_cuda_library_loaded_from_outside_the_wheel() -> None:
    facts, _ = _scenario(SCENARIOS[0].parent / "minor_compat_sass.json")
    torch = dataclasses.replace(facts.frameworks[0], libraries=(
        "/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/local/cuda-12.4/lib64/libcudnn_graph.so.9"))
    lines = dict(summary_lines(dataclasses.replace(facts, frameworks=(torch,))))
    assert lines["torch"] == ("2.14.0+cu132: CUDA runtime 13.2 (in the wheel), cuDNN 9.13.0 and NCCL 2.28.3 loaded; "
                              "loaded from outside the Python packages: /usr/local/cuda-12.4/lib64/libcudnn_graph.so.9")


def test_summary_says_only_what_was_found() -> None:
    facts = Facts(driver=DriverFact(found=False))
    assert summary_lines(facts) == []
    arm = dataclasses.replace(facts, system=SystemFact(cpu=CpuFact(model="Neoverse-V2", flags=("asimd", "sve"))))
    assert summary_lines(arm) == [("CPU", "Neoverse-V2; SVE yes")]
    unread = dataclasses.replace(facts, system=SystemFact(cpu=CpuFact(model="Apple M3 Max")))
    assert summary_lines(unread) == [("CPU", "Apple M3 Max")], "flags not read are not said to be absent"
