"""Where monitor facts come from: NVML for NVIDIA GPUs, psutil for the host."""
