"""The torch wheel for this machine: the newest CUDA build its driver runs that has code for every GPU.

A release's CUDA builds are filtered twice: by the architectures each wheel ships (``_fits``), then by what the
driver runs (``_runnable``: natively, or by minor-version compatibility where the build has native code for
every GPU). When the newest release has nothing for the GPUs, the planner walks back through
older releases; when the driver is too old for every fitting build, it names the driver update and meanwhile
offers the newest older build the present driver runs (``_driver_too_old``). When no build has native code for
every GPU on the machine, it gives a build per kind of GPU and how to show CUDA only one kind (``_split_plan``);
a build that reaches a GPU only through PTX JIT is then an alternative that says so, never the plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufly.doctor.compat import (
    TorchRelease,
    TorchVariant,
    check_platform,
    cuda_key,
    driver_supports,
    matching_arch,
    min_driver_for,
    minor_compat,
    parse_compute_capability,
    parse_version,
    runs_by_minor_compat,
    toolkit_driver,
    torch_index_url,
    torch_release,
    torch_releases,
)
from gpufly.doctor.facts import DriverFact, GpuFact
from gpufly.doctor.install.plan import (
    Alternative,
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

TORCH_VERIFY = 'python -c "import torch; print(torch.cuda.is_available(), torch.cuda.get_arch_list())"'


@dataclass(frozen=True)
class _TorchQuery:
    """The machine and the user's constraints, asked of every release and build the planner looks at."""

    gpus: tuple[TargetGpu, ...]
    version: str
    """The driver version."""
    driver_cuda: str | None
    """The CUDA version the driver reports, the best evidence of what it runs natively."""
    platform: str
    machine: str | None
    cuda: str | None = None
    """The CUDA version the user asked for ("12.6"), if any."""
    explicit: bool = False
    """Whether the user asked for a release."""
    unrestricted: InstallPlan | None = None
    """The plan without the user's --cuda or release: the way out named when those fail."""


@dataclass(frozen=True)
class _Fit:
    """A build with code for every GPU."""

    variant: TorchVariant
    matches: tuple[str, ...]
    """Per GPU, the entry it runs ("sm_60", "compute_120"), in GPU order."""


@dataclass(frozen=True)
class _Candidate:
    """The release the walk stopped at, its builds with code for the GPUs, and the releases older than it."""

    release: TorchRelease
    covering: tuple[_Fit, ...]
    walked_from: str | None
    """The newer release first asked about, when it had no build for the GPUs."""
    older: tuple[TorchRelease, ...]


@dataclass(frozen=True)
class GpuBuild:
    """The build for one kind of GPU, on a machine where no single build has native code for every GPU."""

    gpu: TargetGpu
    indexes: tuple[int, ...]
    """The GPUs of this kind as NVML and nvidia-smi number them (PCI bus order); empty when unknown."""
    plan: InstallPlan

    @property
    def label(self) -> str:
        """ "NVIDIA GeForce RTX 5090 (GPU 0, 12.0)": the name and the index nvidia-smi shows."""
        if not self.indexes or self.gpu.name is None:
            return self.gpu.label
        return f"{self.gpu.name} (GPU {','.join(str(i) for i in self.indexes)}, {self.gpu.cc})"

    @property
    def select(self) -> str:
        """The environment that shows CUDA only these GPUs. CUDA numbers GPUs fastest first unless told to use
        the PCI bus order, which is the order nvidia-smi and NVML (the indexes here) use."""
        if not self.indexes:
            return "CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=" + _("<nvidia-smi index of {gpu}>").format(
                gpu=self.gpu.label)
        return f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={','.join(str(i) for i in self.indexes)}"


