"""Install plans for hand-made machines: the GPUs, the driver and the platform decide the command."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpufly.doctor.compat import torch_release
from gpufly.doctor.facts import DriverFact, EnvFact, FrameworkFact, GpuFact
from gpufly.doctor.install import choose_jax, choose_tensorflow, choose_torch, platform_of
from gpufly.errors import GpuflyError

GTX_1080_TI = GpuFact(index=0, name="NVIDIA GeForce GTX 1080 Ti", compute_capability="6.1")
RTX_4090 = GpuFact(index=1, name="NVIDIA GeForce RTX 4090", compute_capability="8.9")
RTX_5090 = GpuFact(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")
V100 = GpuFact(index=0, name="Tesla V100-SXM2-16GB", compute_capability="7.0")
K80 = GpuFact(index=0, name="Tesla K80", compute_capability="3.7")
DRIVER_580 = DriverFact(found=True, version="580.82.07", cuda_version="13.0", source="nvml")
DRIVER_570 = DriverFact(found=True, version="570.133.07", cuda_version="12.8", source="nvml")
DRIVER_535 = DriverFact(found=True, version="535.54.03", cuda_version="12.2", source="nvml")
DRIVER_470 = DriverFact(found=True, version="470.82.01", cuda_version="11.4", source="nvml")
NO_DRIVER = DriverFact(found=False, error="NVML library not found")
INDEX = "https://download.pytorch.org/whl/"


def _arches(plan) -> tuple[str, ...]:
    return torch_release(plan.release).variant(plan.variant).arch_list


# --- torch: the must-holds ----------------------------------------------------------------------

def test_gtx_1080_ti_gets_a_build_with_pascal_code_not_the_newest() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_580, python_version="3.12")
    assert plan.command == f"pip install torch==2.14.* --index-url {INDEX}cu126"
    assert {"sm_60", "sm_61"} & set(_arches(plan))
    assert plan.variant != torch_release("2.14").variants[-1].name
    assert "sm_60" in plan.reason
    assert any(line.startswith("cu132: no code for NVIDIA GeForce GTX 1080 Ti") for line in plan.rejected)


def test_rtx_5090_gets_a_build_with_blackwell_code() -> None:
    plan = choose_torch([RTX_5090], DRIVER_580)
    assert plan.variant in ("cu130", "cu132")
    assert {"sm_120", "compute_120"} & set(_arches(plan))
    assert plan.command.endswith(f"{INDEX}{plan.variant}")


def test_rtx_5090_on_a_570_driver_with_torch_2_9_gets_cu128() -> None:
    plan = choose_torch([RTX_5090], DRIVER_570, release="2.9")
    assert plan.command == f"pip install torch==2.9.* --index-url {INDEX}cu128"
    assert "cu130: needs driver >= 580, this one is 570.133.07" in plan.rejected


def test_a_driver_too_old_for_every_build_asks_for_a_driver_update() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_470)
    assert plan.needs_driver == "525.60.13"
    assert "update the NVIDIA driver to at least 525.60.13" in plan.reason
    assert plan.advice == ("update the NVIDIA driver to at least 525.60.13, then run: "
                           f"pip install torch==2.14.* --index-url {INDEX}cu126")
    # meanwhile, the newest older torch this driver runs, with code for the GPU
    assert plan.command == f"pip install torch==2.7.* --index-url {INDEX}cu118"
    assert (plan.release, plan.variant) == ("2.7", "cu118")
    assert plan.alternatives[0].command == f"pip install torch==2.14.* --index-url {INDEX}cu126"


def test_a_driver_too_old_for_the_release_asked_for_gives_no_command() -> None:
    plan = choose_torch([GTX_1080_TI], DRIVER_470, release="2.14")
    assert plan.command is None and not plan.uses_gpu
    assert (plan.variant, plan.needs_driver) == ("cu126", "525.60.13")


def test_the_driver_update_names_the_floor_of_the_build_it_would_pick() -> None:
    """The lowest driver that runs a build of the release with code for the GPU; the newest build's as a note."""
    plan = choose_torch([RTX_4090], DRIVER_470, release="2.14")
    assert (plan.variant, plan.needs_driver) == ("cu126", "525.60.13")
    assert "update the NVIDIA driver to at least 525.60.13" in plan.reason
    assert plan.advice == ("update the NVIDIA driver to at least 525.60.13, then run: "
                           f"pip install torch==2.14.* --index-url {INDEX}cu126")
    assert "a driver >= 580 runs torch 2.14 cu132, its newest build with code for NVIDIA GeForce RTX 4090 (8.9)" \
        in plan.warnings
    assert plan.alternatives[0].command == f"pip install torch==2.14.* --index-url {INDEX}cu132"


