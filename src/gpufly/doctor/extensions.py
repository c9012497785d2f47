"""GPU extension packages beside torch (flash-attn, xformers, bitsandbytes, vLLM...): facts in, findings out.

These packages ship compiled code built against one torch, one CUDA major version and one C++ ABI, and
support some GPU architectures only; after a torch upgrade they fail to import ("undefined symbol") or
silently lose their kernels. ``extension_findings`` checks each installed one on three counts:

- does it import (a child process imported it: ``extension_probe.py``), and what its error text means;
- was it built for this torch and CUDA: what it records (flash-attn's wheel tag ``+cu12torch2.4cxx11abiFALSE``,
  xformers' ``cpp_lib.json``, DeepSpeed's prebuilt ops, bitsandbytes' CUDA libraries) and what its metadata
  pins (vLLM's ``torch==2.5.1``, torch's own ``triton==3.1.0``);
- does it support this GPU (FlashAttention 2 needs Ampere or newer, vLLM compute capability 7.0...).

Pure logic: the package table with each rule's source is ``data/extensions.json``. This module imports
neither ``facts`` nor ``checks`` at load, because ``facts.Facts`` holds ``ExtensionFact``s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from gpufly.doctor.compat import DATA_DIR, parse_compute_capability, parse_version
from gpufly.errors import GpuflyError, unknown_choice
from gpufly.i18n import gettext as _
from gpufly.records import checked, from_dict

if TYPE_CHECKING:
    from gpufly.doctor.checks import Finding
    from gpufly.doctor.facts import Facts, FrameworkFact, GpuFact

TABLE_PATH = DATA_DIR / "extensions.json"
BuildRecord = Literal["wheel_tag", "xformers_cpp_lib", "deepspeed_installed_ops", "bitsandbytes_libraries", "none"]
Status = Literal["fail", "warn"]
_WHEEL_TAG = re.compile(r"^cu(?P<cuda>\d+)(?:torch(?P<torch>\d+\.\d+))?(?:cxx11abi(?P<abi>TRUE|FALSE))?$",
                        re.IGNORECASE)
"""flash-attn, causal-conv1d and mamba-ssm: ``cu12torch2.4cxx11abiFALSE`` / ``cu122torch2.3cxx11abiTRUE``;
auto-gptq: ``cu118``."""


# --- the table ----------------------------------------------------------------------------------

def _specifier(text: str) -> None:
    try:
        SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise GpuflyError(f"cannot read version range {text!r}", hint="expected e.g. >=2 or >=0.46,<0.48") from exc


def _capability(text: str) -> None:
    parse_compute_capability(text)


@dataclass(frozen=True)
class GpuRule:
    """The GPUs a package's releases in ``versions`` support; ``status`` is how bad running elsewhere is."""

    versions: str = field(metadata=checked(_specifier))
    """A PEP 440 range of the package's versions ("" for all)."""
    min_cc: str = field(metadata=checked(_capability))
    status: Status
    why: str
    fix: str
    source: str
    max_cc: str | None = field(default=None, metadata=checked(_capability))


@dataclass(frozen=True)
class PairedRelease:
    """The release of a package built for one torch minor version, from the package's own compatibility table."""

    torch: str
    """"2.9": torch's major.minor."""
    release: str
    source: str


