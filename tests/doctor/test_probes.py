"""Probes against recorded NVML, nvidia-smi, nvcc, header and /proc answers; and once against this machine."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpufly.doctor import framework_probe
from gpufly.doctor.facts import DriverFact, Facts, FrameworkFact
from gpufly.doctor.probes import (
    ImportLimits,
    probe_all,
    probe_driver_and_gpus,
    probe_env,
    probe_frameworks,
    probe_system,
    probe_toolkit,
)
from gpufly.errors import GpuflyError
from gpufly.hw.fake_nvml import FakePynvml
from tests.fakes.nvml import fake_nvml

PROBES = Path(__file__).parent.parent / "fixtures" / "doctor" / "probes"
GIB = 1024**3
MIB = 1024**2


def no_nvml() -> FakePynvml:
    return FakePynvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


class Replay:
    """A fake ``subprocess.run`` answering from recorded outputs, keyed by the command's first two words.

    An answer is (returncode, stdout), an exception to raise, or a list of those given in turn.
    """

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((args, kwargs))
        key = " ".join(args[:2]).split("=")[0]
        answer = self.answers.get(key, self.answers.get(args[0], FileNotFoundError(args[0])))
        if isinstance(answer, list):
            answer = answer.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        code, stdout = answer
        return subprocess.CompletedProcess(args, code, stdout, "")


def smi(name: str, gpu_fixture: str | None = None) -> Replay:
    """nvidia-smi as recorded on one machine: fixtures smi_NAME_{query_gpu.csv,compute_apps.csv,header.txt}."""
    def text(suffix: str) -> str:
        return (PROBES / f"smi_{name}_{suffix}").read_text()

    return Replay({
        "nvidia-smi --query-gpu": (0, text("query_gpu.csv") if gpu_fixture is None else gpu_fixture),
        "nvidia-smi --query-compute-apps": (0, text("compute_apps.csv")),
        "nvidia-smi": (0, text("header.txt")),
    })


# Driver and GPUs through NVML -------------------------------------------------------------------


def test_nvml_gives_driver_gpus_links_and_processes() -> None:
    driver, gpus = probe_driver_and_gpus(fake_nvml("hw/nvml_degraded_pcie.json"),
                                         run=Replay({}))
    assert driver == DriverFact(found=True, version="550.54.15", cuda_version="12.4", source="nvml")
    a6000, a100 = gpus
    assert (a6000.name, a6000.compute_capability, a6000.memory_total_bytes) == ("NVIDIA RTX A6000", "8.6", 51527024640)
    assert a6000.memory_free_bytes == 38325026816
    assert (a6000.mig_mode, a6000.persistence_mode) == (None, True)
    assert [(p.pid, p.name, p.used_memory_bytes) for p in a6000.processes] == [(48213, "/usr/bin/python3", 13153337344)]
    assert (a100.pcie_gen_current, a100.pcie_gen_max, a100.pcie_width_current, a100.pcie_width_max) == (3, 4, 8, 16)
    assert (a100.mig_mode, a100.persistence_mode, a100.processes) == (False, False, ())


def test_nvml_lost_gpu_and_unsupported_fields_are_none() -> None:
    _, gpus = probe_driver_and_gpus(fake_nvml("nvml_two_gpus.json", lost=(1,)), run=Replay({}))
    h100, lost = gpus
    assert (h100.name, h100.compute_capability, h100.memory_total_bytes) == ("NVIDIA H100 80GB HBM3", "9.0",
                                                                              85520809984)
    assert h100.pcie_gen_current is None and h100.processes == ()
    assert "lost" in lost.name and lost.memory_total_bytes is None


def test_nvml_answers_first_so_nvidia_smi_is_not_run() -> None:
    run = smi("rtx4090")
    probe_driver_and_gpus(fake_nvml("hw/nvml_degraded_pcie.json"), run=run)
    assert run.calls == []


# Driver and GPUs through nvidia-smi ---------------------------------------------------------------


def test_rtx4090_from_nvidia_smi() -> None:
    driver, gpus = probe_driver_and_gpus(no_nvml(), run=smi("rtx4090"))
    assert driver == DriverFact(found=True, version="550.54.14", cuda_version="12.4", source="nvidia-smi")
    (gpu,) = gpus
    assert (gpu.index, gpu.name, gpu.compute_capability) == (0, "NVIDIA GeForce RTX 4090", "8.9")
    assert (gpu.memory_total_bytes, gpu.memory_free_bytes) == (24564 * MIB, 23713 * MIB)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max, gpu.pcie_width_current, gpu.pcie_width_max) == (1, 4, 16, 16)
    assert (gpu.mig_mode, gpu.persistence_mode, gpu.processes) == (None, False, ())


def test_dual_a100_from_nvidia_smi_with_a_process() -> None:
    driver, gpus = probe_driver_and_gpus(no_nvml(), run=smi("dual_a100"))
    assert (driver.version, driver.cuda_version) == ("535.154.05", "12.2")
    assert [g.name for g in gpus] == ["NVIDIA A100-SXM4-80GB"] * 2
    assert [(g.mig_mode, g.persistence_mode, g.memory_total_bytes) for g in gpus] == [(False, True, 80 * GIB)] * 2
    assert gpus[0].processes == ()
    assert [(p.pid, p.name, p.used_memory_bytes) for p in gpus[1].processes] == [(30517, "/opt/conda/bin/python",
                                                                                  17944 * MIB)]


def test_old_driver_without_compute_cap_is_queried_again_without_it() -> None:
    run = Replay({
        "nvidia-smi --query-gpu": [(2, (PROBES / "smi_r470_invalid_field.txt").read_text()),
                                   (0, (PROBES / "smi_gtx1080ti_r470_query_gpu.csv").read_text())],
        "nvidia-smi --query-compute-apps": (0, ""),
        "nvidia-smi": (0, (PROBES / "smi_r470_header.txt").read_text()),
    })
    driver, gpus = probe_driver_and_gpus(no_nvml(), run=run)
    assert (driver.found, driver.version, driver.cuda_version) == (True, "470.182.03", "11.4")
    assert (gpus[0].name, gpus[0].compute_capability, gpus[0].pcie_gen_max) == ("NVIDIA GeForce GTX 1080 Ti", None, 3)
    queries = [args[1] for args, _ in run.calls if args[1:2] and args[1].startswith("--query-gpu=")]
    assert "compute_cap" in queries[0] and "compute_cap" not in queries[1]


def test_every_command_has_a_timeout() -> None:
    run = smi("dual_a100")
    probe_driver_and_gpus(no_nvml(), run=run)
    probe_toolkit(run=run, environ={}, system_include_dirs=())
    assert len(run.calls) >= 4
    assert all(kwargs["timeout"] == 5.0 for _, kwargs in run.calls)


def test_no_nvml_and_no_nvidia_smi_says_both() -> None:
    driver, gpus = probe_driver_and_gpus(no_nvml(), run=Replay({}))
    assert gpus == [] and not driver.found
    assert driver.error == "NVML library not found (no NVIDIA driver installed); nvidia-smi not on PATH"


def test_driver_not_loaded_is_named() -> None:
    nvml = FakePynvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    driver, _ = probe_driver_and_gpus(nvml, run=Replay({"nvidia-smi": (9, (PROBES / "smi_driver_not_loaded.txt")
                                                                       .read_text())}))
    assert not driver.found and "not loaded" in driver.error and "couldn't communicate" in driver.error


GARBLED = {
    "too few columns": ((0, "0, NVIDIA GeForce RTX 4090, 550.54.14\n"), "line 1 has 3 field(s), expected 13"),
    "too many columns": ((0, (PROBES / "smi_rtx4090_query_gpu.csv").read_text().strip() + ", 42\n"),
                         "line 1 has 14 field(s)"),
    "not a number": ((0, "0, GPU-1, NVIDIA A100, 535.154.05, 8.0, lots, 100, 4, 4, 16, 16, Disabled, Enabled\n"),
                     "memory.total is 'lots', not a number"),
    "not a capability": ((0, "0, GPU-1, NVIDIA A100, 535.154.05, eight, 81920, 100, 4, 4, 16, 16, Disabled, On\n"),
                         "compute_cap is 'eight'"),
    "driver message with exit 0": ((0, (PROBES / "smi_driver_not_loaded.txt").read_text()), "NVIDIA driver not loaded"),
    "version mismatch": ((18, (PROBES / "smi_version_mismatch.txt").read_text()), "driver/library version mismatch"),
    "unknown failure": ((255, "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n"),
                        "nvidia-smi failed (exit 255): Unable to determine the device handle"),
    "empty output": ((0, ""), "nvidia-smi listed no GPUs"),
    "binary noise": ((0, "\x00\x7fELF\x02\x01\x01\n"), "cannot read: line 1 has 1 field(s)"),
    "hang": (subprocess.TimeoutExpired(["nvidia-smi"], 5.0), "nvidia-smi did not answer within 5 s"),
    "not executable": (PermissionError(13, "Permission denied"), "nvidia-smi could not be run"),
}


@pytest.mark.parametrize(("answer", "expected"), GARBLED.values(), ids=GARBLED.keys())
def test_garbled_nvidia_smi_is_an_error_fact(answer: tuple[int, str] | BaseException, expected: str) -> None:
    driver, gpus = probe_driver_and_gpus(no_nvml(), run=Replay({"nvidia-smi --query-gpu": answer,
                                                               "nvidia-smi": (0, "")}))
    assert (driver.found, gpus) == (False, [])
    assert driver.error.startswith("NVML library not found")
    assert expected in driver.error


def test_processes_or_header_that_fail_leave_the_gpus() -> None:
    run = Replay({"nvidia-smi --query-gpu": (0, (PROBES / "smi_dual_a100_query_gpu.csv").read_text()),
                  "nvidia-smi --query-compute-apps": (0, "GPU-x, twelve, python, 10\n"),
                  "nvidia-smi": (0, "no table here\n")})
    driver, gpus = probe_driver_and_gpus(no_nvml(), run=run)
    assert (driver.found, driver.cuda_version, len(gpus), gpus[1].processes) == (True, None, 2, ())


# Toolkit --------------------------------------------------------------------------------------


def include_dir(tmp_path: Path, headers: dict[str, str]) -> Path:
    """A CUDA_HOME-like tree whose include/ holds fixture headers under their installed names."""
    (tmp_path / "include").mkdir(parents=True, exist_ok=True)
    for target, fixture in headers.items():
        (tmp_path / "include" / target).write_text((PROBES / fixture).read_text())
    return tmp_path


def test_nvcc_release_is_read() -> None:
    run = Replay({"nvcc --version": (0, (PROBES / "nvcc_12_4.txt").read_text())})
    assert probe_toolkit(run=run, environ={}, system_include_dirs=()).nvcc_version == "12.4"


def test_nvcc_under_cuda_home_comes_first(tmp_path: Path) -> None:
    home_nvcc = str(tmp_path / "bin" / "nvcc")
    run = Replay({f"{home_nvcc} --version": (0, (PROBES / "nvcc_11_8.txt").read_text()),
                  "nvcc --version": (0, (PROBES / "nvcc_12_4.txt").read_text())})
    fact = probe_toolkit(run=run, environ={"CUDA_HOME": str(tmp_path), "PATH": "/usr/bin"}, system_include_dirs=())
    assert fact.nvcc_version == "11.8"
    assert run.calls[0][1]["env"]["CUDA_HOME"] == str(tmp_path)


def test_nvcc_missing_or_garbled_is_none() -> None:
    run = Replay({"nvcc --version": (0, "nvcc: command wrapper\n"), "/usr/local/cuda/bin/nvcc": (1, "")})
    assert probe_toolkit(run=run, environ={}, system_include_dirs=()).nvcc_version is None
    assert probe_toolkit(run=Replay({}), environ={}, system_include_dirs=()).nvcc_version is None


def test_cudnn_and_nccl_from_headers(tmp_path: Path) -> None:
    home = include_dir(tmp_path, {"cudnn_version.h": "cudnn_version_9.h", "nccl.h": "nccl_2_21.h"})
    fact = probe_toolkit(run=Replay({}), environ={"CUDA_HOME": str(home)}, system_include_dirs=())
    assert (fact.cudnn_version, fact.nccl_version) == ("9.1.0", "2.21.5")


def test_old_cudnn_h_in_a_system_dir(tmp_path: Path) -> None:
    system = include_dir(tmp_path, {"cudnn.h": "cudnn_7.h"}) / "include"
    fact = probe_toolkit(run=Replay({}), environ={"CUDA_PATH": str(tmp_path / "none")}, system_include_dirs=(system,))
    assert (fact.cudnn_version, fact.nccl_version) == ("7.6.5", None)


def test_header_without_versions_is_skipped(tmp_path: Path) -> None:
    first = tmp_path / "a" / "include"
    first.mkdir(parents=True)
    (first / "cudnn.h").write_text('#include "cudnn_version.h"\n#define CUDNN_MAJOR garbage\n')
    second = include_dir(tmp_path / "b", {"cudnn_version.h": "cudnn_version_9.h"}) / "include"
    assert probe_toolkit(run=Replay({}), environ={}, system_include_dirs=(first, second)).cudnn_version == "9.1.0"


# Environment ----------------------------------------------------------------------------------


def fake_root(tmp_path: Path, cgroup: str = "0::/\n", version: str = "Linux version 6.8.0-45-generic\n",
              markers: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A filesystem root and its /proc with just the files probe_env reads."""
    root, proc = tmp_path / "root", tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cgroup").write_text(cgroup)
    (proc / "version").write_text(version)
    for marker in markers:
        (root / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / marker).write_text("")
    return root, proc


