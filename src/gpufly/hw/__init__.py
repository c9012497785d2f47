"""The hardware layer every stage reads the machine through: NVML (one loader, one choke point, one GPU
reader) and the host. The doctor, the bench, the report, the profiler and the monitor are its clients.

>>> from gpufly.hw import GpuReader, Nvml
>>> nvml = Nvml()
>>> if nvml.open().available:
...     with nvml:
...         samples = [GpuReader(nvml).sample(index) for index in range(nvml.device_count())]
"""

from gpufly.hw.gpu import (
    JOULES_PER_KWH,
    XID_KEEP_S,
    GpuDevice,
    GpuReader,
    GpuSample,
    MigSample,
    ProcessSample,
    XidEvent,
    throttle_reason_names,
)
from gpufly.hw.host import HostFacts, HostSample, probe_host, read_host
from gpufly.hw.nvml import FIXTURE_ENV, Nvml, NvmlStatus, load_pynvml

__all__ = [
    "FIXTURE_ENV",
    "JOULES_PER_KWH",
    "XID_KEEP_S",
    "GpuDevice",
    "GpuReader",
    "GpuSample",
    "HostFacts",
    "HostSample",
    "MigSample",
    "Nvml",
    "NvmlStatus",
    "ProcessSample",
    "XidEvent",
    "load_pynvml",
    "probe_host",
    "read_host",
    "throttle_reason_names",
]
