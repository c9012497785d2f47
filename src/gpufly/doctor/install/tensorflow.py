"""TensorFlow with its CUDA from pip (``tensorflow[and-cuda]``) where the driver runs it, else the CPU build.

Each TensorFlow release is built with one CUDA version, so the choice is a release, not a build. Never
``tensorflow-gpu``: that package is removed from PyPI and only raises an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufly.doctor.compat import (
    TensorflowRelease,
    check_platform,
    cuda_key,
    driver_supports,
    min_driver_for,
    tensorflow_facts,
    tensorflow_releases,
)
from gpufly.doctor.facts import DriverFact, FrameworkFact
from gpufly.doctor.install.plan import (
    Alternative,
    GpuInput,
    InstallPlan,
    ignored_cuda,
    loaded_driver_version,
    no_gpu_reason,
    normalize_cuda,
    target_gpus,
)
from gpufly.errors import GpuflyError
from gpufly.i18n import gettext as _


def choose_tensorflow(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
                      python_version: str | None = None, installed: FrameworkFact | None = None,
                      cuda: str | None = None) -> InstallPlan:
    """TensorFlow with its CUDA from pip (``tensorflow[and-cuda]``) where the driver runs it, else the CPU build.

    Each release is built with one CUDA; ``cuda`` picks the newest release built with it (an error when
    none is). Never ``tensorflow-gpu``: that package is removed and only raises an error.
    """
    check_platform(platform)
    wanted = normalize_cuda(cuda)
    warnings = _tensorflow_warnings(installed)
    verify = tensorflow_facts()["gpu_check"]["verify"]
    visible = target_gpus(gpus)
    version = loaded_driver_version(driver)
    if platform in ("windows", "darwin") or version is None or not visible:
        release = _tensorflow_release(python_version)
        cpu = f"pip install {_tf_spec(release, None)}"
        warnings += ignored_cuda(cuda)
        if platform == "windows":
            return _tensorflow_windows(release, cpu, verify, warnings)
        return InstallPlan("tensorflow", cpu, _("{reason}: the CPU build").format(
                               reason=no_gpu_reason(platform, version, visible, driver)),
                           variant="cpu", release=release.release, verify=verify, warnings=warnings)
    release = _tensorflow_release(python_version, wanted)
    asked = _(", as asked") if wanted else ""
    if driver_supports(version, release.cuda, platform):
        return _tensorflow_gpu(release, version, asked, verify, warnings)
    return _tensorflow_driver_too_old(release, version, platform, python_version, verify, warnings)


def _tensorflow_cudas(releases: Sequence[TensorflowRelease]) -> str:
    """ "12.5 (TensorFlow 2.18 to 2.21), 12.3 (2.16 to 2.17), ..." for a hint."""
    spans: dict[str, list[str]] = {}
    for release in releases:
        spans.setdefault(release.cuda, []).append(release.release)
    parts = [f"{cuda} ({names[-1]} to {names[0]})" if len(names) > 1 else f"{cuda} ({names[0]})"
             for cuda, names in spans.items()]
    return "TensorFlow's CUDA versions: " + ", ".join(parts)


def _tensorflow_release(python_version: str | None, cuda: str | None = None) -> TensorflowRelease:
    """The newest release with wheels for this Python, among those built with ``cuda`` when one is asked for."""
    releases = tensorflow_releases()
    if cuda is not None:
        releases = tuple(r for r in releases if cuda_key(r.cuda) == cuda_key(cuda))
        if not releases:
            raise GpuflyError(f"no TensorFlow release in gpufly's table is built with CUDA {cuda}",
                              hint=_tensorflow_cudas(tensorflow_releases()))
    if python_version is None:
        return releases[0]
    for release in releases:
        if release.supports_python(python_version):
            return release
    built = f" built with CUDA {cuda}" if cuda else ""
    raise GpuflyError(f"no TensorFlow release{built} in gpufly's table has wheels for Python {python_version}",
                      hint=f"TensorFlow {releases[0].release} supports Python {releases[0].python_min} "
                           f"to {releases[0].python_max}")


def _tensorflow_warnings(installed: FrameworkFact | None) -> tuple[str, ...]:
    """The GPU check to use, and a removed package that must go before the install."""
    facts = tensorflow_facts()
    check = facts["gpu_check"]
    warnings = [_("check the GPU with {use}; {deprecated} is deprecated").format(use=check["use"],
                                                                                 deprecated=check["deprecated"])]
    distribution = (installed.distribution or "").replace("_", "-").lower() if installed else ""
    for row in facts["removed_packages"]:
        if distribution == row["package"]:
            warnings.append(_("{package} is installed: it is removed from PyPI ({note}); run {command} first").format(
                package=row["package"], note=_(row["note"]), command=f"pip uninstall -y {row['package']}"))
    return tuple(warnings)


def _tf_spec(release: TensorflowRelease, extra: str | None) -> str:
    name = f"tensorflow[{extra}]" if extra else "tensorflow"
    pin = "" if release == tensorflow_releases()[0] else f"=={release.release}.*"
    return f"'{name}{pin}'" if extra or pin else name


def _tensorflow_gpu(release: TensorflowRelease, version: str, asked: str, verify: str,
                    warnings: tuple[str, ...]) -> InstallPlan:
    if not release.and_cuda:
        since = tensorflow_facts()["and_cuda"]["since"]
        warnings += (_("TensorFlow {release} does not bring CUDA with it (the and-cuda extra starts with {since}): "
                       "install CUDA {cuda} and cuDNN {cudnn} yourself").format(
                         release=release.release, since=since, cuda=release.cuda, cudnn=release.cudnn),)
        reason = _("TensorFlow {release} is tested with CUDA {cuda}{asked}, and cuDNN {cudnn}; driver {driver} runs "
                   "it").format(release=release.release, cuda=release.cuda, asked=asked, cudnn=release.cudnn,
                                driver=version)
        return InstallPlan("tensorflow", f"pip install {_tf_spec(release, None)}", reason, variant="system-cuda",
                           release=release.release, cuda=release.cuda, verify=verify, warnings=warnings)
    reason = _("driver {driver} runs CUDA {cuda}{asked}, which TensorFlow {release} is tested with (cuDNN {cudnn}); "
               "the and-cuda extra installs both from pip").format(driver=version, cuda=release.cuda, asked=asked,
                                                                   release=release.release, cudnn=release.cudnn)
    return InstallPlan("tensorflow", f"pip install {_tf_spec(release, 'and-cuda')}", reason, variant="and-cuda",
                       release=release.release, cuda=release.cuda, verify=verify, warnings=warnings)


def _tensorflow_driver_too_old(release: TensorflowRelease, version: str, platform: str, python_version: str | None,
                               verify: str, warnings: tuple[str, ...]) -> InstallPlan:
    """The CPU build until the driver is updated, and the newest older release this driver already runs."""
    cpu = f"pip install {_tf_spec(release, None)}"
    need = min_driver_for(release.cuda, platform)
    alternatives = []
    for older in tensorflow_releases():
        usable = python_version is None or older.supports_python(python_version)
        if older.and_cuda and usable and driver_supports(version, older.cuda, platform):
            alternatives.append(Alternative(f"pip install {_tf_spec(older, 'and-cuda')}",
                                            _("keeps driver {driver}: TensorFlow {release} uses CUDA {cuda}").format(
                                                driver=version, release=older.release, cuda=older.cuda)))
            break
    reason = _("driver {driver} is too old for CUDA {cuda} of TensorFlow {release} (needs >= {needed}): the CPU build "
               "until the driver is updated").format(driver=version, cuda=release.cuda, release=release.release,
                                                     needed=need)
    return InstallPlan("tensorflow", cpu, reason, variant="cpu", release=release.release, cuda=release.cuda,
                       needs_driver=need,
                       advice=_("update the NVIDIA driver to at least {driver}, then run: {command}").format(
                           driver=need, command=f"pip install {_tf_spec(release, 'and-cuda')}"),
                       verify=verify, warnings=warnings, alternatives=tuple(alternatives))


def _tensorflow_windows(release: TensorflowRelease, cpu: str, verify: str, warnings: tuple[str, ...]) -> InstallPlan:
    """Native Windows lost GPU support after 2.10: the CPU build here, WSL2 or the old conda recipe as choices."""
    native = tensorflow_facts()["native_windows_gpu"]
    reason = _("TensorFlow {release} was the last release with GPU support on native Windows; newer ones use the GPU "
               "only under WSL2 (Windows 10 build {build} or later)").format(
        release=native["last_release"], build=native["wsl_min_windows_build"])
    alternatives = (
        Alternative("pip install 'tensorflow[and-cuda]'", _("inside WSL2: the GPU build of the current release")),
        Alternative(" && ".join(native["legacy_recipe"]),
                    _("native Windows GPU with TensorFlow {release} and conda's CUDA 11.2 / cuDNN 8.1").format(
                        release=native["last_release"])),
    )
    return InstallPlan("tensorflow", cpu, _("{reason}: the CPU build here").format(reason=reason), variant="cpu",
                       release=release.release,
                       verify=verify, warnings=warnings, alternatives=alternatives)
