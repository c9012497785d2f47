"""The `gpufly` command line: thin modules that parse, call the logic, and render."""