def choose_torch(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
                 python_version: str | None = None, release: str | None = None, cuda: str | None = None,
                 machine: str | None = None) -> InstallPlan:
    """The torch wheel for this machine: among a release's CUDA builds (the newest release by default), drop
    those the driver cannot run and those without code for every GPU, and take the newest CUDA left.

    When the GPUs are too old for every build of the newest release, walk back to the newest release that
    still has code for them. ``cuda`` ("12.6" or "cu126") restricts the choice to that CUDA version. When no
    build has native code for every GPU (an RTX 5090 beside a GTX 1080 Ti), the plan is the build for the GPU
    with the newest one, with the build for each other GPU and how to show CUDA only one kind of GPU.
    """
    joint = _one_build(gpus, driver, platform, python_version, release, cuda, machine)
    if release is not None or cuda is not None:
        return joint
    builds = _per_gpu(joint, gpus, driver, platform, python_version, machine)
    return _split_plan(joint, builds, platform, machine) if builds else joint


def builds_per_gpu(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str = "linux",
                   python_version: str | None = None, machine: str | None = None) -> tuple[GpuBuild, ...]:
    """One build per kind of GPU, the plan's own first, when no single build has native code for every GPU
    here; empty when one build serves them all (or there is one kind of GPU)."""
    joint = _one_build(gpus, driver, platform, python_version, None, None, machine)
    return _per_gpu(joint, gpus, driver, platform, python_version, machine)


def _one_build(gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str, python_version: str | None,
               release: str | None, cuda: str | None, machine: str | None) -> InstallPlan:
    """The one build for every GPU (the planner before it considers a build per GPU)."""
    check_platform(platform)
    wanted = normalize_cuda(cuda)
    releases = _torch_candidates(release, python_version)
    pinned = release is not None or releases[0] != torch_releases()[0]
    visible = target_gpus(gpus)
    version = loaded_driver_version(driver)
    if platform == "darwin" or version is None or not visible:
        return InstallPlan("torch", _torch_command(releases[0], "cpu", platform, pinned),
                           _("{reason}: the CPU build").format(reason=no_gpu_reason(platform, version, visible,
                                                                                    driver)),
                           variant="cpu", release=releases[0].release, verify=TORCH_VERIFY,
                           warnings=ignored_cuda(cuda))
    query = _TorchQuery(visible, version, driver.cuda_version if driver is not None else None, platform, machine)
    if wanted is not None or release is not None:
        unrestricted = _plan_torch(query, _torch_candidates(None, python_version), ())
        query = replace(query, cuda=wanted, explicit=release is not None, unrestricted=unrestricted)
    if wanted is not None:
        releases = _with_cuda(releases, wanted, explicit=release is not None)
    return _plan_torch(query, releases, _torch_warnings(visible, platform))


def _kinds(gpus: Sequence[GpuInput]) -> list[tuple[GpuInput, tuple[int, ...]]]:
    """Each kind of GPU once (name and compute capability), with the indexes of the GPUs of that kind."""
    kinds: dict[TargetGpu, tuple[GpuInput, tuple[int, ...]]] = {}
    for gpu in gpus:
        key = target_gpus([gpu])[0]
        first, indexes = kinds.get(key, (gpu, ()))
        kinds[key] = (first, (*indexes, gpu.index) if isinstance(gpu, GpuFact) else indexes)
    return list(kinds.values())


def _native_everywhere(plan: InstallPlan, gpus: Sequence[TargetGpu], platform: str, machine: str | None) -> bool:
    """Whether the plan's build has native code (SASS) for every GPU; True where gpufly cannot tell (an unknown
    architecture list or compute capability), so that it splits only on what it knows."""
    if not plan.uses_gpu or plan.release is None or plan.variant is None:
        return False
    arches = torch_release(plan.release).variant(plan.variant).arches(platform, machine)
    if arches is None:
        return True
    matches = [matching_arch(g.cc, arches) for g in gpus if g.cc]
    return all(match is not None and match[0] == "sass" for match in matches)


