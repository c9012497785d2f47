"""Findings: facts in, what does not fit together out, each with why it matters and the fix.

Pure logic over a Facts document (doctor/facts.py); the version tables live in doctor/data and
are read through doctor/compat.py. Thresholds are named constants here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gpufly.doctor.extensions import extension_findings
from gpufly.doctor.facts import Facts, FrameworkFact, GpuFact
from gpufly.i18n import gettext as _
from gpufly.i18n import ngettext

if TYPE_CHECKING:
    from gpufly.catalog import Catalog
    from gpufly.doctor.compat import TorchVariant
    from gpufly.doctor.install import InstallPlan
    from gpufly.doctor.install.torch import GpuBuild
    from gpufly.doctor.smoke import SmokeResult

LOW_FREE_VRAM_SHARE = 0.2
"""Below this share of free memory, with other processes holding it, a job may not fit."""
SLOW_FP16_CCS = frozenset({"5.0", "5.2", "6.1"})
"""Compute capabilities without fast FP16, for GPUs the catalog lacks: desktop Maxwell has no FP16 arithmetic
(it converts to FP32) and consumer Pascal (6.1) runs it at 1/64 rate, so AMP slows them down. The Jetson TX1
(5.3), the P100 (6.0) and the Jetson TX2 (6.2) run FP16 at twice the FP32 rate and are not here (CUDA C
Programming Guide, arithmetic instruction throughput per compute capability)."""
STATUS_ORDER = {"fail": 0, "warn": 1, "ok": 2}
RERUN_IMPORT_TIMEOUT_S = 300
"""The longer import limit a timed-out finding suggests: generous for a busy machine's cold import."""


@dataclass(frozen=True)
class Finding:
    """One check's result: ``status`` ok, warn or fail; what is wrong in one sentence, why it
    matters, and the command or step that fixes it."""

    check: str
    status: str
    what: str
    why: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _torch_plan(facts: Facts) -> InstallPlan:
    from gpufly.doctor.install import choose_torch, platform_of

    return choose_torch(list(facts.gpus), facts.driver, platform_of(facts.env), facts.env.python_version,
                        machine=facts.env.machine)


def _builds_per_gpu(facts: Facts) -> tuple[GpuBuild, ...]:
    from gpufly.doctor.install import platform_of
    from gpufly.doctor.install.torch import builds_per_gpu

    if not facts.driver.found or len(facts.gpus) < 2:
        return ()
    return builds_per_gpu(list(facts.gpus), facts.driver, platform_of(facts.env), facts.env.python_version,
                          machine=facts.env.machine)


def _per_gpu_fix(builds: tuple[GpuBuild, ...]) -> str:
    """A build per GPU, each with how to show CUDA only that GPU."""
    return _("; ").join(_("for the {gpu}, run with {select}: {command}").format(gpu=b.label, select=b.select,
                                                                                command=_joined(b.plan))
                        for b in builds)


def _torch_install(facts: Facts) -> str:
    """The pip command to install, and the driver update that unlocks a newer build as a second choice
    ("; or ..."): two sentences, not one run together. On a machine no single build serves, a build per GPU."""
    builds = _builds_per_gpu(facts)
    return _per_gpu_fix(builds) if builds else _joined(_torch_plan(facts))


def _joined(plan: InstallPlan) -> str:
    if plan.command and plan.advice:
        return _("{command}; or {advice}").format(command=plan.command, advice=plan.advice)
    return plan.command or plan.advice or ""


def _driver_too_old_fix(facts: Facts, needed: str) -> str:
    """Update the driver for the installed torch, or install a build this driver runs; the driver update is
    named once (the plan's advice names it too when it asks for the same driver)."""
    plan = _torch_plan(facts)
    if plan.command is None:
        update = _("update the NVIDIA driver to {driver} or newer").format(driver=needed)
        return update + (f"; {plan.advice}" if plan.advice else "")
    if plan.advice and plan.needs_driver == needed:
        return _("install a build this driver runs: {command}; or {advice}").format(command=plan.command,
                                                                                     advice=plan.advice)
    return _("update the NVIDIA driver to {driver} or newer, or install a build this driver runs: {command}").format(
        driver=needed, command=_joined(plan))


