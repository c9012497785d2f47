"""`gpufly report`: this machine and what the other stages found, in one place."""
