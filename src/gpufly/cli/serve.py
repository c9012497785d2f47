"""`gpufly serve`: Prometheus metrics at /metrics and a small live dashboard at /, from one process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpufly.cli.monitoring import SignalsCall, check_history, check_interval
from gpufly.cli.render import error_console
from gpufly.errors import GpuflyError
from gpufly.extras import require


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 lets other machines (Prometheus) in.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (DCGM-exporter's is 9400); 0 picks a free one.")] = 9400,
    interval: Annotated[float, typer.Option("--interval", "-i", help="Seconds between samples.")] = 1.0,
    replay: Annotated[Path | None, typer.Option(help="Serve a recording (from `gpufly watch`) instead.")] = None,
    show_cmdline: Annotated[bool, typer.Option("--show-cmdline", help="Include process command lines.")] = False,
    history: Annotated[int, typer.Option(help="Samples of history kept per metric for the charts.")] = 600,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", metavar="NAME",
        help="Also answer requests addressed to NAME (a DNS name this machine is reached by); repeatable; "
             "'*' answers any name. Addresses, localhost and this machine's hostnames always are.")] = None,
    attribute: Annotated[str | None, typer.Option(
        metavar="SOURCES",
        help="Name the Slurm job or Kubernetes pod of each GPU process (slurm, k8s, or both comma-separated): "
             "one gpufly_job_info series per job, and its memory and energy. Reads /proc/PID/environ and "
             "/proc/PID/cgroup: run as root, on the host or in a pod with hostPID.")] = None,
    price_per_kwh: Annotated[float | None, typer.Option(
        "--price-per-kwh", metavar="PRICE",
        help="Price of a kilowatt-hour: adds gpufly_gpu_energy_cost_total (and per job).")] = None,
    currency: Annotated[str | None, typer.Option(
        metavar="CODE", help="ISO 4217 code of --price-per-kwh, the currency label (default USD).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the URLs and settings as JSON at start.")] = False,
) -> None:
    """Serve Prometheus metrics (DCGM-exporter names) and a live web dashboard; read-only, until Ctrl-C or SIGTERM.

    Examples:
      gpufly serve
      gpufly serve --port 9401 --interval 5
      gpufly serve --host 0.0.0.0 --allow-host gpu-node-1
      gpufly serve --attribute slurm,k8s --price-per-kwh 0.12 --currency EUR
    """
    check_interval(interval)
    check_history(history)
    allowed_hosts = tuple(_check_allowed_host(name) for name in allow_host or ())
    from gpufly.monitor.attribution import sources_for
    from gpufly.monitor.energy import price_from_options

    sources = sources_for(attribute, replaying=replay is not None)
    price = price_from_options(price_per_kwh, currency)
    require("prometheus_client", "gpufly serve")
    from gpufly.monitor import LiveBackend, open_backend
    from gpufly.monitor.energy import JobEnergy
    from gpufly.monitor.exporter import CostCollector, JobCollector
    from gpufly.monitor.format import no_gpu_line
    from gpufly.monitor.server import MonitorServer, ServeConfig, WallClock

    config = ServeConfig(host=host, port=port, interval_s=interval, show_cmdline=show_cmdline, history=history,
                         source="replay" if replay else "live", allowed_hosts=allowed_hosts)
    backend = open_backend(replay, loop=True) if replay else LiveBackend(attribute=sources)
    try:
        server = MonitorServer(WallClock(backend) if replay else backend, config)
    except BaseException:
        backend.close()
        raise
    settings = {"attribute": sorted(sources), "price_per_kwh": price.per_kwh if price else None,
                "currency": price.currency if price else None}
    try:
        # Jobs come from the live join (--attribute) or a recording that holds them; either way they are served.
        energy = JobEnergy()
        server.sampler.listeners.append(energy)
        server.registry.register(JobCollector(server.history, energy))
        if price is not None:
            server.registry.register(CostCollector(server.history, price, energy))
        with SignalsCall(server.stop):
            first = server.start()
            if first is None:
                return
            line = no_gpu_line(first)
            if line:
                error_console().print(line, markup=False)
            if as_json:
                print(json.dumps(server.describe() | settings
                                 | {"gpu_status": first.gpu_status, "gpus": len(first.gpus)}), flush=True)
            else:
                print(f"serving {server.url} (dashboard) and {server.url}metrics (Prometheus); Ctrl-C stops",
                      flush=True)
            server.serve_forever()
    finally:
        server.close()


def _check_allowed_host(name: str) -> str:
    """A bare DNS name (or ``*``): a port or a URL would never equal a Host header's name, and allow nothing.

    An empty one is refused before this, as every empty option is (``refuse_empty_values``)."""
    name = name.strip()
    if name != "*" and any(char in name for char in ":/[]@ "):
        raise GpuflyError(f"--allow-host takes a host name, not {name!r}",
                          "give the name alone, without a scheme or port: --allow-host gpu-node-1.example.com")
    return name