def check_driver(facts: Facts) -> Iterator[Finding]:
    driver, env = facts.driver, facts.env
    if driver.found and facts.gpus:
        cuda = (_("CUDA up to {cuda}").format(cuda=driver.cuda_version) if driver.cuda_version
                else _("CUDA version unknown"))
        gpus = ngettext("{count} GPU", "{count} GPUs", len(facts.gpus)).format(count=len(facts.gpus))
        yield Finding("driver", "ok", _("NVIDIA driver {version} ({cuda}), {gpus}").format(
            version=driver.version or _("(version unknown)"), cuda=cuda, gpus=gpus))
        return
    if env.in_container:
        yield Finding("driver", "warn", _("no NVIDIA GPU inside this container"),
                      _("if the host has one, the container was started without GPU access and CUDA sees no device"),
                      _("start it with `docker run --gpus all ...` (NVIDIA Container Toolkit installed on the host), "
                        "or in Kubernetes request `nvidia.com/gpu`"))
        return
    reason = driver.error or _("no NVIDIA driver")
    if driver.error and "not loaded" in driver.error:
        yield Finding("driver", "fail", _("the NVIDIA driver is installed but not loaded ({error})").format(
                      error=driver.error),
                      _("no CUDA program can reach the GPU"), _("reboot after a driver install or kernel update, or "
                      "`sudo modprobe nvidia`; check `dmesg | grep -i nvidia` for the reason (Secure Boot?)"))
        return
    if env.in_wsl:
        yield Finding("driver", "warn", _("no NVIDIA GPU visible in WSL ({reason})").format(reason=reason),
                      _("WSL reaches the GPU through the Windows driver"),
                      _("install or update the NVIDIA driver on Windows, not inside WSL; then `wsl --update`"))
        return
    yield Finding("driver", "ok", _("no NVIDIA GPU found ({reason}): a CPU-only machine").format(reason=reason))


def check_driver_age(facts: Facts) -> Iterator[Finding]:
    """An old driver limits every framework install to come, so it is a finding even with none installed: a
    warning when no build of the newest torch release with code for these GPUs runs on it; a note (ok, with
    the update as its fix) when only a legacy build does, which the next releases drop."""
    from gpufly.doctor.compat import driver_supports
    from gpufly.doctor.install import platform_of

    torch = facts.framework("torch")
    if not facts.driver.found or not facts.driver.version or not facts.gpus:
        return
    if torch is not None and torch.cuda_version and not driver_supports(facts.driver.version, torch.cuda_version,
                                                                         platform_of(facts.env)):
        return
    builds = _builds_per_gpu(facts)
    for plan in [b.plan for b in builds] or [_torch_plan(facts)]:
        if plan.needs_driver is not None:
            yield Finding("driver_old", "warn", _("NVIDIA driver {driver} is too old for the newest torch builds "
                                                  "with code for these GPUs (they need {needed} or newer)").format(
                              driver=facts.driver.version, needed=plan.needs_driver),
                          _("the driver limits every framework install: each CUDA build needs a driver at least as "
                            "new as its CUDA major version's floor"), plan.advice or "")
            return
        variant = _legacy_variant(plan)
        need = _current_build_driver(facts, variant.release) if variant is not None else None
        if variant is not None and need is not None:
            note = _(": {note}").format(note=_(variant.note)) if variant.note else ""
            yield Finding("driver_old", "ok", _("NVIDIA driver {driver} runs only the legacy {build} build of "
                                                "torch {release}{note}").format(
                              driver=facts.driver.version, build=variant.name, release=plan.release, note=note),
                          _("fine today, but PyTorch is dropping CUDA {cuda}: its current builds with code for these "
                            "GPUs need driver {needed} or newer").format(cuda=variant.cuda, needed=need),
                          _("update the NVIDIA driver to {needed} or newer before the next torch release").format(
                              needed=need))
            return


def _legacy_variant(plan: InstallPlan) -> TorchVariant | None:
    """The plan's build when PyTorch's release matrix marks it legacy (the last releases to ship its CUDA)."""
    from gpufly.doctor.compat import torch_release

    if not plan.uses_gpu or plan.release is None or plan.variant is None:
        return None
    variant = torch_release(plan.release).variant(plan.variant)
    return variant if variant.status == "legacy" else None


