"""Two install cases checked by hand against the tables: a newer CUDA minor on an older driver of its major
(minor-version compatibility, which needs native code for the GPU), and GPUs no single build serves."""

from __future__ import annotations

import pytest

import gpufly.doctor.install.torch as torch_planner
from gpufly.doctor.compat import TorchRelease, TorchVariant, torch_release
from gpufly.doctor.facts import DriverFact, GpuFact
from gpufly.doctor.install import choose_torch
from gpufly.doctor.install.torch import builds_per_gpu

RTX_4090 = GpuFact(index=0, name="NVIDIA GeForce RTX 4090", compute_capability="8.9")
RTX_5090 = GpuFact(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")
GTX_1080_TI = GpuFact(index=1, name="NVIDIA GeForce GTX 1080 Ti", compute_capability="6.1")
V100 = GpuFact(index=1, name="Tesla V100-PCIE-16GB", compute_capability="7.0")
DRIVER_580 = DriverFact(found=True, version="580.82.07", cuda_version="13.0", source="nvml")
DRIVER_570 = DriverFact(found=True, version="570.133.07", cuda_version="12.8", source="nvml")
INDEX = "https://download.pytorch.org/whl/"


# --- minor-version compatibility ----------------------------------------------------------------

def test_the_tables_say_580_runs_cuda_13_0_and_torch_2_14_has_a_cuda_13_2_build_with_sm_86() -> None:
    """The premises of the case, from the shipped tables rather than assumed."""
    builds = {v.name: v for v in torch_release("2.14").variants}
    assert (builds["cu130"].cuda, builds["cu132"].cuda) == ("13.0", "13.2")
    assert "sm_86" in builds["cu132"].arch_list and "sm_89" not in builds["cu132"].arch_list


def test_rtx_4090_on_580_gets_torch_2_14s_newest_cuda_13_build_with_the_caveat() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580)
    assert plan.command == f"pip install torch==2.14.* --index-url {INDEX}cu132"
    assert "runs through minor-version compatibility" in plan.reason and "sm_86" in plan.reason
    (note,) = plan.warnings
    assert "driver 580.82.07 runs CUDA 13.2 only through minor-version compatibility" in note
    assert "no PTX JIT is needed" in note and "features of the newer CUDA minor that need the newer driver" in note
    assert not any("cu132" in line for line in plan.rejected)
    (native,) = plan.alternatives
    assert native.command == f"pip install torch==2.14.* --index-url {INDEX}cu130"
    assert "runs natively" in native.why