def _per_gpu(joint: InstallPlan, gpus: Sequence[GpuInput], driver: DriverFact | None, platform: str,
             python_version: str | None, machine: str | None) -> tuple[GpuBuild, ...]:
    """A build per kind of GPU when the joint plan has no native code for one of them and the GPUs' own
    builds differ; the newest GPU with a build that runs today first."""
    kinds = [(gpu, indexes) for gpu, indexes in _kinds(gpus) if target_gpus([gpu])[0].cc]
    if len(kinds) < 2 or _native_everywhere(joint, target_gpus(gpus), platform, machine):
        return ()
    builds = [GpuBuild(target_gpus([gpu])[0], indexes,
                       _one_build([gpu], driver, platform, python_version, None, None, machine))
              for gpu, indexes in kinds]
    if len({(b.plan.release, b.plan.variant, b.plan.command) for b in builds}) == 1:
        return ()
    return tuple(sorted(builds, key=_build_rank, reverse=True))


def _build_rank(build: GpuBuild) -> tuple[bool, tuple[int, int]]:
    """A build that runs on this driver today first, then the newest GPU: the card a job would be run on."""
    return build.plan.uses_gpu, parse_compute_capability(build.gpu.cc or "0.0")


def _jit_phrase(plan: InstallPlan, gpus: Sequence[TargetGpu], platform: str, machine: str | None) -> str:
    """ "the NVIDIA GeForce RTX 5090 (12.0) only as PTX (compute_90) that the driver JIT-compiles on first use":
    how a joint build reaches the GPUs it has no native code for."""
    arches = torch_release(plan.release or "").variant(plan.variant or "").arches(platform, machine) or ()
    jit = [(g, matching_arch(g.cc, arches)) for g in gpus if g.cc]
    parts = [_("the {gpu} only as PTX ({arch}) that the driver JIT-compiles on first use").format(
                 gpu=g.label, arch=match[1]) for g, match in jit if match and match[0] == "ptx"]
    return _(" and ").join(parts)


def _split_plan(joint: InstallPlan, builds: Sequence[GpuBuild], platform: str, machine: str | None) -> InstallPlan:
    """The plan for a machine whose GPUs need different builds: the first build's command, the others as
    alternatives, CUDA_VISIBLE_DEVICES to choose, and a joint build that JIT-compiles for a GPU only as a
    labelled alternative."""
    first, others = builds[0], builds[1:]
    plan = first.plan
    everyone = ", ".join(b.label for b in builds)
    reason = _("no torch build has native code for every GPU here ({gpus}), so one process can use only one kind: "
               "one build per GPU. For the {gpu}: {reason}").format(gpus=everyone, gpu=first.label, reason=plan.reason)
    steps = [_("run jobs for the {gpu} with {select}, so that CUDA sees only it").format(gpu=first.label,
                                                                                         select=first.select)]
    steps += [_("for the {gpu}, in another virtual environment: {command}, run with {select}").format(
                  gpu=b.label, command=b.plan.command or b.plan.advice, select=b.select) for b in others]
    advice = _("; ").join([*([plan.advice] if plan.advice else []), *steps])
    alternatives = [Alternative(b.plan.command, _("for the {gpu}: {reason}; run with {select}").format(
                        gpu=b.label, reason=b.plan.reason, select=b.select))
                    for b in others if b.plan.command]
    if joint.uses_gpu and joint.command:
        jit = _jit_phrase(joint, [b.gpu for b in builds], platform, machine)
        alternatives.append(Alternative(joint.command, _(
            "torch {release} {build} has code for every GPU, but runs on {jit}: a slow first start (each kernel "
            "compiled at run time) and code tuned for an older GPU").format(release=joint.release,
                                                                            build=joint.variant, jit=jit)))
    hidden = [_("with this build the {gpu} cannot run CUDA code (\"no kernel image is available for execution on the "
                "device\") unless CUDA_VISIBLE_DEVICES hides it").format(gpu=b.label) for b in others
              if b.plan.variant != plan.variant or b.plan.release != plan.release]
    own = tuple(replace(alt, why=_("for the {gpu}: {why}").format(gpu=first.label, why=alt.why))
                for alt in plan.alternatives)
    return replace(plan, reason=reason, advice=advice, warnings=(*hidden, *plan.warnings),
                   alternatives=(*alternatives, *own))