def _current_build_driver(facts: Facts, release: str) -> str | None:
    """The lowest driver that runs a build of the release, other than a legacy one, with code for every GPU
    here; None when there is no such build (then the GPU, not the driver, is what ages out)."""
    from gpufly.doctor.compat import arch_covers, min_driver_for, parse_version, torch_release
    from gpufly.doctor.install import platform_of

    wheels = facts.env.platform or "linux"
    floors = [min_driver_for(v.cuda, platform_of(facts.env)) for v in torch_release(release).variants
              if v.status in ("stable", "experimental") and (arches := v.arches(wheels, facts.env.machine))
              and all(arch_covers(g.compute_capability, arches) for g in facts.gpus if g.compute_capability)]
    return min(floors, key=parse_version, default=None)


def check_mixed_gpus(facts: Facts) -> Iterator[Finding]:
    builds = _builds_per_gpu(facts)
    if builds:
        yield Finding("mixed_gpus", "warn", _("no torch build has native code for every GPU here: {gpus}").format(
                          gpus=", ".join(b.label for b in builds)),
                      _("one process can use only the GPUs its build has code for; recent wheels dropped the older "
                        "cards and older wheels lack the newer ones, so each kind of GPU needs its own environment"),
                      _per_gpu_fix(builds))


def check_visible_devices(facts: Facts) -> Iterator[Finding]:
    value = facts.env.cuda_visible_devices
    if value is None or not facts.gpus:
        return
    entries = [item.strip() for item in value.split(",") if item.strip()]
    if not entries or entries[0] in ("-1", "none", "NoDevFiles"):
        yield Finding("visible_devices", "fail", _("CUDA_VISIBLE_DEVICES={value} hides every GPU").format(
                          value=repr(value)),
                      ngettext("{count} GPU is installed, but CUDA programs see none",
                               "{count} GPUs are installed, but CUDA programs see none",
                               len(facts.gpus)).format(count=len(facts.gpus)),
                      _("unset CUDA_VISIBLE_DEVICES, or list the GPUs to use: export CUDA_VISIBLE_DEVICES=0,1"))
    elif len(entries) < len(facts.gpus):
        yield Finding("visible_devices", "warn", _("CUDA_VISIBLE_DEVICES={value} shows {shown} of {count} GPUs")
                      .format(value=repr(value), shown=len(entries), count=len(facts.gpus)),
                      _("the others are hidden from CUDA programs (NVML still lists them)"),
                      _("unset CUDA_VISIBLE_DEVICES if that is not meant"))


def _torch_build_findings(facts: Facts, torch: FrameworkFact) -> Iterator[Finding]:
    from gpufly.doctor.compat import arch_covers, driver_supports, min_driver_for, parse_arch, parse_compute_capability

    platform = facts.env.platform or "linux"
    if torch.cuda_version is None:
        yield Finding("torch_cpu_wheel", "fail", ngettext(
                          "PyTorch {version} is a CPU-only build on a machine with {count} NVIDIA GPU",
                          "PyTorch {version} is a CPU-only build on a machine with {count} NVIDIA GPUs",
                          len(facts.gpus)).format(version=torch.version, count=len(facts.gpus)),
                      _("torch.cuda.is_available() is False: everything runs on the CPU"),
                      _torch_install(facts))
        return
    if facts.driver.version and not driver_supports(facts.driver.version, torch.cuda_version, platform):
        needed = min_driver_for(torch.cuda_version, platform)
        yield Finding("driver_too_old", "fail", _("driver {driver} is too old for PyTorch's CUDA {cuda} (needs "
                                                  "{needed} or newer)").format(
                          driver=facts.driver.version, cuda=torch.cuda_version, needed=needed),
                      _("CUDA initialisation fails ('The NVIDIA driver on your system is too old')"),
                      _driver_too_old_fix(facts, needed))
    arch_list = torch.arch_list or ()
    yield from _minor_compat_findings(facts, torch)
    if arch_list:
        for gpu in facts.gpus:
            if gpu.compute_capability and arch_covers(gpu.compute_capability, arch_list) is None:
                oldest = min((parse_arch(a)[1:3] for a in arch_list if a.startswith("sm_")), default=None)
                if oldest is not None and parse_compute_capability(gpu.compute_capability) < oldest:
                    what = _("this PyTorch build dropped the {gpu} (compute capability {cc}; oldest compiled: "
                             "{oldest})").format(gpu=gpu.name, cc=gpu.compute_capability,
                                                 oldest=f"sm_{oldest[0]}{oldest[1]}")
                else:
                    what = _("this PyTorch build has no kernels for the {gpu} (compute capability {cc}; compiled: "
                             "{arches})").format(gpu=gpu.name, cc=gpu.compute_capability, arches=", ".join(arch_list))
                yield Finding("arch_missing", "fail", what, _("CUDA calls fail with 'no kernel image is available "
                              "for execution on the device'"), _torch_install(facts))
    if torch.gpu_available is False and facts.driver.found:
        yield Finding("torch_no_gpu", "fail", _("PyTorch {version} (CUDA {cuda}) sees no GPU").format(
                          version=torch.version, cuda=torch.cuda_version),
                      _("torch.cuda.is_available() is False although a driver and GPUs are present"),
                      _("check the findings above; `python -c \"import torch; torch.cuda.init()\"` shows the CUDA "
                        "error"))