@dataclass(frozen=True)
class Package:
    """One extension package: how to import it, where it records its build, how to rebuild it."""

    id: str
    distribution: str
    label: str
    imports: tuple[str, ...]
    """Modules the child imports, in order; the first is the package."""
    build_record: BuildRecord
    fix: str
    """The command that rebuilds or reinstalls it for this torch; placeholders {version}, {torch}, {torch_minor},
    {torch_index}, {nvcc} ("12.x"), {torch_requires}, {paired_release}."""
    fix_note: str
    sources: tuple[str, ...]
    cuda_match: Literal["major", "minor"] = "major"
    """How much of the recorded CUDA version must match torch's: the major version for code linked against
    CUDA's libraries; the minor too for DeepSpeed, whose prebuilt ops refuse another ("CUDA version mismatch!")."""
    compile: str = ""
    """The command that compiles it for this torch even where a prebuilt wheel exists (a wheel tagged for
    torch 2.3 was built against 2.3.0 and can miss symbols of 2.3.1)."""
    paired_releases: tuple[PairedRelease, ...] = ()
    """Its release for each torch, where it publishes a table (torchao); ``fix`` names it as {paired_release}."""
    fix_unpaired: str = ""
    """The fix when ``paired_releases`` has no row for this torch."""
    kernels: tuple[str, ...] = ()
    """Its compiled modules, imported when present (apex's ``amp_C``): a build without any of them is a
    Python-only one."""
    kernels_missing: str = ""
    """What having none of ``kernels`` means."""
    gpu_rules: tuple[GpuRule, ...] = ()

    def child_arguments(self) -> list[str]:
        """What the child probe is given: the modules to import, then the kernels marked optional ("?amp_C")."""
        return [*self.imports, *(f"?{kernel}" for kernel in self.kernels)]


@dataclass(frozen=True)
class ImportMessage:
    """Text a package prints or raises when its compiled code does not fit, and what it means."""

    text: str
    status: Status
    why: str
    source: str


@dataclass(frozen=True)
class ExtensionTable:
    description: str
    packages: tuple[Package, ...]
    import_messages: tuple[ImportMessage, ...]

    def package(self, package_id: str) -> Package:
        found = next((p for p in self.packages if p.id == package_id), None)
        if found is None:
            raise unknown_choice("extension package", package_id, [p.id for p in self.packages])
        return found


