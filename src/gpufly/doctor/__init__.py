"""The doctor: facts about the GPU software stack, what does not fit together, and the fix.

The flow is probe -> facts -> findings: ``probe_all()`` reads this machine into a ``Facts`` (or ``load_facts``
reads a saved one), ``diagnose(facts)`` returns the findings, and ``choose_torch`` / ``choose_tensorflow`` /
``choose_jax`` give the install command that fits. Importing this package imports no framework and starts
no process.
"""

from gpufly.doctor.checks import Finding, diagnose, slow_half_precision, smoke_findings
from gpufly.doctor.extension_probe import probe_extensions
from gpufly.doctor.extensions import ExtensionFact, extension_findings
from gpufly.doctor.facts import (
    DriverFact,
    EnvFact,
    Facts,
    FrameworkFact,
    GpuFact,
    ProcessFact,
    ToolkitFact,
    facts_from_dict,
    load_facts,
)
from gpufly.doctor.install import Alternative, InstallPlan, choose_jax, choose_tensorflow, choose_torch, platform_of
from gpufly.doctor.probes import probe_all
from gpufly.doctor.smoke import SmokeResult, run_isolated

__all__ = [
    "Alternative",
    "DriverFact",
    "EnvFact",
    "ExtensionFact",
    "Facts",
    "Finding",
    "FrameworkFact",
    "GpuFact",
    "InstallPlan",
    "ProcessFact",
    "SmokeResult",
    "ToolkitFact",
    "choose_jax",
    "choose_tensorflow",
    "choose_torch",
    "diagnose",
    "extension_findings",
    "facts_from_dict",
    "load_facts",
    "platform_of",
    "probe_all",
    "probe_extensions",
    "run_isolated",
    "slow_half_precision",
    "smoke_findings",
]
