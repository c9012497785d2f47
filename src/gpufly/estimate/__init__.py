"""Memory and speed estimates: pure functions of a ModelSpec, a job, and a GpuSpec."""