def _torch_warnings(gpus: Sequence[TargetGpu], platform: str) -> tuple[str, ...]:
    """What a torch plan cannot check here, said up front."""
    unknown = [_("compute capability of {gpu} unknown: gpufly could not check that the build has code for it")
               .format(gpu=g.label) for g in gpus if not g.cc]
    if platform == "windows":
        unknown.append(_("gpufly knows the Linux wheels' architecture lists and takes the Windows wheels to match "
                         "(without the PTX PyTorch embeds on Linux only)"))
    return tuple(unknown)


def _torch_command(release: TorchRelease, variant: str, platform: str, pinned: bool = True) -> str:
    spec = f"torch=={release.release}.*" if pinned else "torch"
    if variant == "cpu" and platform in ("windows", "darwin"):
        return f"pip install {spec}"
    return f"pip install {spec} --index-url {torch_index_url(variant)}"


def _torch_candidates(release: str | None, python_version: str | None) -> list[TorchRelease]:
    """The releases to consider, newest first: the one asked for, or all with a wheel for this Python."""
    if release is not None:
        chosen = torch_release(release)
        if python_version and not chosen.supports_python(python_version):
            raise GpuflyError(f"torch {chosen.release} has no wheels for Python {python_version} "
                              f"(it supports {chosen.python_min} to {chosen.python_max})",
                              hint="choose another release, or run gpufly with another Python")
        return [chosen]
    releases = [r for r in torch_releases() if python_version is None or r.supports_python(python_version)]
    if not releases:
        known = torch_releases()
        raise GpuflyError(f"no torch release in gpufly's table has wheels for Python {python_version}",
                          hint=f"torch {known[0].release} supports Python {known[0].python_min} "
                               f"to {known[0].python_max}")
    return releases


def _with_cuda(releases: list[TorchRelease], cuda: str, explicit: bool) -> list[TorchRelease]:
    kept = [r for r in releases if any(v.cuda == cuda for v in r.variants)]
    if kept:
        return kept
    if explicit:
        builds = ", ".join(f"{v.cuda} ({v.name})" for v in releases[0].variants)
        raise GpuflyError(f"torch {releases[0].release} has no CUDA {cuda} build", hint=f"its builds: {builds}")
    versions = sorted({v.cuda for r in releases for v in r.variants}, key=cuda_key)
    raise GpuflyError(f"no torch release in gpufly's table has a CUDA {cuda} build",
                      hint=f"CUDA versions with torch builds: {', '.join(versions)}")


def _fits(release: TorchRelease, query: _TorchQuery) -> tuple[list[_Fit], list[_Fit], list[str]]:
    """The builds of a release with code for every GPU, those whose list gpufly lacks, and why the rest fail."""
    covering: list[_Fit] = []
    unknown: list[_Fit] = []
    rejected: list[str] = []
    for variant in release.variants:
        if query.cuda is not None and variant.cuda != query.cuda:
            continue
        if variant.status == "built" and query.cuda is None:
            rejected.append(f"{variant.name}: in the build scripts but not in PyTorch's release matrix; "
                            f"ask for it with CUDA {variant.cuda}")
            continue
        arches = variant.arches(query.platform, query.machine)
        if arches is None:
            unknown.append(_Fit(variant, ()))
            rejected.append(f"{variant.name}: gpufly's table lacks its architecture list")
            continue
        found = [(g, matching_arch(g.cc, arches)) for g in query.gpus if g.cc]
        missing = [g for g, match in found if match is None]
        if missing:
            rejected.append(f"{variant.name}: no code for {labels(missing)} (it ships {' '.join(arches)})")
        else:
            covering.append(_Fit(variant, tuple(match[1] for _gpu, match in found if match)))
    return covering, unknown, rejected


def _jit_gpus(fit: _Fit, query: _TorchQuery) -> list[TargetGpu]:
    """The GPUs that would run the build only from PTX, JIT-compiled by the driver."""
    known = [g for g in query.gpus if g.cc]
    return [gpu for gpu, entry in zip(known, fit.matches, strict=False) if entry.startswith("compute_")]