def _minor_compat_findings(facts: Facts, torch: FrameworkFact) -> Iterator[Finding]:
    """A torch built with a newer CUDA minor than the driver's runs by minor-version compatibility only on GPUs it
    has native code for: the driver cannot JIT-compile PTX from the newer toolkit. A GPU that would need PTX
    fails; where every GPU has native code, the build is fine with a caveat."""
    from gpufly.doctor.compat import matching_arch, minor_compat, runs_by_minor_compat
    from gpufly.doctor.install import platform_of

    driver, cuda = facts.driver, torch.cuda_version
    if not driver.version or not cuda or not torch.arch_list:
        return
    if not runs_by_minor_compat(driver.version, cuda, platform_of(facts.env), driver.cuda_version):
        return
    gpus = [(gpu, matching_arch(gpu.compute_capability, torch.arch_list)) for gpu in facts.gpus
            if gpu.compute_capability]
    compat = minor_compat()
    for gpu, match in gpus:
        if match is not None and match[0] == "ptx":
            yield Finding("minor_compat_ptx", "fail", _(
                              "PyTorch {version} (CUDA {cuda}) has only PTX ({arch}) for the {gpu}, and driver "
                              "{driver} runs CUDA {cuda} only through minor-version compatibility, which cannot "
                              "JIT-compile it").format(version=torch.version, cuda=cuda, arch=match[1], gpu=gpu.name,
                                                       driver=driver.version),
                          _("CUDA calls on that GPU fail with {error} ({source})").format(error=compat.ptx_error,
                                                                                          source=compat.source),
                          _("install a build with native code for it: {command}; or update the NVIDIA driver to one "
                            "that reports CUDA {cuda} or newer, which can JIT-compile that PTX").format(
                              command=_torch_install(facts), cuda=cuda))
    native = [f"{gpu.name} ({match[1]})" for gpu, match in gpus if match is not None and match[0] == "sass"]
    if native and len(native) == len(gpus):
        reported = _(" (it reports CUDA {cuda})").format(cuda=driver.cuda_version) if driver.cuda_version else ""
        yield Finding("minor_compat", "ok", _("driver {driver}{reported} runs PyTorch's CUDA {cuda} through "
                                              "minor-version compatibility: the build has native code for {gpus}")
                      .format(driver=driver.version, reported=reported, cuda=cuda, gpus=", ".join(native)),
                      _("no PTX JIT is needed; {caveat} ({source})").format(caveat=_(compat.caveat),
                                                                            source=compat.source))


def check_torch(facts: Facts) -> Iterator[Finding]:
    torch = next((f for f in facts.frameworks if f.name == "torch"), None)
    if torch is None or not torch.installed:
        return
    if torch.timed_out:
        yield _timeout_finding(torch)
        return
    if torch.import_error:
        yield Finding("torch_import", "fail", _("importing torch failed: {error}").format(error=torch.import_error),
                      _("a broken install can hang or crash every program that imports it"),
                      _("reinstall it in a fresh virtual environment: {command}").format(
                          command=_torch_install(facts)))
        return
    if not facts.gpus:
        yield Finding("torch", "ok", (_("PyTorch {version} (CUDA {cuda})") if torch.cuda_version
                                      else _("PyTorch {version} (CPU build)")).format(version=torch.version,
                                                                                    cuda=torch.cuda_version))
        return
    found = list(_torch_build_findings(facts, torch))
    if all(f.status == "ok" for f in found):
        found.insert(0, Finding("torch", "ok", _("PyTorch {version} with CUDA {cuda} runs on every GPU here").format(
            version=torch.version, cuda=torch.cuda_version)))
    yield from found


