"""The HTTP side of `gpufly serve`: /metrics for Prometheus, a static dashboard at /, and its JSON API.

One ``ThreadingHTTPServer`` answers everything, a thread per request, so a slow client cannot hold
up a scrape. Scrapes read what the sampler already has (``History.latest``): no request ever calls
NVML, which is what keeps 200 concurrent scrapes cheap. Everything is read-only: GET and HEAD only,
no endpoint changes anything on the machine, and process command lines are left out unless the
operator asked for them (they can hold tokens and paths).

Its network stance, as the Prometheus node exporter's: every connection has a deadline
(``request_timeout_s``), after which it is closed, so idle or trickling clients cannot pile up threads;
a client that leaves early is not an error worth a traceback; a request whose Host header names
neither this machine nor an address is refused, so a DNS-rebinding page in a local browser cannot
read ``/api/snapshot``; and ``stop()`` (safe from a signal handler) ends ``serve_forever`` between
requests, however many are in flight.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from prometheus_client.exposition import choose_encoder

from gpufly import __version__
from gpufly.errors import GpuflyError
from gpufly.monitor.exporter import exporter_registry
from gpufly.monitor.format import no_gpu_line, slowdown_text
from gpufly.monitor.health import HealthWatch
from gpufly.monitor.sample import Snapshot
from gpufly.monitor.sampler import HISTORY_METRICS, HOST_METRICS, Backend, History, Sampler

STATIC_FILES: dict[str, tuple[str, str]] = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
"""The dashboard: plain files shipped in gpufly/monitor/web, no build step, nothing fetched from elsewhere."""


@dataclass(frozen=True)
class ServeConfig:
    """What `gpufly serve` was asked for; ``port`` 0 means "any free port" (the bound one is ``MonitorServer.port``)."""

    host: str = "127.0.0.1"
    port: int = 9400
    interval_s: float = 1.0
    show_cmdline: bool = False
    history: int = 600
    source: str = "live"
    request_timeout_s: float = 10.0
    """The whole exchange (request in, answer out) must end within this; Prometheus' own scrape timeout
    is 10 s by default, so a scrape that takes longer has been given up on by its scraper anyway."""
    allowed_hosts: tuple[str, ...] = ()
    """Names a Host header may carry beyond this machine's own (``--allow-host``); ``*`` allows any."""


class WallClock:
    """Stamps a replayed snapshot with the time it is served, so history and Prometheus see time move forward.

    A recording loops; its own timestamps would jump back at each loop (and lie years in the past or
    future), which charts, energy integration and Prometheus all take badly.
    """

    def __init__(self, backend: Backend, clock: Any = time.time) -> None:
        self.backend = backend
        self._clock = clock

    @property
    def gpu_status(self) -> str | None:
        return self.backend.gpu_status

    def snapshot(self) -> Snapshot:
        return replace(self.backend.snapshot(), time=time.monotonic())

    def close(self) -> None:
        self.backend.close()


def snapshot_view(snapshot: Snapshot | None, history: History, health: HealthWatch,
                  show_cmdline: bool = False) -> dict[str, Any]:
    """/api/snapshot: the latest snapshot as recorded (JSONL form), plus the words the views need.

    ``cmdline`` is blanked unless ``show_cmdline``; ``no_gpu_line`` and each GPU's ``slowdown`` are the
    same words the terminal commands print, so the page and the terminal never disagree.
    """
    if snapshot is None:
        return {"snapshot": None, "no_gpu_line": None, "gpus": {}}
    data = snapshot.to_dict()
    if not show_cmdline:
        for gpu in data["gpus"]:
            for process in gpu["processes"]:
                process["cmdline"] = None
    extras = {str(gpu.index): {"slowdown": slowdown_text(gpu), "health": health.verdict(gpu).to_dict(),
                               "energy_since_start_j": history.energy_since_start_j(gpu.index),
                               "throttle_seconds": history.throttle_seconds(gpu.index)}
              for gpu in snapshot.gpus}
    return {"snapshot": data, "no_gpu_line": no_gpu_line(snapshot), "gpus": extras, "show_cmdline": show_cmdline}


def history_view(history: History) -> dict[str, Any]:
    """/api/history: per GPU and metric, ``[[time, value], ...]`` oldest first, for the charts."""
    latest = history.latest
    gpus = []
    for gpu in latest.gpus if latest else []:
        gpus.append({"index": gpu.index, "name": gpu.name, "lost": gpu.lost,
                     "memory_total_bytes": gpu.memory_total_bytes, "power_limit_w": gpu.power_limit_w,
                     "series": {m: history.series(gpu.index, m) for m in HISTORY_METRICS}})
    host = {m: history.host_series(m) for m in HOST_METRICS}
    return {"time": latest.time if latest else None, "capacity": history.capacity, "gpus": gpus, "host": host}