def _runnable(fits: Sequence[_Fit], query: _TorchQuery) -> tuple[list[_Fit], list[_Fit], list[str]]:
    """The fits this driver runs with the full feature set, those it runs by minor-version compatibility, and why
    the rest are out.

    Minor-version compatibility runs a build of a newer CUDA minor only on GPUs it has native code (SASS) for:
    the older driver cannot JIT-compile PTX made by the newer toolkit (NVIDIA's CUDA Compatibility guide).
    """
    native: list[_Fit] = []
    compat: list[_Fit] = []
    rejected: list[str] = []
    for fit in fits:
        cuda = fit.variant.cuda
        if not driver_supports(query.version, cuda, query.platform):
            rejected.append(f"{fit.variant.name}: needs driver >= {min_driver_for(cuda, query.platform)}, this one "
                            f"is {query.version}")
        elif not runs_by_minor_compat(query.version, cuda, query.platform, query.driver_cuda):
            native.append(fit)
        elif jit := _jit_gpus(fit, query):
            rejected.append(f"{fit.variant.name}: driver {query.version} runs CUDA {cuda} only through minor-version "
                            f"compatibility, which cannot JIT-compile the build's PTX for {labels(jit)} "
                            f"({minor_compat().ptx_error})")
        else:
            compat.append(fit)
    return native, compat, rejected


def _compat_note(query: _TorchQuery, fit: _Fit) -> str:
    """The caveat of a build the driver runs only through minor-version compatibility."""
    cuda = fit.variant.cuda
    shipped = toolkit_driver(cuda, query.platform)
    full = (_("a driver >= {driver}").format(driver=shipped) if shipped
            else _("a driver that reports CUDA {cuda} or newer").format(cuda=cuda))
    native_code = (_("it has native code for {gpus}, so no PTX JIT is needed; ").format(
                       gpus=_gpu_phrase(query.gpus, fit)) if fit.matches else "")
    return _("driver {driver} runs CUDA {cuda} only through minor-version compatibility (NVIDIA's CUDA Compatibility "
             "guide): {native}{caveat}; {full} runs it natively").format(
        driver=query.version, cuda=cuda, native=native_code, caveat=_(minor_compat().caveat), full=full)


def _newest(fits: Sequence[_Fit]) -> _Fit:
    return max(fits, key=lambda f: cuda_key(f.variant.cuda))


def _gpu_phrase(gpus: Sequence[TargetGpu], fit: _Fit) -> str:
    if not fit.matches:
        return labels(gpus)
    known = [g for g in gpus if g.cc]
    return ", ".join(gpu.running(entry) for gpu, entry in zip(known, fit.matches, strict=True))


def _plan_torch(query: _TorchQuery, releases: Sequence[TorchRelease], warnings: tuple[str, ...]) -> InstallPlan:
    """Walk the releases, newest first, to the first with a build that has code for every GPU; then let the
    driver choose among its builds. The CPU build when no release has code for the GPUs."""
    first_rejected: list[str] = []
    for position, release in enumerate(releases):
        covering, unknown, rejected = _fits(release, query)
        if position == 0:
            first_rejected = rejected
        if not covering and query.explicit and unknown:
            warnings = (*warnings, _("gpufly's table lacks the architecture lists of torch {release}: check "
                                     "torch.cuda.get_arch_list() after installing").format(release=release.release))
            covering = unknown
        if covering:
            walked = None if position == 0 else releases[0].release
            candidate = _Candidate(release, tuple(covering), walked, tuple(releases[position + 1:]))
            return _torch_driver_choice(query, candidate, warnings, tuple(first_rejected))
    _raise_if_constrained(query, releases)
    return InstallPlan("torch", _torch_command(releases[0], "cpu", query.platform, pinned=False),
                       _("no torch build in gpufly's table has code for {gpus}: the CPU build").format(
                           gpus=labels(query.gpus)),
                       variant="cpu", release=releases[0].release, verify=TORCH_VERIFY, warnings=warnings,
                       rejected=tuple(first_rejected))


