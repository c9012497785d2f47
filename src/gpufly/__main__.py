"""`python -m gpufly` runs the same CLI as the `gpufly` command."""

from gpufly.cli.main import main

if __name__ == "__main__":
    main()