def _timeout_finding(framework: FrameworkFact) -> Finding:
    """An import that did not finish in time: slow (still making progress) or stalled, never called broken on
    the timeout alone, so the fix is a longer limit and a way to see where it waits, not a reinstall."""
    name = framework.name
    doing = _(" (last stage: {stage})").format(stage=framework.last_stage) if framework.last_stage else ""
    where = _("{command} shows the slowest imports, and `py-spy dump --pid PID` where a waiting one is stuck").format(
        command=f"`python -X importtime -c 'import {name}' 2>&1 | sort -t'|' -k2 -n | tail`")
    longer = _("re-run with a longer limit: {command}").format(
        command=f"gpufly doctor --import-timeout {RERUN_IMPORT_TIMEOUT_S}")
    if framework.stalled:
        return Finding(f"{name}_import_timeout", "fail",
                       framework.import_error or _("importing {name} stopped making progress{stage}").format(
                           name=name, stage=doing),
                       _("an import that waits without progress is often a lock, a network file system or a GPU "
                         "driver call, not a broken install: a timeout alone says nothing about the files"),
                       _("{rerun}; if it stops at the same stage again, {where}").format(rerun=longer, where=where))
    return Finding(f"{name}_import_timeout", "warn",
                   framework.import_error or _("importing {name} was still making progress when stopped{stage}")
                   .format(name=name, stage=doing),
                   _("a busy or slow machine (cold disk cache, network file system) makes large imports slow; "
                     "slow is not broken"), f"{longer}; {where}")


def check_tensorflow(facts: Facts) -> Iterator[Finding]:
    tf = next((f for f in facts.frameworks if f.name == "tensorflow"), None)
    if tf is None or not tf.installed:
        return
    verify = _("check with tf.config.list_physical_devices('GPU') (tf.test.is_gpu_available is deprecated)")
    if tf.distribution == "tensorflow-gpu":
        yield Finding("tensorflow_gpu_package", "fail", _("TensorFlow comes from the removed 'tensorflow-gpu' "
                                                          "package"),
                      _("tensorflow-gpu stopped at 2.10 and no longer installs; GPU support is in 'tensorflow' "
                        "itself"),
                      "pip uninstall -y tensorflow-gpu && pip install 'tensorflow[and-cuda]'; " + verify)
        return
    if tf.timed_out:
        yield _timeout_finding(tf)
        return
    if tf.import_error:
        yield Finding("tensorflow_import", "fail", _("importing TensorFlow failed: {error}").format(
                          error=tf.import_error),
                      "", _("reinstall: {command}").format(command="pip install 'tensorflow[and-cuda]'"))
        return
    if facts.gpus and not tf.gpu_available:
        cpu_only = tf.cuda_version is None or tf.distribution == "tensorflow-cpu"
        what = _("TensorFlow {version} is built without CUDA") if cpu_only else _("TensorFlow {version} sees no GPU")
        yield Finding("tensorflow_no_gpu", "fail", what.format(version=tf.version),
                      _("TensorFlow runs everything on the CPU"),
                      (_("pip install 'tensorflow[and-cuda]' (Linux; on Windows, GPU support needs WSL2 since TF "
                         "2.11); ") if cpu_only else _("install the CUDA libraries it expects: pip install "
                                                         "'tensorflow[and-cuda]'; ")) + verify)
        return
    yield Finding("tensorflow", "ok", (_("TensorFlow {version} with GPU") if tf.gpu_available
                                       else _("TensorFlow {version}")).format(version=tf.version))


def check_jax(facts: Facts) -> Iterator[Finding]:
    jax = next((f for f in facts.frameworks if f.name == "jax"), None)
    if jax is None or not jax.installed:
        return
    if jax.timed_out:
        yield _timeout_finding(jax)
    elif jax.import_error:
        yield Finding("jax_import", "fail", _("importing JAX failed: {error}").format(error=jax.import_error), "",
                      'pip install -U "jax[cuda12]"')
    elif facts.gpus and jax.backend != "gpu":
        yield Finding("jax_cpu", "fail", _("JAX {version} runs on the {backend} backend").format(
                          version=jax.version, backend=jax.backend or "cpu"),
                      _("jaxlib without a CUDA plugin ignores the GPUs"), 'pip install -U "jax[cuda12]"')
    else:
        yield Finding("jax", "ok", _("JAX {version} on {backend}").format(version=jax.version, backend=jax.backend))


