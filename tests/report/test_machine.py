"""`gpufly report`'s machine section with a faked two-GPU host and on a host without a driver."""

from __future__ import annotations

import json

import pynvml

from gpufly.hw import Nvml
from gpufly.hw.fake_nvml import FakePynvml
from gpufly.hw.host import HostFacts, cpu_model
from gpufly.report.machine import probe_machine
from tests.fakes.nvml import fake_nvml, nvml_env

HOST = HostFacts(os="Debian GNU/Linux 12 (bookworm)", kernel="Linux 6.1.0", machine="x86_64",
                 python="3.11.7", cpu_model="AMD EPYC 9454 48-Core Processor", cpu_physical_cores=48,
                 cpu_logical_cores=96, memory_total_bytes=512 * 2**30, memory_available_bytes=480 * 2**30)


def test_gpus_are_matched_to_the_catalog() -> None:
    report = probe_machine(Nvml(fake_nvml("nvml_two_gpus.json")), host=HOST)
    assert [gpu.spec.id for gpu in report.gpus] == ["h100-sxm", "a100-sxm4-80gb"]
    assert report.driver_version == "550.54.15"
    assert report.summary.startswith("2 NVIDIA GPUs: NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-80GB")
    data = report.to_dict()
    assert data["gpus"][0]["catalog_id"] == "h100-sxm"
    assert data["gpus"][1]["memory_total_bytes"] == 85899345920
    json.dumps(data)


def test_no_driver_says_so_and_describes_the_cpu() -> None:
    report = probe_machine(Nvml(FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)), host=HOST)
    assert report.gpus == []
    assert report.summary == ("no NVIDIA GPU found (NVML library not found (no NVIDIA driver installed)); "
                              "CPU: AMD EPYC 9454 48-Core Processor")


def test_cpu_model_reads_proc_cpuinfo(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\n"
                       "model name\t: Intel(R) Xeon(R) Gold 6338\n")
    assert cpu_model(cpuinfo) == "Intel(R) Xeon(R) Gold 6338"


def test_report_command_on_this_machine(cli) -> None:
    result = cli("report", "--json")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    machine = data["machine"]
    assert all(finding["status"] in ("ok", "warn", "fail") for finding in data["setup"]["findings"])
    assert machine["host"]["cpu_logical_cores"] >= 1
    assert machine["host"]["memory_total_bytes"] > 0
    if not machine["gpus"]:
        assert machine["summary"].startswith("no NVIDIA GPU found")
    text = cli("report")
    assert text.code == 0, text.stderr
    for heading in ("This machine", "Set-up:", "What it reaches:", "What to do next"):
        assert heading in text.stdout


def test_rendered_report_names_each_gpu_and_its_catalog_entry() -> None:
    from rich.console import Console

    from gpufly.cli.report import render_machine

    report = probe_machine(Nvml(fake_nvml("nvml_two_gpus.json")), host=HOST)
    out = Console(width=120, record=True, color_system=None)
    render_machine(report, out)
    text = out.export_text()
    assert "AMD EPYC 9454 48-Core Processor: 48 cores, 96 threads" in text
    assert "550.54.15" in text and "12.4" in text
    assert "H100 SXM" in text and "A100 80GB SXM" in text
    assert "79.6 GiB" in text


def test_report_says_which_models_fit_the_gpus_found() -> None:
    from gpufly.report.models_fit import JOB_KINDS, model_fit_rows

    report = probe_machine(Nvml(fake_nvml("nvml_two_gpus.json")), host=HOST)
    types = report.gpu_types()
    assert [(spec.id, count) for spec, count in types] == [("h100-sxm", 1), ("a100-sxm4-80gb", 1)]
    rows = model_fit_rows(types, models=("qwen2.5-3b",))
    assert len(rows) == 2 * len(JOB_KINDS)
    assert all(row.fits for row in rows if row.task != "full")

    def speed(gpu: str, job: str) -> float:
        value = next(r.speed for r in rows if r.gpu == gpu and r.job == job)
        assert value is not None
        return value

    assert speed("H100 SXM", "infer Q4_K_M") > speed("A100 80GB SXM", "infer Q4_K_M"), "more bandwidth decodes faster"
    assert speed("H100 SXM", "infer bf16") == speed("A100 80GB SXM", "infer bf16"), \
        "a 3B model in eager transformers is host-bound"
    assert speed("H100 SXM", "LoRA") > speed("A100 80GB SXM", "LoRA"), "training is compute-bound"


def test_a_lost_gpu_is_listed_without_a_catalog_match() -> None:
    report = probe_machine(Nvml(fake_nvml("nvml_two_gpus.json", lost=(1,))), host=HOST)
    h100, lost = report.gpus
    assert h100.spec is not None and h100.spec.id == "h100-sxm"
    assert lost.device.lost and lost.spec is None and lost.to_dict()["catalog_id"] is None


def test_report_reads_a_recorded_machine_through_the_nvml_fixture(cli) -> None:
    result = cli("report", "--json", env=nvml_env("nvml_two_gpus.json"))
    assert result.code == 0, result.stderr
    gpus = json.loads(result.stdout)["machine"]["gpus"]
    assert [(gpu["name"], gpu["catalog_id"]) for gpu in gpus] == [("NVIDIA H100 80GB HBM3", "h100-sxm"),
                                                                 ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb")]
