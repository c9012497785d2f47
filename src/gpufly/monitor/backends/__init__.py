"""Where snapshots come from: this machine (``LiveBackend``, through ``gpufly.hw``) or a recording."""
