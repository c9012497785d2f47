"""Watching GPUs: backends that read NVML and the host, and (later) the sampler, TUI and exporter."""