def _raise_if_constrained(query: _TorchQuery, releases: Sequence[TorchRelease]) -> None:
    """A release or CUDA the user asked for that has no code for their GPUs is their mistake to fix; the hint
    names what gpufly would pick without the constraint, which also has to run on this driver."""
    if not query.explicit and query.cuda is None:
        return
    asked = " and ".join(part for part in (
        f"torch {releases[0].release}" if query.explicit else "", f"CUDA {query.cuda}" if query.cuda else "") if part)
    raise GpuflyError(f"no build of {asked} has code for {labels(query.gpus)}", hint=_way_out(query.unrestricted))


def _way_out(unrestricted: InstallPlan | None) -> str:
    """The unrestricted plan in a hint: the build that runs here today, else the driver it needs."""
    if unrestricted is None or unrestricted.variant in (None, "cpu"):
        return "no torch build in gpufly's table has code for them"
    if unrestricted.uses_gpu:
        return (f"torch {unrestricted.release} {unrestricted.variant} has code for them and runs on this driver: "
                f"{unrestricted.command}")
    return (f"torch {unrestricted.release} {unrestricted.variant} has code for them after a driver update to "
            f"{unrestricted.needs_driver} or newer")


def _walk_prefix(query: _TorchQuery, candidate: _Candidate) -> str:
    """How the reason starts when the newest release had nothing for the GPUs."""
    if candidate.walked_from is None:
        return ""
    return _("torch {release} has no build with code for {gpus}; ").format(release=candidate.walked_from,
                                                                            gpus=labels(query.gpus))


def _torch_driver_choice(query: _TorchQuery, candidate: _Candidate, warnings: tuple[str, ...],
                         rejected: tuple[str, ...]) -> InstallPlan:
    """The newest of the candidate's builds the driver runs, natively before by minor-version compatibility."""
    native, compat, too_new = _runnable(candidate.covering, query)
    rejected = (*rejected, *too_new)
    if not native and not compat:
        return _driver_too_old(query, candidate, warnings, rejected)
    release, fit = candidate.release, _newest([*native, *compat])
    variant = fit.variant
    notes = list(warnings)
    reason_text = _("torch {release} {build}{asked}: the newest build with code for {gpus} that driver {driver} "
                    "runs natively")
    others: tuple[Alternative, ...] = ()
    if fit not in native:
        reason_text = _("torch {release} {build}{asked}: the newest build with code for {gpus} that driver {driver} "
                        "runs through minor-version compatibility")
        notes.append(_compat_note(query, fit))
        if native:
            older = _newest(native).variant
            others = (Alternative(_torch_command(release, older.name, query.platform),
                                  _("torch {release} {build}, which driver {driver} runs natively (CUDA's full "
                                    "feature set)").format(release=release.release, build=older.name,
                                                           driver=query.version)),)
    if variant.status == "experimental":
        notes.append(_("{build} is marked experimental for torch {release} in PyTorch's release matrix").format(
            build=variant.name, release=release.release))
    asked = _(" (CUDA {cuda}, as asked)").format(cuda=query.cuda) if query.cuda else ""
    reason = _walk_prefix(query, candidate) + reason_text.format(
        release=release.release, build=variant.name, asked=asked, gpus=_gpu_phrase(query.gpus, fit),
        driver=query.version)
    return InstallPlan("torch", _torch_command(release, variant.name, query.platform), reason, variant=variant.name,
                       release=release.release, cuda=variant.cuda, verify=TORCH_VERIFY, warnings=tuple(notes),
                       alternatives=others, rejected=rejected)


def _cheapest(fits: Sequence[_Fit], platform: str) -> _Fit:
    """The fit the oldest driver runs; among builds with the same floor (one CUDA family), the newest CUDA."""
    return min(fits, key=lambda f: (parse_version(min_driver_for(f.variant.cuda, platform)),
                                    tuple(-part for part in cuda_key(f.variant.cuda))))


