"""The install command that fits this machine: the newest build its driver runs with code for every GPU.

Pure logic over facts and the compat tables, one module per framework (``torch``, ``tensorflow``, ``jax``)
around a shared ``plan``. Nothing here runs pip: the CLI prints the plan, and runs its command only when
the user asks.
"""

from gpufly.doctor.install.jax import JAX_VERIFY, choose_jax
from gpufly.doctor.install.plan import Alternative, GpuInput, InstallPlan, platform_of
from gpufly.doctor.install.tensorflow import choose_tensorflow
from gpufly.doctor.install.torch import TORCH_VERIFY, choose_torch

__all__ = ["JAX_VERIFY", "TORCH_VERIFY", "Alternative", "GpuInput", "InstallPlan", "choose_jax", "choose_tensorflow",
           "choose_torch", "platform_of"]