def test_the_driver_floor_counts_only_builds_with_code_for_the_gpu() -> None:
    """An RTX 5090 needs sm_120, which torch 2.14 ships only in its CUDA 13 builds: those need driver 580."""
    plan = choose_torch([RTX_5090], DRIVER_470, release="2.14")
    assert (plan.variant, plan.needs_driver) == ("cu132", "580")
    assert plan.advice.startswith("update the NVIDIA driver to at least 580, then run")
    on_570 = choose_torch([RTX_5090], DRIVER_570)
    assert on_570.needs_driver == "580" and "update the NVIDIA driver to at least 580" in on_570.advice


def test_rtx_5090_on_a_570_driver_keeps_the_driver_with_cu128_and_is_told_to_update() -> None:
    plan = choose_torch([RTX_5090], DRIVER_570)
    assert plan.needs_driver == "580"
    assert plan.command == f"pip install torch==2.11.* --index-url {INDEX}cu128"
    assert "sm_120" in _arches(plan)


def test_builds_outside_the_release_matrix_are_used_only_when_asked_for() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, release="2.12")
    assert plan.variant == "cu132"  # by minor-version compatibility: it has native code for the 4090
    assert any(line.startswith("cu129: in the build scripts") for line in plan.rejected)
    assert choose_torch([RTX_4090], DRIVER_580, release="2.12", cuda="12.9").variant == "cu129"


def test_cpu_only_machine_gets_the_cpu_index() -> None:
    plan = choose_torch([], NO_DRIVER)
    assert plan.command == f"pip install torch --index-url {INDEX}cpu"
    assert plan.variant == "cpu" and not plan.uses_gpu


def test_a_gpu_without_a_driver_gets_the_cpu_build_and_says_why() -> None:
    plan = choose_torch([RTX_4090], NO_DRIVER)
    assert plan.variant == "cpu"
    assert "no working NVIDIA driver (NVML library not found)" in plan.reason


def test_cpu_on_windows_and_macos_is_plain_pypi() -> None:
    assert choose_torch([], NO_DRIVER, platform="windows").command == "pip install torch"
    assert choose_torch([RTX_4090], DRIVER_580, platform="darwin").command == "pip install torch"


def test_mixed_gpus_get_a_build_covering_both() -> None:
    plan = choose_torch([GTX_1080_TI, RTX_4090], DRIVER_580)
    assert plan.variant == "cu126"
    arches = _arches(plan)
    assert "sm_60" in arches and "sm_86" in arches
    assert "NVIDIA GeForce RTX 4090 (8.9, sm_86)" in plan.reason


# --- torch: the rest of the algorithm -----------------------------------------------------------

def test_gpus_too_old_for_the_newest_release_walk_back() -> None:
    plan = choose_torch([K80], DRIVER_470)
    assert plan.command == f"pip install torch==2.7.* --index-url {INDEX}cu118"
    assert plan.reason.startswith("torch 2.14 has no build with code for Tesla K80 (3.7)")
    assert any("minor-version compatibility" in w for w in plan.warnings)


def test_volta_on_torch_2_11_gets_cu126() -> None:
    assert choose_torch([V100], DRIVER_580, release="2.11").variant == "cu126"


def test_minor_version_compatibility_is_used_only_with_a_warning() -> None:
    plan = choose_torch([RTX_4090], DRIVER_535, release="2.11")
    assert plan.variant == "cu128"
    assert any("only through minor-version compatibility" in w and "570.26" in w for w in plan.warnings)
    assert "cu130: needs driver >= 580, this one is 535.54.03" in plan.rejected


def test_a_newer_build_the_driver_runs_by_minor_version_compatibility_is_kept_with_its_caveat() -> None:
    """Native code for the GPU means no PTX JIT, so CUDA 12.8 runs on a 12.6 driver (NVIDIA's compatibility guide)."""
    plan = choose_torch([RTX_4090], DriverFact(found=True, version="560.35.03"), release="2.11")
    assert plan.variant == "cu128"
    assert any(w.startswith("driver 560.35.03 runs CUDA 12.8 only through minor-version compatibility")
               and "no PTX JIT is needed" in w for w in plan.warnings)