def test_a_build_the_gpu_would_run_only_from_ptx_does_not_qualify(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release whose CUDA 13.2 build has only PTX for the RTX 4090 (sm_75 + compute_75): driver 580 cannot
    JIT-compile PTX from the newer toolkit, so the CUDA 13.0 build, which it runs natively, is the choice."""
    ptx_only = ("sm_75", "compute_75")
    variants = tuple(TorchVariant("2.14", name, cuda, "stable", "https://example.org/build", INDEX + name,
                                  arch_list=ptx_only) for name, cuda in (("cu130", "13.0"), ("cu132", "13.2")))
    release = TorchRelease("2.14", "3.10", "3.15", variants, "https://example.org/release")
    monkeypatch.setattr(torch_planner, "torch_releases", lambda: (release,))
    plan = choose_torch([RTX_4090], DRIVER_580)
    assert plan.variant == "cu130" and "natively" in plan.reason
    (rejected,) = plan.rejected
    assert rejected.startswith("cu132: driver 580.82.07 runs CUDA 13.2 only through minor-version compatibility, "
                               "which cannot JIT-compile the build's PTX for NVIDIA GeForce RTX 4090 (8.9)")
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in rejected


def test_an_older_driver_of_the_same_major_keeps_a_newer_minor_with_native_code() -> None:
    """Driver 560 (CUDA 12.6) and torch 2.11: the CUDA 12.8 build has sm_86 for the RTX 4090."""
    plan = choose_torch([RTX_4090], DriverFact(found=True, version="560.35.03"), release="2.11")
    assert plan.variant == "cu128"
    assert any("a driver >= 570.26 runs it natively" in note for note in plan.warnings)
    assert [alt.command for alt in plan.alternatives] == [f"pip install torch==2.11.* --index-url {INDEX}cu126"]


# --- mixed GPUs ---------------------------------------------------------------------------------

def test_rtx_5090_beside_gtx_1080_ti_gets_a_build_per_gpu() -> None:
    plan = choose_torch([RTX_5090, GTX_1080_TI], DRIVER_580)
    assert plan.command == f"pip install torch==2.14.* --index-url {INDEX}cu132"
    assert plan.reason.startswith("no torch build has native code for every GPU here (NVIDIA GeForce RTX 5090 "
                                  "(GPU 0, 12.0), NVIDIA GeForce GTX 1080 Ti (GPU 1, 6.1))")
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0, so that CUDA sees only it" in plan.advice
    assert (f"for the NVIDIA GeForce GTX 1080 Ti (GPU 1, 6.1), in another virtual environment: pip install "
            f"torch==2.14.* --index-url {INDEX}cu126, run with CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1"
            ) in plan.advice
    for_1080_ti, joint, _ = plan.alternatives
    assert for_1080_ti.command == f"pip install torch==2.14.* --index-url {INDEX}cu126"
    assert joint.command == f"pip install torch==2.5.* --index-url {INDEX}cu124"
    assert "only as PTX (compute_90) that the driver JIT-compiles on first use" in joint.why
    assert any("1080 Ti (GPU 1, 6.1) cannot run CUDA code" in w for w in plan.warnings)


def test_a_build_that_jit_compiles_for_one_card_is_never_the_plan_and_is_labelled() -> None:
    for driver in (DRIVER_580, DRIVER_570):
        plan = choose_torch([RTX_5090, GTX_1080_TI], driver)
        assert plan.release != "2.5"
        labelled = [alt for alt in plan.alternatives if alt.command.endswith("cu124")]
        assert labelled and all("JIT-compiles" in alt.why for alt in labelled)


def test_the_newest_gpu_comes_first_and_an_old_driver_is_named() -> None:
    """Driver 570: the RTX 5090's torch 2.14 builds need 580; meanwhile torch 2.11 cu128 runs it."""
    plan = choose_torch([GTX_1080_TI, RTX_5090], DRIVER_570)
    assert plan.command == f"pip install torch==2.11.* --index-url {INDEX}cu128"
    assert plan.needs_driver == "580"
    assert plan.advice.startswith("update the NVIDIA driver to at least 580, then run: ")
    assert "CUDA_VISIBLE_DEVICES=0, so that CUDA sees only it" in plan.advice


def test_builds_per_gpu_name_each_kind_once_with_all_its_indexes() -> None:
    second_5090 = GpuFact(index=2, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")
    first, second = builds_per_gpu([RTX_5090, GTX_1080_TI, second_5090], DRIVER_580)
    assert (first.indexes, first.plan.variant) == ((0, 2), "cu132")
    assert first.select == "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,2"
    assert (second.indexes, second.plan.variant) == ((1,), "cu126")


def test_compute_capabilities_alone_say_how_to_pick_without_an_index() -> None:
    first, _ = builds_per_gpu(["12.0", "6.1"], DRIVER_580)
    assert first.select == "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=<nvidia-smi index of a 12.0 GPU>"


@pytest.mark.parametrize(("gpus", "variant", "release"), [
    ([GTX_1080_TI, RTX_4090], "cu126", "2.14"),   # torch 2.14's CUDA 12.6 build has sm_60 and sm_86
    ([RTX_5090, V100], "cu128", "2.9"),           # torch 2.9's CUDA 12.8 build still had sm_70 beside sm_120
])
def test_gpus_one_build_serves_natively_get_that_build(gpus: list[GpuFact], variant: str, release: str) -> None:
    plan = choose_torch(gpus, DRIVER_580)
    assert (plan.release, plan.variant) == (release, variant)
    assert builds_per_gpu(gpus, DRIVER_580) == ()
    assert "CUDA_VISIBLE_DEVICES" not in (plan.advice or "")


def test_an_asked_release_is_not_split() -> None:
    """With --cuda or a release, the user chose: the one build, or the error naming the way out."""
    plan = choose_torch([RTX_5090, GTX_1080_TI], DRIVER_580, cuda="12.4")
    assert (plan.release, plan.variant) == ("2.5", "cu124")
    assert "PTX compute_90, JIT-compiled on first use" in plan.reason