POLL_INTERVAL_S = 0.05
"""How often the idle loop looks at the stop flag and the deadlines: a signal cannot wake socketserver's
select (it is retried after the handler), so this bounds how long a SIGTERM waits; 20 idle turns a second
cost microseconds each."""


class _Stopped(Exception):
    """Ends ``serve_forever`` from its own loop, where no per-request error handler can catch it."""


_CLIENT_GONE = (ConnectionError, TimeoutError)
"""What a client that hangs up, resets, or is cut off at its deadline raises in the thread answering it."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    """A burst of scrapes (or the 200-connection test) must queue, not be refused: the default backlog is 5."""

    monitor: MonitorServer

    def __init__(self, address: tuple[str, int], request_timeout_s: float) -> None:
        super().__init__(address, _Handler)
        self.request_timeout_s = request_timeout_s
        self.stop_requested = False
        self._deadlines: dict[socket.socket, float] = {}
        self._deadlines_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._deadlines_lock:
            self._deadlines[request] = time.monotonic() + self.request_timeout_s
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._deadlines_lock:
            self._deadlines.pop(request, None)
        super().shutdown_request(request)

    def service_actions(self) -> None:
        """Run by ``serve_forever`` between requests (at least every poll interval), outside any request's
        error handling: the one place a stop can end the loop without being taken for a failed request."""
        if self.stop_requested:
            raise _Stopped
        self._cut_overdue()

    def _cut_overdue(self) -> None:
        """Shut down (not close: its thread still owns the descriptor) each connection past its deadline; the
        thread's blocked read then sees the end of the stream, or its write a broken pipe, and it finishes."""
        now = time.monotonic()
        with self._deadlines_lock:
            overdue = [connection for connection, deadline in self._deadlines.items() if deadline <= now]
            for connection in overdue:
                del self._deadlines[connection]
        for connection in overdue:
            with contextlib.suppress(OSError):  # the client closed it first
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away is routine on a network; anything else is one line, never a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, _CLIENT_GONE):
            return
        sys.stderr.write(f"gpufly serve: answering {client_address[0]} failed: {type(error).__name__}: {error}\n")
        sys.stderr.flush()


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = f"gpufly/{__version__}"

    def parse_request(self) -> bool:
        """Refuse, before any answer, a Host this server does not go by (the DNS-rebinding guard)."""
        if not super().parse_request():
            return False
        hosts = self.headers.get_all("Host") or []
        if len(hosts) > 1 or (hosts and not self.server.monitor.hosts.allows(hosts[0])):
            shown = hosts[0] if len(hosts) == 1 else f"{len(hosts)} Host headers"
            self._send(HTTPStatus.FORBIDDEN, f"host not allowed: {shown}\n"
                       "start gpufly serve with --allow-host NAME to answer to another name\n".encode(),
                       "text/plain; charset=utf-8", with_body=self.command != "HEAD")
            return False
        return True

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def _refuse(self) -> None:
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET and HEAD only\n", "text/plain; charset=utf-8",
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _answer(self, with_body: bool) -> None:
        path = urlsplit(self.path).path
        monitor = self.server.monitor
        if path == "/metrics":
            body, content_type = monitor.metrics(self.headers.get("Accept", ""))
        elif path == "/api/snapshot":
            body, content_type = _json(snapshot_view(monitor.history.latest, monitor.history, monitor.health,
                                                     monitor.config.show_cmdline) | {"config": monitor.describe()})
        elif path == "/api/history":
            body, content_type = _json(history_view(monitor.history))
        elif path in STATIC_FILES:
            name, content_type = STATIC_FILES[path]
            body = _static(name)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found: try /, /metrics, /api/snapshot, /api/history\n",
                       "text/plain; charset=utf-8", with_body=with_body)
            return
        self._send(HTTPStatus.OK, body, content_type, with_body=with_body)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, with_body: bool = True,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: Prometheus scrapes every few seconds, and a line per scrape would bury the one that matters."""


class HostCheck:
    """Which Host headers the server answers: an IP address, ``localhost``, this machine's names, and the operator's.

    A DNS-rebinding page reaches the server under the attacker's domain name, which the browser sends as
    Host; checking the name is what keeps it out (no name is ever resolved: the attacker controls DNS).
    An address as Host cannot come from such a page (its origin would be the address, that is, this
    server), so any address is answered: Prometheus scraping by IP needs no option.
    """

    def __init__(self, bound_host: str, extra: tuple[str, ...] = ()) -> None:
        names = {"localhost", socket.gethostname(), socket.getfqdn(), bound_host, *extra}
        self.any = "*" in extra
        self.names = frozenset(normal for name in names if (normal := _normal_name(name)))

    def allows(self, header: str) -> bool:
        if self.any:
            return True
        try:
            name = urlsplit(f"//{header.strip()}").hostname
        except ValueError:  # an unclosed "[", a port that is not a number
            return False
        if not name:
            return False
        return _is_address(name) or _normal_name(name) in self.names

    def describe(self) -> list[str]:
        return ["*"] if self.any else sorted(self.names)


def _normal_name(name: str) -> str:
    return name.strip().lower().rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _json(data: dict[str, Any]) -> tuple[bytes, str]:
    return json.dumps(data, separators=(",", ":")).encode(), "application/json"


def _static(name: str) -> bytes:
    return resources.files("gpufly.monitor").joinpath("web", name).read_bytes()


class MonitorServer:
    """The sampler, its history, the metrics registry and the HTTP server, bound at construction.

    Binding happens here, so a port in use is a ``GpuflyError`` before anything starts.
    """

    def __init__(self, backend: Backend, config: ServeConfig) -> None:
        self.config = config
        self.history = History(capacity=config.history)
        self.health = HealthWatch()
        self.sampler = Sampler(backend, interval=config.interval_s, history=self.history, listeners=[self.health])
        self.registry = exporter_registry(self.history, config.source, health=self.health)
        self.hosts = HostCheck(config.host, config.allowed_hosts)
        self._httpd = _bind(config.host, config.port, config.request_timeout_s)
        self._httpd.monitor = self

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = self.config.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/"

    def describe(self) -> dict[str, Any]:
        """The running configuration, as `gpufly serve --json` prints it and the page reads it."""
        return {"url": self.url, "metrics_url": f"{self.url}metrics", "host": self.config.host, "port": self.port,
                "interval_s": self.config.interval_s, "history": self.config.history,
                "show_cmdline": self.config.show_cmdline, "source": self.config.source,
                "request_timeout_s": self.config.request_timeout_s, "allowed_hosts": self.hosts.describe(),
                "version": __version__}

    def metrics(self, accept: str) -> tuple[bytes, str]:
        """The exposition format the scraper asked for (OpenMetrics or Prometheus text)."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def start(self, timeout_s: float = 10.0) -> Snapshot | None:
        """Start sampling and wait for the first snapshot, so the first scrape already has figures.

        None when ``stop()`` came first (a SIGTERM while the first sample was being taken).
        """
        self.sampler.start()
        deadline = time.monotonic() + timeout_s
        while not self._httpd.stop_requested:
            if self.history.latest is not None:
                return self.history.latest
            if self.sampler.errors or time.monotonic() > deadline:
                self.sampler.stop()
                reason = self.sampler.errors[0] if self.sampler.errors else f"nothing after {timeout_s:g} s"
                raise GpuflyError(f"the first sample failed: {reason}", "run `gpufly doctor` to check the driver")
            time.sleep(0.01)
        return None

    def serve_forever(self) -> None:
        """Answer requests until ``stop()``; returns within a poll interval of it, whatever is in flight."""
        with contextlib.suppress(_Stopped):
            self._httpd.serve_forever(poll_interval=POLL_INTERVAL_S)

    def stop(self) -> None:
        """Ask ``serve_forever`` to return. Only sets a flag: safe from a signal handler and from any thread
        (an exception raised from a handler would land inside a request and be caught as its error)."""
        self._httpd.stop_requested = True

    def close(self) -> None:
        self.sampler.stop()
        self._httpd.server_close()
        self.sampler.backend.close()


def _bind(host: str, port: int, request_timeout_s: float) -> _Server:
    if not 0 <= port <= 65535:
        raise GpuflyError(f"--port must be between 0 and 65535, not {port}", "--port 0 picks a free port")
    server_class = _Server6 if ":" in host else _Server
    try:
        return server_class((host, port), request_timeout_s)
    except socket.gaierror:
        raise GpuflyError(f"cannot listen on host {host!r}: not an address of this machine",
                          "use --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (every interface)") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise GpuflyError(f"port {port} on {host} is already in use",
                              f"stop the other server, or pick another port: --port {port + 1} (or --port 0 "
                              "for any free one)") from None
        if exc.errno == errno.EACCES:
            raise GpuflyError(f"not allowed to listen on port {port}",
                              "ports below 1024 need root; use --port 9400") from None
        if exc.errno == errno.EADDRNOTAVAIL:
            raise GpuflyError(f"cannot listen on host {host}: not an address of this machine",
                              "use --host 127.0.0.1 or --host 0.0.0.0") from None
        raise
