"""The install command that fits this machine: the newest build its driver runs with code for every GPU.

Pure logic over facts and the compat tables, one module per framework (``torch``, ``tensorflow``, ``jax``)
around a shared ``plan``; ``tools`` writes a chosen build for the installer the user runs (pip, uv, pixi,
conda) and ``mirrors`` says where its packages come from (a mirror named with --mirror, or the index pip is
already set to use). Nothing here runs pip: the CLI prints the plan, and runs its command only when the user
asks.
"""

from gpufly.doctor.install.jax import JAX_VERIFY, choose_jax
from gpufly.doctor.install.mirrors import (
    Mirror,
    PipIndex,
    PytorchMirror,
    Sources,
    choose_sources,
    find_mirror,
    mirror_names,
    mirrors,
    pip_config_files,
    read_pip_index,
)
from gpufly.doctor.install.plan import Alternative, GpuInput, InstallPlan, platform_of
from gpufly.doctor.install.tensorflow import choose_tensorflow
from gpufly.doctor.install.tools import TOOLS, PipInstall, Target, for_tool
from gpufly.doctor.install.torch import TORCH_VERIFY, choose_torch

__all__ = ["JAX_VERIFY", "TOOLS", "TORCH_VERIFY", "Alternative", "GpuInput", "InstallPlan", "Mirror", "PipIndex",
           "PipInstall", "PytorchMirror", "Sources", "Target", "choose_jax", "choose_sources", "choose_tensorflow",
           "choose_torch", "find_mirror", "for_tool", "mirror_names", "mirrors", "pip_config_files", "platform_of",
           "read_pip_index"]