@cache
def extension_table() -> ExtensionTable:
    """The shipped table, read once through the strict loader (a malformed row is an error naming it)."""
    try:
        data = json.loads(TABLE_PATH.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise GpuflyError(f"cannot read gpufly's table {TABLE_PATH}: {exc}") from exc
    return from_dict(ExtensionTable, data, TABLE_PATH.name)


def _known_package(package_id: str) -> None:
    extension_table().package(package_id)


def _release(value: str) -> None:
    parse_version(value, "version", example="2.6.3+cu12torch2.4cxx11abiFALSE")


def _cuda(value: str) -> None:
    parse_version(value, "CUDA version", example="12.4")


# --- facts ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExtensionFact:
    """One installed extension package: its metadata, what it recorded about its build, and its import."""

    package: str = field(metadata=checked(_known_package))
    """The table's id: "flash_attn", "xformers", "bitsandbytes"..."""
    distribution: str
    version: str = field(metadata=checked(_release))
    """As installed, local tag included ("2.6.3+cu12torch2.4cxx11abiFALSE")."""
    requires_torch: str | None = None
    """Its metadata's requirement on torch for this machine ("torch==2.5.1"), markers applied."""
    torch_requires: str | None = None
    """torch's metadata's requirement on it ("triton==3.1.0"): torch pins the triton it was built with."""
    built_torch: str | None = field(default=None, metadata=checked(_release))
    """The torch its compiled code was built against, where it records one (xformers, DeepSpeed's ops)."""
    built_cuda: str | None = field(default=None, metadata=checked(_cuda))
    cuda_libraries: tuple[str, ...] | None = None
    """bitsandbytes: the CUDA versions of the libraries it ships ("12.1"); () when it ships only a CPU one."""
    imported: bool | None = None
    """None when it was not imported (the doctor ran without imports)."""
    import_error: str | None = None
    timed_out: bool = False
    import_output: str | None = None
    """What the import printed or warned (xformers and bitsandbytes warn instead of failing)."""
    torch_cxx11_abi: bool | None = None
    """torch._C._GLIBCXX_USE_CXX11_ABI, as the child that imported the package beside torch saw it."""
    absent_kernels: tuple[str, ...] = ()
    """The package's compiled modules (``Package.kernels``) the child did not find."""


def read_extension_fact(data: object, where: str) -> ExtensionFact:
    """An ExtensionFact from a JSON object (a facts file, the probe's answer), strictly."""
    return from_dict(ExtensionFact, data, where, hint="write the facts again with `gpufly doctor --save FILE`")


@dataclass(frozen=True)
class Build:
    """What an installed package says it was built for; None where it does not say."""

    torch: str | None = None
    """"2.4" from a wheel tag, "2.1.2+cu121" from xformers' record."""
    cuda: str | None = None
    """"12" from a ``cu12`` tag, "12.2" from ``cu122``."""
    cxx11_abi: bool | None = None


def _tag_cuda(digits: str) -> str:
    """``12`` -> "12", ``122`` -> "12.2", ``118`` -> "11.8" (the last digit is the minor, as PyTorch spells it)."""
    return digits if len(digits) <= 2 else f"{digits[:-1]}.{digits[-1]}"


def build_of(fact: ExtensionFact, package: Package) -> Build:
    """The build the package records: its wheel tag where its releases carry one, else its recorded fields."""
    if package.build_record == "wheel_tag":
        local = Version(fact.version).local or ""
        match = _WHEEL_TAG.match(local)
        if match:
            abi = match.group("abi")
            return Build(torch=match.group("torch"), cuda=_tag_cuda(match.group("cuda")),
                         cxx11_abi=None if abi is None else abi.upper() == "TRUE")
        return Build()
    return Build(torch=fact.built_torch, cuda=fact.built_cuda)


# --- findings -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Torch:
    """The torch beside the extensions, as the checks compare against it."""

    version: str
    cuda: str | None
    cxx11_abi: bool | None

    @property
    def release(self) -> str:
        """"2.5.1" from "2.5.1+cu124": what a requirement pins."""
        return Version(self.version).public

    @property
    def minor(self) -> str:
        parsed = Version(self.version)
        return f"{parsed.major}.{parsed.minor}"

    @property
    def index(self) -> str:
        """PyTorch's wheel index for this torch's CUDA: "cu124", or "cpu"."""
        return "cpu" if self.cuda is None else "cu" + "".join(self.cuda.split(".")[:2])


@dataclass(frozen=True)
class _Problem:
    kind: str
    status: Status
    what: str
    why: str
    fix: str


def _fix(package: Package, fact: ExtensionFact, torch: _Torch | None) -> str:
    """The package's rebuild command for this machine, with its note."""
    if torch is None and "{torch" in package.fix:
        return _("install torch first (`gpufly install torch` prints the command for this machine), then check again")
    if torch is not None and torch.cuda is None and ("{torch_index}" in package.fix
                                                     or build_of(fact, package).cuda is not None):
        return _("install a CUDA build of torch {release} first (`gpufly install torch` prints the command for this "
                 "machine): {package} is a CUDA build; then check again").format(release=torch.release,
                                                                                 package=package.label)
    paired = next((row.release for row in package.paired_releases if torch and row.torch == torch.minor), None)
    values = {
        "paired_release": paired or "",
        "version": Version(fact.version).public,
        "torch": torch.release if torch else "",
        "torch_minor": torch.minor if torch else "",
        "torch_index": torch.index if torch else "",
        "nvcc": f"{torch.cuda.split('.')[0]}.x" if torch and torch.cuda else "of torch's CUDA major version",
        "torch_requires": fact.torch_requires or package.distribution,
    }
    if package.paired_releases and paired is None:
        return _(package.fix_unpaired).format(**values)
    parts = [package.fix.format(**values), _(package.fix_note).format(**values)]
    if package.compile:
        parts.append(_("if it still fails to import, compile it for this torch: {command}").format(
            command=package.compile.format(**values)))
    return _("; ").join(part for part in parts if part)


def _build_mismatches(build: Build, torch: _Torch, cuda_match: str) -> list[str]:
    """How the recorded build differs from this torch, one phrase each."""
    found = []
    if build.torch is not None:
        wanted = Version(build.torch)
        have = Version(torch.version)
        same = (wanted.release[:2] == have.release[:2] if len(wanted.release) <= 2
                else wanted.base_version == have.base_version)
        if not same:
            found.append(_("built for torch {built}, this torch is {version}").format(built=build.torch,
                                                                                       version=torch.version))
    parts = 2 if cuda_match == "minor" else 1
    if build.cuda is not None:
        if torch.cuda is None:
            found.append(_("built for CUDA {built}, this torch is a CPU-only build").format(built=build.cuda))
        elif build.cuda.split(".")[:parts] != torch.cuda.split(".")[:parts]:
            found.append(_("built for CUDA {built}, this torch uses CUDA {cuda}").format(built=build.cuda,
                                                                                          cuda=torch.cuda))
    if build.cxx11_abi is not None and torch.cxx11_abi is not None and build.cxx11_abi != torch.cxx11_abi:
        found.append(_("built with {built}, this torch uses {abi}").format(
            built=f"cxx11abi{str(build.cxx11_abi).upper()}", abi=f"cxx11abi{str(torch.cxx11_abi).upper()}"))
    return found


def _messages(text: str) -> list[ImportMessage]:
    lowered = text.lower()
    return [m for m in extension_table().import_messages if m.text.lower() in lowered]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _named(fact: ExtensionFact, package: Package) -> str:
    return f"{package.label} {fact.version}"


def _import_problems(fact: ExtensionFact, package: Package, torch: _Torch | None,
                     mismatches: list[str]) -> Iterator[_Problem]:
    """What the child's import showed: a failure, a hang, or kernels that did not load."""
    fix = _fix(package, fact, torch)
    built = _(" (it was {mismatches})").format(mismatches=_("; ").join(mismatches)) if mismatches else ""
    named = _named(fact, package)
    if fact.timed_out:
        yield _Problem("import", "warn", _("importing {package} did not finish in time").format(package=named),
                       _("a slow machine or a hung import: the doctor cannot tell which, so nothing is reinstalled "
                         "on this alone"), _("time it: {command}").format(
                           command=f"python -c \"import {package.imports[0]}\""))
        return
    if fact.import_error:
        if "No module named 'torch'" in fact.import_error:
            yield _Problem("import", "fail", _("{package} is installed but torch is not").format(package=named),
                           _("it imports torch and fails without it"), _("install torch first: `gpufly install "
                                                                         "torch` prints the command for this "
                                                                         "machine; then check again"))
            return
        meanings = _messages(fact.import_error)
        why = _("; ").join(_(m.why) for m in meanings) or _("a broken install, or a build for another torch or CUDA")
        yield _Problem("import", "fail", _("importing {package} failed: {error}").format(
                           package=named, error=_last_line(fact.import_error)[:300]), why + built, fix)
        return
    for meaning in _messages(fact.import_output or ""):
        yield _Problem("kernels", meaning.status, _("{package} imports, but: {line}").format(
                           package=named, line=_matching_line(fact.import_output or "", meaning.text)[:300]),
                       _(meaning.why) + built, fix)
        return
    if fact.imported and package.kernels and set(package.kernels) <= set(fact.absent_kernels):
        yield _Problem("kernels", "warn", _("{package} has none of its compiled kernels ({kernels})").format(
                           package=named, kernels=", ".join(package.kernels)), _(package.kernels_missing), fix)


def _matching_line(text: str, needle: str) -> str:
    return next((line.strip() for line in text.splitlines() if needle.lower() in line.lower()), needle)


def _pin_problems(fact: ExtensionFact, package: Package, torch: _Torch | None) -> Iterator[_Problem]:
    """Metadata pins: the package's on torch (vLLM, xformers, AutoAWQ), torch's on the package (triton)."""
    if torch is not None and fact.requires_torch:
        try:
            wanted = Requirement(fact.requires_torch)
        except InvalidRequirement:
            wanted = None
        if wanted is not None and not wanted.specifier.contains(torch.release, prereleases=True):
            yield _Problem("torch", "fail", _("{package} requires {requirement}; this torch is {version}").format(
                               package=_named(fact, package), requirement=fact.requires_torch, version=torch.version),
                           _("it was built against that torch: its compiled code fails to load or misbehaves with "
                             "another"),
                           _("{fix}; or keep {package} and put back the torch it needs: {command}").format(
                               fix=_fix(package, fact, torch), package=package.label,
                               command=_torch_command(wanted, torch)))
    if fact.torch_requires:
        try:
            pin = Requirement(fact.torch_requires)
        except InvalidRequirement:
            pin = None
        if pin is not None and not pin.specifier.contains(Version(fact.version).public, prereleases=True):
            torch_named = f"torch {torch.version}" if torch else "torch"
            yield _Problem("torch", "fail", _("{torch} requires {requirement}; {package} {version} is installed")
                           .format(torch=torch_named, requirement=fact.torch_requires, package=package.label,
                                   version=fact.version),
                           _("torch is built and tested against that version: torch.compile fails or miscompiles "
                             "with another"), _fix(package, fact, torch))


def _torch_command(requirement: Requirement, torch: _Torch) -> str:
    """pip's command for the torch a package pins, from PyTorch's index for this torch's CUDA where that release
    has such a build (else PyPI's default build of it)."""
    from gpufly.doctor.compat import torch_releases

    command = f"pip install '{requirement}'"
    pinned = next((Version(spec.version) for spec in requirement.specifier if spec.operator == "=="), None)
    if pinned is None or torch.cuda is None:
        return command
    release = next((r for r in torch_releases() if r.release == f"{pinned.major}.{pinned.minor}"), None)
    variant = next((v for v in release.variants if v.name == torch.index), None) if release else None
    if variant is None:
        return _("{command} (PyPI's default CUDA build of it)").format(command=command)
    return f"{command} --index-url {variant.index_url}"


def _bitsandbytes_problems(fact: ExtensionFact, package: Package, torch: _Torch | None) -> Iterator[_Problem]:
    """bitsandbytes loads the library named after torch's CUDA (libbitsandbytes_cuda124.so); is it shipped?"""
    if fact.cuda_libraries is None or torch is None or torch.cuda is None:
        return
    wanted = ".".join(torch.cuda.split(".")[:2])
    if wanted not in fact.cuda_libraries:
        shipped = ", ".join(fact.cuda_libraries) or _("none (CPU only)")
        yield _Problem("cuda", "fail", _("{package} has no CUDA {cuda} library ({library}); it ships CUDA: {shipped}")
                       .format(package=_named(fact, package), cuda=wanted,
                               library=f"libbitsandbytes_cuda{wanted.replace('.', '')}", shipped=shipped),
                       _("it loads the library for torch's CUDA version, and without it falls back to the CPU or "
                         "fails ('CUDA Setup failed', 'compiled without GPU support')"), _fix(package, fact, torch))


def _rule_applies(rule: GpuRule, version: str) -> bool:
    return SpecifierSet(rule.versions).contains(Version(version).public, prereleases=True)


def _outside(rule: GpuRule, gpu: GpuFact) -> bool:
    if gpu.compute_capability is None:
        return False
    cc = parse_compute_capability(gpu.compute_capability)
    return cc < parse_compute_capability(rule.min_cc) or (rule.max_cc is not None
                                                          and cc > parse_compute_capability(rule.max_cc))


def _gpu_problems(fact: ExtensionFact, package: Package, gpus: Sequence[GpuFact]) -> Iterator[_Problem]:
    """The first rule (most specific first in the table) that applies to this version and leaves a GPU out."""
    for rule in package.gpu_rules:
        if not _rule_applies(rule, fact.version):
            continue
        left_out = [gpu for gpu in gpus if _outside(rule, gpu)]
        if not left_out:
            continue
        names = ", ".join(_("GPU {index} {gpu} (compute capability {cc})").format(
            index=g.index, gpu=g.name, cc=g.compute_capability) for g in left_out)
        span = (_("{low} to {high}").format(low=rule.min_cc, high=rule.max_cc) if rule.max_cc
                else _("{low} or newer").format(low=rule.min_cc))
        others = len(left_out) < len(gpus)
        fix = _(rule.fix) + (_("; or run it on the other GPUs only (CUDA_VISIBLE_DEVICES)") if others else "")
        yield _Problem("gpu", rule.status, _("{package} does not support {gpus}: it needs compute capability {span}")
                       .format(package=_named(fact, package), gpus=names, span=span), _(rule.why), fix)
        return


def _torch_of(facts: Facts, extensions: Sequence[ExtensionFact]) -> _Torch | None:
    framework: FrameworkFact | None = facts.framework("torch")
    if framework is None or framework.version is None:
        return None
    abi = next((e.torch_cxx11_abi for e in extensions if e.torch_cxx11_abi is not None), None)
    return _Torch(framework.version, framework.cuda_version, abi)


def _problems(fact: ExtensionFact, package: Package, facts: Facts, torch: _Torch | None) -> list[_Problem]:
    build = build_of(fact, package)
    mismatches = _build_mismatches(build, torch, package.cuda_match) if torch else []
    found = list(_import_problems(fact, package, torch, mismatches))
    if mismatches and not any(p.status == "fail" for p in found):
        unsure = fact.imported is True and package.build_record == "wheel_tag"
        status: Status = "warn" if unsure else "fail"
        why = (_("it imported, but its compiled code calls into torch and CUDA by their binary interface: calls may "
                 "still fail") if unsure else _("its compiled code calls into torch and CUDA by their binary "
                                                "interface: with another torch it fails to import ('undefined "
                                                "symbol') or its kernels do not load"))
        found.insert(0, _Problem("build", status, _("{package} was {mismatches}").format(
            package=_named(fact, package), mismatches=_("; ").join(mismatches)), why, _fix(package, fact, torch)))
    found += _pin_problems(fact, package, torch)
    if package.build_record == "bitsandbytes_libraries" and not any(p.kind in ("import", "kernels") for p in found):
        found += _bitsandbytes_problems(fact, package, torch)
    found += _gpu_problems(fact, package, facts.gpus)
    return found


def _summary(fact: ExtensionFact, package: Package) -> str:
    build = build_of(fact, package)
    parts = [f"torch {build.torch}" if build.torch else "", f"CUDA {build.cuda}" if build.cuda else ""]
    built = ", ".join(p for p in parts if p)
    state = (_("{package} imports") if fact.imported else _("{package} installed (not imported)")).format(
        package=_named(fact, package))
    return state + (_(", built for {build}").format(build=built) if built else "")


def extension_findings(facts: Facts, extensions: Sequence[ExtensionFact]) -> list[Finding]:
    """One finding per problem of each installed extension package, or one ok line when it has none.

    Check names are the package's id and the problem: ``flash_attn_import``, ``flash_attn_build``,
    ``vllm_torch``, ``flash_attn_gpu``, ``bitsandbytes_cuda``, ``xformers_kernels``; ``flash_attn`` when
    all is well. When torch itself does not import, the packages are not judged (each would fail for
    torch's sake): torch's own finding says what to do.
    """
    from gpufly.doctor.checks import Finding

    framework = facts.framework("torch")
    torch_broken = framework is not None and bool(framework.import_error or framework.timed_out)
    table = extension_table()
    torch = _torch_of(facts, extensions)
    findings = []
    for fact in extensions:
        package = table.package(fact.package)
        if torch_broken:
            findings.append(Finding(package.id, "warn", _("{package} not checked: torch's own import failed or did "
                                                          "not finish").format(package=_named(fact, package)),
                                    _("every extension imports torch first"),
                                    _("fix torch first (see the torch_import finding), then run gpufly doctor again")))
            continue
        problems = _problems(fact, package, facts, torch)
        findings += [Finding(f"{package.id}_{p.kind}", p.status, p.what, p.why, p.fix) for p in problems]
        if not problems:
            findings.append(Finding(package.id, "ok", _summary(fact, package)))
    return findings