def test_windows_gtx_1650_gets_a_cuda_build() -> None:
    gtx_1650 = GpuFact(index=0, name="NVIDIA GeForce GTX 1650", compute_capability="7.5")
    plan = choose_torch([gtx_1650], DriverFact(found=True, version="581.57"), platform="windows")
    assert plan.variant.startswith("cu") and plan.uses_gpu


def test_compute_capabilities_alone_are_enough() -> None:
    plan = choose_torch(["12.1"], DRIVER_580)
    assert plan.variant == "cu132"


def test_python_version_picks_a_release_with_wheels_for_it() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, python_version="3.9")
    assert plan.release == "2.8"
    with pytest.raises(GpuflyError, match=re.escape("no wheels for Python 3.9")):
        choose_torch([RTX_4090], DRIVER_580, python_version="3.9", release="2.14")


def test_an_explicit_release_without_code_for_the_gpu_is_an_error_with_a_way_out() -> None:
    with pytest.raises(GpuflyError, match=re.escape("no build of torch 2.14 has code for Tesla K80")) as caught:
        choose_torch([K80], DRIVER_580, release="2.14")
    assert caught.value.hint == ("torch 2.7 cu118 has code for them and runs on this driver: "
                                 f"pip install torch==2.7.* --index-url {INDEX}cu118")


def test_a_release_whose_arch_lists_are_unknown_is_chosen_only_when_asked_with_a_warning() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, release="2.10")
    assert plan.variant == "cu130"
    assert any("lacks the architecture lists of torch 2.10" in w for w in plan.warnings)


# --- torch: --cuda ------------------------------------------------------------------------------

def test_cuda_override_restricts_and_says_so() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, cuda="12.6")
    assert plan.command == f"pip install torch==2.14.* --index-url {INDEX}cu126"
    assert "(CUDA 12.6, as asked)" in plan.reason
    assert choose_torch([RTX_4090], DRIVER_580, cuda="cu126").variant == "cu126"


def test_cuda_override_walks_to_the_newest_release_that_has_it() -> None:
    plan = choose_torch([RTX_4090], DRIVER_580, cuda="12.8")
    assert (plan.release, plan.variant) == ("2.11", "cu128")


def test_cuda_override_missing_from_the_release_is_an_error_listing_the_builds() -> None:
    with pytest.raises(GpuflyError, match=re.escape("torch 2.14 has no CUDA 12.8 build")) as caught:
        choose_torch([RTX_4090], DRIVER_580, release="2.14", cuda="12.8")
    assert caught.value.hint == "its builds: 12.6 (cu126), 13.0 (cu130), 13.2 (cu132)"
    with pytest.raises(GpuflyError, match=re.escape("no torch release in gpufly's table has a CUDA 11.3 build")):
        choose_torch([RTX_4090], DRIVER_580, cuda="11.3")


def test_cuda_override_without_code_for_the_gpu_is_an_error() -> None:
    with pytest.raises(GpuflyError, match=re.escape("no build of CUDA 13.0 has code for NVIDIA GeForce GTX 1080 Ti")):
        choose_torch([GTX_1080_TI], DRIVER_580, cuda="13.0")


def test_cuda_override_the_driver_cannot_run_says_so_and_offers_the_build_without_it() -> None:
    plan = choose_torch([RTX_4090], DRIVER_570, cuda="13.0")
    assert "every torch 2.14 build (CUDA 13.0, as asked) with code for NVIDIA GeForce RTX 4090" in plan.reason
    assert plan.command is None and plan.needs_driver == "580"
    without = f"pip install torch==2.14.* --index-url {INDEX}cu126"
    assert without == choose_torch([RTX_4090], DRIVER_570).command
    assert plan.advice.endswith(f"; or, without --cuda 13.0, run: {without}")
    assert [alt.command for alt in plan.alternatives][-1] == without


def test_cuda_override_without_code_for_the_gpu_names_the_build_this_driver_runs() -> None:
    with pytest.raises(GpuflyError, match=re.escape("no build of CUDA 11.8 has code for NVIDIA GeForce RTX 5090")
                       ) as caught:
        choose_torch([RTX_5090], DRIVER_570, cuda="11.8")
    assert caught.value.hint == ("torch 2.11 cu128 has code for them and runs on this driver: "
                                 f"pip install torch==2.11.* --index-url {INDEX}cu128")