def _catalog() -> Catalog:
    from gpufly.catalog import default_catalog

    return default_catalog()


def slow_half_precision(gpu: GpuFact, catalog: Catalog) -> bool:
    """Whether FP16 is slower than FP32 on this GPU, so that AMP costs instead of helping.

    The catalog entry decides where it has the figures (an FP16 rate below the FP32 one, and no tensor
    cores); otherwise the compute capability does (SLOW_FP16_CCS).
    """
    spec = catalog.match_device(gpu.name, gpu.memory_total_bytes)
    if spec is not None and spec.fp16_tflops is not None and spec.fp32_tflops is not None:
        return spec.fp16_tflops < spec.fp32_tflops and not spec.has_tensor_cores
    return gpu.compute_capability in SLOW_FP16_CCS


def check_half_precision(facts: Facts) -> Iterator[Finding]:
    catalog = _catalog() if facts.gpus else None
    for gpu in facts.gpus:
        if catalog is not None and slow_half_precision(gpu, catalog):
            yield Finding("slow_fp16", "warn", _("the {gpu} (compute capability {cc}) has no fast half precision")
                          .format(gpu=gpu.name, cc=gpu.compute_capability),
                          _("FP16 runs at a small fraction of FP32 and there are no tensor cores: mixed precision "
                            "(AMP) slows it down"),
                          _("train in FP32 on this card, or use a Volta or newer GPU for AMP"))


def _link(gpu: GpuFact) -> str:
    return _("PCIe gen {gen} x{width} (max gen {max_gen} x{max_width})").format(
        gen=gpu.pcie_gen_current, width=gpu.pcie_width_current, max_gen=gpu.pcie_gen_max, max_width=gpu.pcie_width_max)


def check_pcie(facts: Facts) -> Iterator[Finding]:
    for gpu in facts.gpus:
        if gpu.pcie_width_current and gpu.pcie_width_max and gpu.pcie_width_current < gpu.pcie_width_max:
            yield Finding("pcie_degraded", "warn", _("GPU {index} ({gpu}) runs on a narrower link: {link}").format(
                              index=gpu.index, gpu=gpu.name, link=_link(gpu)),
                          _("host-to-device copies (data loading, offload) are slower in proportion"),
                          _("reseat the card in a full x16 slot; check the BIOS lane split and riser cables"))
        elif gpu.pcie_gen_current and gpu.pcie_gen_max and gpu.pcie_gen_current < gpu.pcie_gen_max:
            yield Finding("pcie_gen", "ok", _("GPU {index} link at gen {gen} of {max_gen}: normal when idle (the link "
                                              "speeds up under load)").format(
                              index=gpu.index, gen=gpu.pcie_gen_current, max_gen=gpu.pcie_gen_max))


def check_free_memory(facts: Facts) -> Iterator[Finding]:
    for gpu in facts.gpus:
        if not gpu.memory_total_bytes or gpu.memory_free_bytes is None:
            continue
        if gpu.memory_free_bytes < LOW_FREE_VRAM_SHARE * gpu.memory_total_bytes and gpu.processes:
            holders = ", ".join(f"{p.name or '?'} (pid {p.pid}, {(p.used_memory_bytes or 0) / 2**30:.1f} GiB)"
                                for p in gpu.processes)
            yield Finding("low_free_vram", "warn", _("GPU {index} has {free} of {total} GiB free").format(
                              index=gpu.index, free=f"{gpu.memory_free_bytes / 2**30:.1f}",
                              total=f"{gpu.memory_total_bytes / 2**30:.1f}"),
                          _("held by {processes}").format(processes=holders),
                          _("stop those processes or pick another GPU (CUDA_VISIBLE_DEVICES)"))