def test_plain_linux_host(tmp_path: Path) -> None:
    root, proc = fake_root(tmp_path)
    env = probe_env(environ={"CUDA_VISIBLE_DEVICES": "0,1", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"},
                    proc_root=proc, platform_name="linux", root=root)
    assert (env.cuda_visible_devices, env.ld_library_path) == ("0,1", "/usr/local/cuda/lib64")
    assert (env.in_container, env.in_wsl, env.platform) == (False, False, "linux")
    assert env.python_version == ".".join(map(str, sys.version_info[:3]))
    assert env.machine


def test_empty_cuda_visible_devices_is_kept_apart_from_unset(tmp_path: Path) -> None:
    root, proc = fake_root(tmp_path)
    assert probe_env(environ={"CUDA_VISIBLE_DEVICES": ""}, proc_root=proc, root=root).cuda_visible_devices == ""
    assert probe_env(environ={}, proc_root=proc, root=root).cuda_visible_devices is None


CONTAINERS = {
    "dockerenv": {"markers": (".dockerenv",)},
    "podman": {"markers": ("run/.containerenv",)},
    "docker cgroup v1": {"cgroup": "12:memory:/docker/4f1b2c9e0d7a\n0::/\n"},
    "kubernetes": {"cgroup": "0::/kubepods/burstable/pod1c2d3e4f/7a8b9c\n"},
    "containerd": {"cgroup": "0::/system.slice/containerd.service/kubepods-besteffort.slice\n"},
}


@pytest.mark.parametrize("setup", CONTAINERS.values(), ids=CONTAINERS.keys())
def test_container_markers(tmp_path: Path, setup: dict[str, Any]) -> None:
    root, proc = fake_root(tmp_path, **setup)
    assert probe_env(environ={}, proc_root=proc, root=root).in_container


def test_wsl_from_proc_version_or_environment(tmp_path: Path) -> None:
    root, proc = fake_root(tmp_path, version="Linux version 5.15.153.1-microsoft-standard-WSL2 (root@941d701f84f1)\n")
    assert probe_env(environ={}, proc_root=proc, root=root).in_wsl
    assert probe_env(environ={"WSL_DISTRO_NAME": "Ubuntu"}, proc_root=tmp_path / "none", root=root).in_wsl


@pytest.mark.parametrize(("name", "expected"), [("linux", "linux"), ("win32", "windows"), ("darwin", "darwin")])
def test_platform_names(tmp_path: Path, name: str, expected: str) -> None:
    assert probe_env(environ={}, proc_root=tmp_path, platform_name=name, root=tmp_path).platform == expected


# The system, for bug reports ---------------------------------------------------------------------

CPUINFO_SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
"""
CPUINFO_GRACE = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics sve sve2 bf16 i8mm
CPU implementer\t: 0x41
"""
OS_RELEASE = 'NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\nVERSION_ID="22.04"\n'
GCC = "gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\nCopyright (C) 2021 Free Software Foundation, Inc.\n"


def files(answers: dict[str, str]) -> Callable[[Path], str]:
    return lambda path: answers.get(str(path), "")


def test_system_facts_for_a_bug_report() -> None:
    system = probe_system(run=Replay({"gcc --version": (0, GCC)}),
                          read=files({"/etc/os-release": OS_RELEASE, "/proc/cpuinfo": CPUINFO_SAPPHIRE_RAPIDS}),
                          system="Linux", release="5.15.0-105-generic", libc=("glibc", "2.35"), processor="x86_64")
    assert (system.os, system.kernel, system.libc, system.gcc_version) == (
        "Ubuntu 22.04.4 LTS", "5.15.0-105-generic", "glibc 2.35", "11.4.0")
    assert (system.cpu.model, system.cpu.logical_cores) == ("Intel(R) Xeon(R) Platinum 8480+", 2)
    assert system.cpu.flags == ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                                "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def test_arm_cpu_flags_and_a_machine_without_gcc_or_os_release() -> None:
    system = probe_system(run=Replay({}), read=files({"/proc/cpuinfo": CPUINFO_GRACE}), system="Linux",
                          release="6.8.0-1013-nvidia-64k", libc=("", ""), processor="aarch64")
    assert (system.os, system.libc, system.gcc_version) == ("Linux 6.8.0-1013-nvidia-64k", None, None)
    assert system.cpu.model == "aarch64" and system.cpu.flags == ("asimd", "sve", "sve2", "bf16", "i8mm")


def test_a_gcc_that_fails_or_hangs_is_no_version() -> None:
    for answer in [(1, "gcc: fatal error\n"), subprocess.TimeoutExpired("gcc", 5)]:
        system = probe_system(run=Replay({"gcc --version": answer}), read=files({}), system="Linux", release="",
                              libc=("glibc", "2.39"), processor="")
        assert system.gcc_version is None and system.kernel is None and system.os == "Linux"


# Frameworks -----------------------------------------------------------------------------------


class FinishedChild:
    """A child that has already finished: what ``spawn_child`` returns, replayed from recorded output."""

    def __init__(self, stdout: str = "", code: int = 0, stderr: str = "") -> None:
        self.stdout, self.stderr, self.returncode = io.StringIO(stdout), io.StringIO(stderr), code

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def kill(self) -> None:
        raise AssertionError("a finished child is never stopped")


class Spawner:
    """A fake ``spawn``: answers each framework probe with the next child in turn, and counts the starts."""

    def __init__(self, *children: Callable[[], Any]) -> None:
        self.children = list(children)
        self.started: list[list[str]] = []

    def __call__(self, argv: list[str]) -> Any:
        assert argv[1] == "-c" and argv[3] in ("torch", "tensorflow", "jax")
        self.started.append(argv)
        return self.children.pop(0)() if len(self.children) > 1 else self.children[0]()


def child(stdout: str = "", code: int = 0, stderr: str = "") -> Spawner:
    return Spawner(lambda: FinishedChild(stdout, code, stderr))


class ScriptedChild:
    """A child still running: it writes each line after its pause, then exits, or waits until it is stopped
    (``then_hang``). Its pauses are real time, since the watcher waits on real pipes; tests use short ones and
    generous limits, and assert on what was reported, never on how long it took."""

    def __init__(self, lines: list[tuple[float, str]], then_hang: bool = False) -> None:
        self.killed = threading.Event()
        self.returncode: int | None = None
        self.stdout, self.stderr = self._lines(lines, then_hang), io.StringIO("")

    def _lines(self, lines: list[tuple[float, str]], then_hang: bool) -> Iterator[str]:
        for pause, line in lines:
            if self.killed.wait(pause):
                return
            yield line + "\n"
        if then_hang:
            self.killed.wait()
        else:
            self.returncode = 0

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9
        self.killed.set()


PROGRESS = framework_probe.PROGRESS
RESULT = framework_probe.MARKER + json.dumps({"name": "torch", "installed": True, "version": "2.5.1"})


def slow_import() -> ScriptedChild:
    """Makes progress every 0.05 s for half a second, then answers."""
    return ScriptedChild([*((0.05, f"{PROGRESS}import torch.m{i}") for i in range(10)), (0.0, RESULT)])


def hung_import() -> ScriptedChild:
    """Reports one stage, then waits for ever."""
    return ScriptedChild([(0.0, f"{PROGRESS}import torch._C")], then_hang=True)


def endless_import() -> ScriptedChild:
    """Makes progress for ever."""
    return ScriptedChild([(0.02, f"{PROGRESS}import torch.x")] * 100_000)
GENEROUS = ImportLimits(patience_s=0.1, stall_s=30.0, cap_s=120.0)
"""A busy machine's limits, scaled: past the patience, only progress keeps a child going."""


def everything_found(name: str) -> object:
    return object()


DEFAULT_LIMITS = ImportLimits()


def one(spawn: Any, name: str = "torch", limits: ImportLimits = DEFAULT_LIMITS) -> FrameworkFact:
    (fact,) = probe_frameworks(spawn=spawn, names=(name,), find_spec=everything_found, limits=limits)
    return fact


def test_result_line_after_noise_is_read() -> None:
    result = {"name": "torch", "installed": True, "version": "2.5.1+cu124", "cuda_version": "12.4",
              "cudnn_version": "9.1.0", "nccl_version": "2.21.5", "gpu_available": True, "device_count": 2,
              "arch_list": ["sm_80", "sm_90"], "distribution": "torch", "something_new": 1,
              "libraries": ["/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9"]}
    fact = one(child(f"warming up\n{PROGRESS}import torch\n" + framework_probe.MARKER + json.dumps(result) + "\n"))
    assert fact == FrameworkFact("torch", installed=True, version="2.5.1+cu124", distribution="torch",
                                 cuda_version="12.4", cudnn_version="9.1.0", nccl_version="2.21.5",
                                 gpu_available=True, device_count=2, arch_list=("sm_80", "sm_90"),
                                 libraries=("/venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9",))


def test_a_slow_import_that_keeps_making_progress_gets_more_time() -> None:
    spawn = Spawner(slow_import)
    fact = one(spawn, limits=GENEROUS)
    assert (fact.version, fact.timed_out, fact.import_error) == ("2.5.1", False, None)
    assert len(spawn.started) == 1


def test_a_hung_import_is_stalled_after_one_retry_with_the_stage_it_stopped_at() -> None:
    spawn = Spawner(hung_import)
    fact = one(spawn, "tensorflow", ImportLimits(patience_s=0.1, stall_s=0.2, cap_s=120.0, retries=1))
    assert len(spawn.started) == 2
    assert (fact.installed, fact.timed_out, fact.stalled, fact.last_stage) == (True, True, True, "import torch._C")
    assert fact.import_error.startswith("importing tensorflow made no progress for 0.2 s at import torch._C and "
                                        "was stopped after ")
    assert fact.import_error.endswith(" s (2 tries)")


def test_an_import_still_moving_at_the_cap_is_slow_not_stalled() -> None:
    fact = one(Spawner(endless_import), limits=ImportLimits(patience_s=0.1, stall_s=30.0, cap_s=0.3, retries=0))
    assert (fact.timed_out, fact.stalled, fact.last_stage) == (True, False, "import torch.x")
    assert fact.import_error == "importing torch was still making progress at import torch.x when stopped at the " \
                                "0.3 s limit"


def test_the_retry_after_a_stall_can_succeed() -> None:
    spawn = Spawner(hung_import, lambda: FinishedChild(RESULT + "\n"))
    fact = one(spawn, limits=ImportLimits(patience_s=0.1, stall_s=0.2, cap_s=120.0))
    assert (fact.version, fact.timed_out) == ("2.5.1", False)
    assert len(spawn.started) == 2


def test_an_answer_counts_even_when_the_child_then_hangs_on_exit() -> None:
    spawn = Spawner(lambda: ScriptedChild([(0.0, RESULT)], then_hang=True))
    fact = one(spawn, limits=ImportLimits(patience_s=0.1, stall_s=0.2, cap_s=120.0))
    assert (fact.version, fact.timed_out, len(spawn.started)) == ("2.5.1", False, 1)


def test_import_timeout_must_be_positive() -> None:
    assert ImportLimits().with_cap(300) == ImportLimits(patience_s=20.0, stall_s=30.0, cap_s=300, retries=1)
    assert ImportLimits().with_cap(5).patience_s == 5
    with pytest.raises(GpuflyError, match="--import-timeout must be a positive number of seconds, got 0"):
        ImportLimits().with_cap(0)


def test_segfault_is_a_crash_fact() -> None:
    fact = one(child(code=-11, stderr="Fatal Python error: Segmentation fault\n"), "jax")
    assert (fact.installed, fact.timed_out) == (True, False)
    assert fact.import_error == "crashed with SIGSEGV while importing jax: Fatal Python error: Segmentation fault"


def test_import_error_exit_shows_the_last_stderr_line() -> None:
    stderr = "Traceback (most recent call last):\n  ...\nImportError: libcudnn.so.8: cannot open shared object file\n"
    fact = one(child(code=1, stderr=stderr))
    assert fact.import_error == ("exited with code 1 while importing torch: "
                                 "ImportError: libcudnn.so.8: cannot open shared object file")


def test_windows_crash_code_is_hex() -> None:
    assert "exited with code 0xC0000005" in one(child(code=3221225477)).import_error


@pytest.mark.parametrize("stdout", ["garbage\n", "", framework_probe.MARKER + "{not json\n",
                                    framework_probe.MARKER + "[1, 2]\n"])
def test_garbage_stdout_is_an_error_fact(stdout: str) -> None:
    fact = one(child(stdout))
    assert fact.installed and fact.version is None
    assert fact.import_error.startswith("the import probe for torch printed")


def test_unfindable_framework_starts_no_child() -> None:
    def never(argv: list[str]) -> Any:
        raise AssertionError("no child should start")
    facts = probe_frameworks(spawn=never, find_spec=lambda name: None)
    assert facts == [FrameworkFact(name, installed=False) for name in ("torch", "tensorflow", "jax")]


def test_python_that_cannot_start() -> None:
    (fact,) = probe_frameworks(python="/nowhere/python", names=("torch",))
    assert not fact.installed and "could not start /nowhere/python" in fact.import_error


def test_child_reports_a_missing_framework_as_not_installed() -> None:
    (fact,) = probe_frameworks(names=("jax",), find_spec=everything_found)  # the dev extras install no JAX
    assert fact == FrameworkFact("jax", installed=False)


def test_framework_probe_usage_and_library_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert framework_probe.main(["numpy"]) == 2
    assert "usage: framework_probe {torch,tensorflow,jax}" in capsys.readouterr().err
    assert [framework_probe._cudnn_text(v) for v in (90100, 8902, 7605, None)] == ["9.1.0", "8.9.2", "7.6.5", None]
    assert [framework_probe._nccl_text(v) for v in ((2, 21, 5), 2708, 22105, None)] == \
        ["2.21.5", "2.7.8", "2.21.5", None]


FAKE_TORCH = """
import time, types
time.sleep(0.6)
import email.mime.text
__version__ = "2.13.0+cpu"
version = types.SimpleNamespace(cuda=None)
backends = types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: None))
cuda = types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0, get_arch_list=lambda: [])
"""


def test_the_child_reports_its_stages_before_its_answer(tmp_path: Path) -> None:
    """The modules it imports (at most one line per half second) and each CUDA call, then the answer."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    done = subprocess.run([sys.executable, "-c", Path(framework_probe.__file__).read_text(), "torch"],
                          capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    lines = done.stdout.splitlines()
    stages = [line[len(PROGRESS):] for line in lines if line.startswith(PROGRESS)]
    assert stages[0] == "import torch"
    assert any(stage.startswith("import email") for stage in stages), stages
    assert stages[-3:] == ["torch.cuda.is_available()", "torch.cuda.device_count()", "torch.cuda.get_arch_list()"]
    assert json.loads(lines[-1][len(framework_probe.MARKER):])["version"] == "2.13.0+cpu"


def test_an_answer_with_a_wrong_value_is_an_error_fact() -> None:
    result = {"name": "torch", "installed": True, "version": "2.5.1", "arch_list": "sm_80"}
    fact = one(child(framework_probe.MARKER + json.dumps(result) + "\n"))
    assert fact.installed and fact.version is None
    assert fact.import_error == ("the import probe for torch: arch_list must be a list, got \"sm_80\" "
                                 "(gpufly could not use its answer)")


def test_windows_tensorflow_versions_are_dotted() -> None:
    assert [framework_probe._dll_version(v, cuda=True) for v in ("64_112", "12.5.1", None)] == ["11.2", "12.5.1", None]
    assert framework_probe._dll_version("64_8", cuda=False) == "8"


def test_without_a_gpu_each_framework_is_still_imported_in_a_child() -> None:
    spawn = child(code=-6)
    facts = probe_all(nvml=no_nvml(), run=Replay({}), spawn=spawn)
    assert facts.gpus == () and "torch" in [argv[3] for argv in spawn.started]
    torch = facts.framework("torch")
    assert torch is not None and torch.import_error == "crashed with SIGABRT while importing torch"
    spawn.started.clear()
    fast = probe_all(nvml=no_nvml(), run=Replay({}), spawn=spawn, import_frameworks=False)
    assert spawn.started == [] and fast.framework("torch").import_error is None


# This machine ---------------------------------------------------------------------------------


def test_real_frameworks_on_this_machine() -> None:
    torch, tensorflow, jax = probe_frameworks()
    assert (torch.installed, torch.import_error, torch.distribution) == (True, None, "torch")
    assert (torch.cuda_version, torch.gpu_available, torch.device_count, torch.arch_list) == (None, False, 0, ())
    assert torch.version and torch.version.startswith("2.")
    # The dev extras install TensorFlow (gpufly.keras is tested with it): PyPI's Linux build, made with CUDA, on a
    # machine with no GPU.
    assert (tensorflow.installed, tensorflow.import_error, tensorflow.distribution) == (True, None, "tensorflow")
    assert tensorflow.version and tensorflow.version.startswith("2.")
    assert (tensorflow.gpu_available, tensorflow.device_count) == (False, 0)
    assert jax == FrameworkFact("jax", installed=False)


def test_probing_frameworks_does_not_import_them_here() -> None:
    code = ("import sys; from gpufly.doctor.probes import probe_frameworks; probe_frameworks(); "
            "print(sorted(m for m in ('torch', 'tensorflow', 'jax') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_real_probe_all_on_this_machine() -> None:
    start = time.perf_counter()
    facts = probe_all()
    elapsed = time.perf_counter() - start
    print(f"probe_all took {elapsed:.2f} s")
    assert isinstance(facts, Facts)
    assert not facts.driver.found and facts.driver.error
    assert facts.gpus == ()
    assert facts.framework("torch") is not None
    assert facts.collected_at and facts.collected_at.endswith("+00:00")
    assert facts.env.platform == "linux"
    assert json.loads(json.dumps(facts.to_dict()))["schema_version"] == 2
    assert facts.system.os and facts.system.cpu.model