def test_the_cuda_asked_for_is_kept_on_the_cli(cli, tmp_path) -> None:
    scenario = Path(__file__).parent.parent / "fixtures" / "doctor" / "scenarios" / "healthy_gpu.json"
    facts = json.loads(scenario.read_text())["facts"]
    assert (facts["driver"]["version"], facts["gpus"][0]["compute_capability"]) == ("570.133.07", "8.9")
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(facts))
    result = cli("install", "torch", "--cuda", "13.0", "--facts", str(path), env={"COLUMNS": "300"})
    assert result.code == 0, result.stderr
    assert "(CUDA 13.0, as asked)" in result.stdout
    assert f"without --cuda 13.0, run: pip install torch==2.14.* --index-url {INDEX}cu126" in result.stdout


def test_never_a_cu113_era_index() -> None:
    machines = [([K80], DRIVER_470), ([GTX_1080_TI], DRIVER_470), (["5.0"], DRIVER_470), ([RTX_4090], DRIVER_535)]
    for gpus, driver in machines:
        plan = choose_torch(gpus, driver)
        commands = [plan.command or "", plan.advice or "", *(a.command for a in plan.alternatives)]
        assert not any(old in c for c in commands for old in ("cu113", "cu102", "cu111"))


def test_plan_to_dict_is_json() -> None:
    data = json.loads(json.dumps(choose_torch([GTX_1080_TI], DRIVER_470).to_dict()))
    assert data["needs_driver"] == "525.60.13"
    assert data["alternatives"][0]["command"].endswith("cu126")


# --- TensorFlow ---------------------------------------------------------------------------------

def test_tensorflow_on_linux_with_a_good_driver_uses_and_cuda() -> None:
    plan = choose_tensorflow([RTX_4090], DRIVER_580)
    assert plan.command == "pip install 'tensorflow[and-cuda]'"
    assert plan.verify == "python3 -c \"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\""
    assert any("tf.test.is_gpu_available is deprecated" in w for w in plan.warnings)


def test_tensorflow_with_an_old_driver_is_cpu_with_the_reason() -> None:
    plan = choose_tensorflow([RTX_4090], DRIVER_470, python_version="3.11")
    assert plan.command == "pip install tensorflow"
    assert plan.needs_driver == "525.60.13"
    assert "too old for CUDA 12.5" in plan.reason
    assert plan.alternatives[0].command == "pip install 'tensorflow[and-cuda]==2.14.*'"


def test_tensorflow_on_native_windows_points_to_wsl2() -> None:
    plan = choose_tensorflow([RTX_4090], DRIVER_580, platform="windows")
    assert plan.command == "pip install tensorflow"
    assert "WSL2" in plan.reason and "2.10" in plan.reason


def test_tensorflow_never_recommends_tensorflow_gpu_and_flags_it() -> None:
    installed = FrameworkFact(name="tensorflow", installed=True, version="2.10.1", distribution="tensorflow_gpu")
    plan = choose_tensorflow([RTX_4090], DRIVER_580, installed=installed)
    assert "tensorflow-gpu" not in plan.command
    assert any("pip uninstall -y tensorflow-gpu" in w for w in plan.warnings)


def test_tensorflow_cpu_only_machine() -> None:
    assert choose_tensorflow([], NO_DRIVER).command == "pip install tensorflow"


def test_tensorflow_cuda_picks_the_newest_release_built_with_it() -> None:
    plan = choose_tensorflow([RTX_4090], DRIVER_580, python_version="3.11", cuda="12.3")
    assert plan.command == "pip install 'tensorflow[and-cuda]==2.17.*'"
    assert (plan.release, plan.cuda) == ("2.17", "12.3")
    assert choose_tensorflow([RTX_4090], DRIVER_580, cuda="12.5").command == "pip install 'tensorflow[and-cuda]'"


def test_tensorflow_before_and_cuda_says_to_bring_cuda() -> None:
    plan = choose_tensorflow([RTX_4090], DRIVER_580, python_version="3.10", cuda="11.2")
    assert plan.command == "pip install 'tensorflow==2.11.*'"
    assert any("install CUDA 11.2 and cuDNN 8.1 yourself" in w for w in plan.warnings)