def check_toolkit(facts: Facts) -> Iterator[Finding]:
    torch = facts.framework("torch")
    nvcc = facts.toolkit.nvcc_version
    if torch is None or torch.cuda_version is None:
        return
    if nvcc and nvcc.split(".")[:2] != torch.cuda_version.split(".")[:2]:
        yield Finding("toolkit_mismatch", "warn",
                      _("the system CUDA toolkit is {nvcc}, PyTorch's is {cuda}").format(nvcc=nvcc,
                                                                                         cuda=torch.cuda_version),
                      _("harmless for running (the wheel brings its own CUDA libraries); it matters only when "
                        "building CUDA extensions (flash-attn, apex, custom ops), which must match torch's CUDA major "
                        "version"),
                      _("to build extensions, install CUDA toolkit {cuda} and point CUDA_HOME at it").format(
                          cuda=torch.cuda_version))
    system, bundled = facts.toolkit.cudnn_version, torch.cudnn_version
    if system and bundled and system.split(".")[0] != str(bundled)[0] and facts.env.ld_library_path:
        yield Finding("cudnn_mismatch", "warn", _("a system cuDNN {system} is on LD_LIBRARY_PATH; PyTorch ships "
                                                  "cuDNN {bundled}").format(system=system, bundled=bundled),
                      _("a library path that puts another cuDNN first can load the wrong one "
                        "(CUDNN_STATUS_VERSION_MISMATCH or crashes)"),
                      _("remove the system cuDNN directory from LD_LIBRARY_PATH for PyTorch jobs"))


def check_extensions(facts: Facts) -> Iterator[Finding]:
    """flash-attn, xformers, bitsandbytes, vLLM... beside torch: doctor/extensions.py."""
    yield from extension_findings(facts, facts.extensions)


CHECKS: tuple[Callable[[Facts], Iterator[Finding]], ...] = (
    check_driver, check_driver_age, check_mixed_gpus, check_visible_devices, check_torch, check_extensions,
    check_tensorflow, check_jax, check_half_precision,
    check_pcie, check_free_memory, check_toolkit,
)


def diagnose(facts: Facts) -> list[Finding]:
    """Every check's findings, fails first."""
    findings = [finding for check in CHECKS for finding in check(facts)]
    return sorted(findings, key=lambda f: STATUS_ORDER[f.status])


def smoke_findings(results: list[SmokeResult], error: str | None, facts: Facts) -> list[Finding]:
    """Findings from the --deep smoke test: does each GPU compute right, and how fast against its peak."""
    from gpufly.catalog import default_catalog

    if error:
        return [Finding("smoke", "fail", error, _("a GPU that cannot run a matmul cannot run a model"))]
    if not results:
        reason = _("no GPU PyTorch can use") if facts.gpus else _("no NVIDIA GPU")
        return [Finding("smoke", "ok" if not facts.gpus else "fail", _("smoke test skipped: {reason}").format(
            reason=reason))]
    catalog = default_catalog()
    findings = []
    for r in results:
        if not r.ok:
            detail = r.error or _("relative error {error} against the CPU").format(error=f"{r.relative_error:.2e}")
            findings.append(Finding("smoke", "fail", _("GPU {index} ({gpu}) computed a wrong {dtype} matmul: {detail}")
                                    .format(index=r.index, gpu=r.name, dtype=r.dtype, detail=detail),
                                    _("results on this GPU cannot be trusted"),
                                    _("check `nvidia-smi -q -d ECC,TEMPERATURE`, reseat the card, update the driver")))
            continue
        spec = catalog.match_device(r.name)
        field = {"float32": "fp32_tflops", "float16": "fp16_tensor_tflops", "bfloat16": "bf16_tensor_tflops"}[r.dtype]
        peak = getattr(spec, field) if spec else None
        derived = spec is not None and spec.is_derived(field)
        share = ((_(" = {share} of the {peak} TFLOPS derived peak") if derived
                  else _(" = {share} of the {peak} TFLOPS datasheet peak")).format(
                      share=f"{r.tflops / peak:.0%}", peak=f"{peak:g}") if peak and r.tflops else "")
        findings.append(Finding("smoke", "ok", _("GPU {index} ({gpu}) {dtype} matmul correct (error {error}), {tflops} "
                                                 "TFLOPS{share}").format(
            index=r.index, gpu=r.name, dtype=r.dtype, error=f"{r.relative_error:.1e}", tflops=f"{r.tflops:.1f}",
            share=share)))
    return findings