def _torch_fallback(query: _TorchQuery, releases: Sequence[TorchRelease]) -> tuple[TorchRelease, _Fit, bool] | None:
    """The newest older build with code for the GPUs that this driver already runs, and whether natively."""
    for release in releases:
        covering, _unknown, _why = _fits(release, query)
        native, compat, _too_new = _runnable(covering, query)
        if native or compat:
            fit = _newest([*native, *compat])
            return release, fit, fit in native
    return None


def _driver_too_old(query: _TorchQuery, candidate: _Candidate, warnings: tuple[str, ...],
                    rejected: tuple[str, ...]) -> InstallPlan:
    """No build of the release runs on this driver: name the lowest driver that runs one of its builds with code
    for the GPUs (the newest build's driver as a note), and meanwhile install the newest older torch the present
    driver runs, so the GPU works today (no command if there is none). Where --cuda is what rules out every
    build, say so, and offer the build gpufly picks without it."""
    release, platform, version, cuda = candidate.release, query.platform, query.version, query.cuda
    target = _cheapest(candidate.covering, platform).variant
    need = min_driver_for(target.cuda, platform)
    after = _torch_command(release, target.name, platform)
    notes = list(warnings)
    later = [Alternative(after, _("after updating the driver to {driver} or newer: torch {release} {build}").format(
        driver=need, release=release.release, build=target.name))]
    newest = _newest(candidate.covering).variant
    newest_need = min_driver_for(newest.cuda, platform)
    if parse_version(newest_need) > parse_version(need):
        notes.append(_("a driver >= {driver} runs torch {release} {build}, its newest build with code for {gpus}")
                     .format(driver=newest_need, release=release.release, build=newest.name, gpus=labels(query.gpus)))
        later.append(Alternative(_torch_command(release, newest.name, platform),
                                 _("after updating the driver to {driver} or newer: torch {release} {build}, the "
                                   "newest build").format(driver=newest_need, release=release.release,
                                                          build=newest.name)))
    advice = _("update the NVIDIA driver to at least {driver}, then run: {command}").format(driver=need, command=after)
    asked = _(" (CUDA {cuda}, as asked)").format(cuda=cuda) if cuda else ""
    reason = _walk_prefix(query, candidate) + _(
        "driver {driver} is too old for every torch {release} build{asked} with code for {gpus}; update the NVIDIA "
        "driver to at least {needed}").format(driver=version, release=release.release, asked=asked,
                                              gpus=labels(query.gpus), needed=need)
    unrestricted = query.unrestricted
    if cuda and unrestricted is not None and unrestricted.command is not None and unrestricted.uses_gpu:
        later.append(Alternative(unrestricted.command, _("without --cuda {cuda}: torch {release} {build}, which "
                                                         "driver {driver} runs").format(
            cuda=cuda, release=unrestricted.release, build=unrestricted.variant, driver=version)))
        reason += _(", or drop --cuda: torch {release} {build} runs on this driver").format(
            release=unrestricted.release, build=unrestricted.variant)
        advice += _("; or, without --cuda {cuda}, run: {command}").format(cuda=cuda, command=unrestricted.command)
    fallback = _torch_fallback(query, candidate.older)
    if fallback is None:
        return InstallPlan("torch", None, reason, variant=target.name, release=release.release, cuda=target.cuda,
                           needs_driver=need, advice=advice, verify=TORCH_VERIFY, warnings=tuple(notes),
                           alternatives=tuple(later[1:]), rejected=rejected)
    old_release, fit, native = fallback
    if not native:
        notes.append(_compat_note(query, fit))
    return InstallPlan("torch", _torch_command(old_release, fit.variant.name, platform),
                       _("{reason}, or keep it with torch {release} {build} ({gpus})").format(
                           reason=reason, release=old_release.release, build=fit.variant.name,
                           gpus=_gpu_phrase(query.gpus, fit)),
                       variant=fit.variant.name, release=old_release.release, cuda=fit.variant.cuda,
                       needs_driver=need, advice=advice, verify=TORCH_VERIFY, warnings=tuple(notes),
                       alternatives=tuple(later), rejected=rejected)
