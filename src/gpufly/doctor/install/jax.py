"""JAX's pip extras bundle CUDA: ``jax[cuda13]`` when the driver and every GPU allow it, else ``jax[cuda12]``,
else the CPU build."""

from __future__ import annotations

from collections.abc import Sequence

from gpufly.doctor.compat import (
    JaxExtra,
    check_platform,
    cuda_key,
    jax_extras,
    jax_facts,
    parse_compute_capability,
    parse_version,
    version_at_least,
)
from gpufly.doctor.facts import DriverFact, EnvFact
from gpufly.doctor.install.plan import (
    GpuInput,
    InstallPlan,
    TargetGpu,
    ignored_cuda,
    labels,
    loaded_driver_version,
    no_gpu_reason,
    normalize_cuda,
    target_gpus,
)
from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _

JAX_VERIFY = 'python -c "import jax; print(jax.default_backend(), jax.devices())"'


def choose_jax(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
               env: EnvFact | None = None, cuda: str | None = None) -> InstallPlan:
    """``jax[cuda13]`` when the driver and every GPU allow it, else ``jax[cuda12]``, else the CPU build.

    ``cuda`` ("12.6", "13") keeps the extra for that CUDA major version.
    """
    check_platform(platform)
    wanted = normalize_cuda(cuda)
    facts = jax_facts()
    cpu = facts["cpu_command"]
    support = facts["gpu_platforms"][platform]
    warnings = tuple(_(row["text"]) for row in facts["warnings"]
                     if row["when"] == "ld_library_path" and env is not None and env.ld_library_path)
    visible = target_gpus(gpus)
    version = loaded_driver_version(driver)
    if support == "unsupported":
        reason = (_("JAX has no NVIDIA GPU wheels for native Windows (use WSL2, where they are experimental): the CPU "
                    "build") if platform == "windows" else _("JAX has no NVIDIA GPU wheels for macOS: the CPU build"))
        return InstallPlan("jax", cpu, reason, variant="cpu", verify=JAX_VERIFY,
                           warnings=(*warnings, *ignored_cuda(cuda)))
    if version is None or not visible:
        return InstallPlan("jax", cpu, _("{reason}: the CPU build").format(
                               reason=no_gpu_reason(platform, version, visible, driver)),
                           variant="cpu", verify=JAX_VERIFY, warnings=(*warnings, *ignored_cuda(cuda)))
    extras = _jax_extras(wanted)
    if support == "experimental":
        warnings += (_("JAX's GPU wheels are experimental on {platform}").format(platform=platform.upper()),)
    return _plan_jax(extras, visible, version, wanted, cpu, warnings)


def _jax_extras(cuda: str | None) -> tuple[JaxExtra, ...]:
    """JAX's CUDA extras, newest first; with ``cuda``, the one for its major version (jax[cuda12] for 12.x)."""
    extras = jax_extras()
    if cuda is None:
        return extras
    kept = tuple(e for e in extras if cuda_key(e.cuda)[0] == cuda_key(cuda)[0])
    if not kept:
        known = ", ".join(f"jax[{e.extra}] (CUDA {cuda_key(e.cuda)[0]}.x)" for e in extras)
        raise GpuflyError(f"JAX has no wheels for CUDA {cuda}", hint=f"its CUDA extras: {known}")
    return kept


def _plan_jax(extras: Sequence[JaxExtra], visible: Sequence[TargetGpu], version: str, wanted: str | None, cpu: str,
              warnings: tuple[str, ...]) -> InstallPlan:
    """The newest extra every GPU and the driver meet; else the CPU build, naming the driver update if that is
    what stands in the way."""
    known = [g for g in visible if g.cc]
    asked = _(" (CUDA {cuda}, as asked)").format(cuda=f"{cuda_key(wanted)[0]}.x") if wanted else ""
    rejected = []
    drivers: list[JaxExtra] = []
    for extra in extras:
        old = [g for g in known if parse_compute_capability(g.cc or "0.0")
               < parse_compute_capability(extra.min_compute_capability)]
        if old:
            rejected.append(f"{extra.extra}: needs compute capability >= {extra.min_compute_capability}, "
                            f"{labels(old)} is older")
            continue
        if not version_at_least(version, extra.min_driver_linux):
            rejected.append(f"{extra.extra}: needs driver >= {extra.min_driver_linux}, this one is {version}")
            drivers.append(extra)
            continue
        reason = _("driver {driver} and {gpus} meet {extra}{asked} (driver >= {needed}, compute capability >= {cc})"
                   ).format(driver=version, gpus=labels(visible), extra=f"jax[{extra.extra}]", asked=asked,
                            needed=extra.min_driver_linux, cc=extra.min_compute_capability)
        return InstallPlan("jax", extra.command, reason, variant=extra.extra, cuda=extra.cuda, verify=JAX_VERIFY,
                           warnings=warnings, rejected=tuple(rejected))
    if drivers:
        lowest = min(drivers, key=lambda extra: parse_version(extra.min_driver_linux))
        needs_driver = lowest.min_driver_linux
        warnings += tuple(_("a driver >= {driver} runs {extra}").format(driver=e.min_driver_linux,
                                                                         extra=f"jax[{e.extra}]")
                          for e in drivers if e != lowest)
        return InstallPlan("jax", cpu, _("driver {driver} is too old for JAX's CUDA wheels{asked}: the CPU build until "
                                         "the NVIDIA driver is updated to at least {needed} ({extra})").format(
                               driver=version, asked=asked, needed=needs_driver, extra=f"jax[{lowest.extra}]"),
                           variant="cpu", needs_driver=needs_driver,
                           advice=_("update the NVIDIA driver to at least {driver}, then run: {command}").format(
                               driver=needs_driver, command=lowest.command),
                           verify=JAX_VERIFY, warnings=warnings, rejected=tuple(rejected))
    return InstallPlan("jax", cpu, _("{gpus} is older than any JAX CUDA wheel{asked} supports: the CPU build").format(
                           gpus=labels(visible), asked=asked), variant="cpu", verify=JAX_VERIFY, warnings=warnings,
                       rejected=tuple(rejected))