def test_tensorflow_refuses_a_cuda_it_is_not_built_with() -> None:
    with pytest.raises(GpuflyError, match=re.escape("no TensorFlow release in gpufly's table is built with CUDA 12.6")
                       ) as caught:
        choose_tensorflow([RTX_4090], DRIVER_580, cuda="12.6")
    assert caught.value.hint.startswith("TensorFlow's CUDA versions: 12.5 (2.18 to 2.21), 12.3 (2.16 to 2.17)")
    with pytest.raises(GpuflyError, match=re.escape("CUDA 11.2 in gpufly's table has wheels for Python 3.12")):
        choose_tensorflow([RTX_4090], DRIVER_580, python_version="3.12", cuda="11.2")


@pytest.mark.parametrize("choose", [choose_torch, choose_tensorflow, choose_jax])
def test_an_unreadable_cuda_is_an_error_with_a_cuda_example(choose) -> None:
    with pytest.raises(GpuflyError, match=re.escape("cannot read --cuda 'abc'")) as caught:
        choose([RTX_4090], DRIVER_580, cuda="abc")
    assert caught.value.hint == "give a CUDA version, e.g. --cuda 12.6 (or cu126)"


# --- JAX ----------------------------------------------------------------------------------------

def test_jax_picks_cuda13_on_a_580_driver() -> None:
    assert choose_jax([RTX_4090], DRIVER_580).command == 'pip install -U "jax[cuda13]"'


def test_jax_on_pascal_or_an_older_driver_picks_cuda12() -> None:
    assert choose_jax([GTX_1080_TI], DRIVER_580).command == 'pip install -U "jax[cuda12]"'
    assert choose_jax([RTX_4090], DRIVER_570).command == 'pip install -U "jax[cuda12]"'


def test_jax_with_a_driver_too_old_is_cpu_with_the_lowest_driver_to_get() -> None:
    plan = choose_jax([RTX_4090], DRIVER_470)
    assert plan.command == "pip install -U jax"
    assert plan.needs_driver == "525"
    assert plan.advice == 'update the NVIDIA driver to at least 525, then run: pip install -U "jax[cuda12]"'
    assert "a driver >= 580 runs jax[cuda13]" in plan.warnings


def test_jax_cuda_picks_the_extra_of_that_major_version() -> None:
    assert choose_jax([RTX_4090], DRIVER_580, cuda="12.6").command == 'pip install -U "jax[cuda12]"'
    assert choose_jax([RTX_4090], DRIVER_570, cuda="12").command == 'pip install -U "jax[cuda12]"'
    assert choose_jax([RTX_4090], DRIVER_580, cuda="cu130").command == 'pip install -U "jax[cuda13]"'
    plan = choose_jax([RTX_4090], DRIVER_570, cuda="13.0")
    assert (plan.command, plan.needs_driver) == ("pip install -U jax", "580")
    assert "(CUDA 13.x, as asked)" in plan.reason
    with pytest.raises(GpuflyError, match=re.escape("JAX has no wheels for CUDA 99.1")) as caught:
        choose_jax([RTX_4090], DRIVER_570, cuda="99.1")
    assert caught.value.hint == "its CUDA extras: jax[cuda13] (CUDA 13.x), jax[cuda12] (CUDA 12.x)"
    assert choose_jax([], NO_DRIVER, cuda="13.0").warnings == ("--cuda 13.0 ignored: no CUDA build can be used here",)


def test_jax_cpu_only_windows_and_ld_library_path() -> None:
    assert choose_jax([], NO_DRIVER).command == "pip install -U jax"
    assert choose_jax([RTX_4090], DRIVER_580, platform="windows").command == "pip install -U jax"
    plan = choose_jax([RTX_4090], DRIVER_580, env=EnvFact(ld_library_path="/usr/local/cuda/lib64"))
    assert any("LD_LIBRARY_PATH" in w for w in plan.warnings)


def test_platform_of_env() -> None:
    assert platform_of(EnvFact(platform="linux", in_wsl=True)) == "wsl"
    assert platform_of(EnvFact(platform="windows")) == "windows"
    with pytest.raises(GpuflyError, match=re.escape("unknown platform 'beos'")):
        choose_torch([], NO_DRIVER, platform="beos")
