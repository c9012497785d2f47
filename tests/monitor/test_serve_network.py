"""`gpufly serve` on a network: request deadlines, clients that leave, the Host check, and stopping mid-scrape.

Every test talks to a real socket on a port picked by the kernel. The in-process ``running`` server is
the one `gpufly serve` builds; the signal tests start the real command, since only a process shows how
it ends. Nothing here measures time: each test waits for a condition (a connection closed, a thread
count back, a process gone) with ``PATIENCE_S`` as the bound for a server that hangs.
"""

from __future__ import annotations

import http.client
import select
import signal
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest

from gpufly.monitor import open_backend
from gpufly.monitor.server import MonitorServer, ServeConfig, WallClock

from .serving import RECORDING, serving

PATIENCE_S = 60.0
"""How long a test waits for what must happen: a bound for a hung server, not a timing."""


@contextmanager
def running(**config: Any) -> Iterator[MonitorServer]:
    """The server `gpufly serve --replay` builds, on a free loopback port, answering from a thread of this test."""
    server = MonitorServer(WallClock(open_backend(RECORDING, loop=True)),
                           ServeConfig(port=0, interval_s=0.1, **config))
    server.start()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(PATIENCE_S)
        server.close()
    assert not thread.is_alive(), "serve_forever did not return after stop()"


def ask(server: MonitorServer, path: str, host: str | None = None, method: str = "GET") -> tuple[int, bytes]:
    """One request with the Host header a browser would send for ``host`` (the real address when None)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=PATIENCE_S)
    try:
        connection.request(method, path, headers={"Host": host} if host is not None else {})
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def wait_until(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` until it holds or ``PATIENCE_S`` passes; the caller asserts the result."""
    done = threading.Event()
    for _ in range(int(PATIENCE_S / 0.02)):
        if condition():
            return True
        done.wait(0.02)
    return condition()


def closed_by_server(connection: socket.socket) -> bool:
    """True once the server ends the stream (or resets it); waits up to ``PATIENCE_S``."""
    connection.settimeout(PATIENCE_S)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_stop_before_the_first_sample_ends_start_and_serve_at_once() -> None:
    server = MonitorServer(open_backend(RECORDING, loop=True), ServeConfig(port=0, interval_s=0.1))
    try:
        server.stop()
        assert server.start() is None
        server.serve_forever()  # returns at its first turn: nothing else here would end it
    finally:
        server.close()


def test_idle_connections_are_closed_at_their_deadline_and_free_their_threads() -> None:
    with running(request_timeout_s=0.3) as server:
        before = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(50)]
        try:
            assert all(closed_by_server(connection) for connection in idle)
        finally:
            for connection in idle:
                connection.close()
        assert wait_until(lambda: threading.active_count() <= before), "the 50 handler threads did not end"
        assert ask(server, "/metrics")[0] == 200


def test_a_request_trickled_in_byte_by_byte_is_cut_at_its_deadline() -> None:
    with running(request_timeout_s=0.3) as server, socket.create_connection(("127.0.0.1", server.port)) as slow:
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")
        cut = False
        for _ in range(int(PATIENCE_S / 0.05)):
            try:
                slow.sendall(b"X-Slow: y\r\n")  # a header line more, never the blank line that ends them
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            if select.select([slow], [], [], 0.05)[0]:
                cut = closed_by_server(slow)
                break
        assert cut, "a request that never ends was never cut"


def _reset(connection: socket.socket) -> None:
    """Close with an RST instead of a FIN, as a crashed client or a killed scraper does."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


ABANDONED: dict[str, Callable[[socket.socket], None]] = {
    "half a request line, then gone": lambda c: (c.sendall(b"GET /met"), c.close()),
    "headers never finished, then gone": lambda c: (c.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127"), c.close()),
    "a full request, reset before the answer": lambda c: (c.sendall(b"GET /metrics HTTP/1.0\r\n\r\n"), _reset(c)),
    "a full request, closed unread": lambda c: (c.sendall(b"GET /api/history HTTP/1.0\r\n\r\n"), c.close()),
    "connected, reset at once": _reset,
}


def test_clients_that_leave_early_leave_no_traceback(capfd: pytest.CaptureFixture[str]) -> None:
    with running(request_timeout_s=2.0) as server:
        before = threading.active_count()
        for _ in range(20):
            for leave in ABANDONED.values():
                leave(socket.create_connection(("127.0.0.1", server.port)))
        assert wait_until(lambda: threading.active_count() <= before)
        assert ask(server, "/metrics")[0] == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and err.strip() == "", err


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST.", "[::1]:{port}",
                                  "10.1.2.3", socket.gethostname(), socket.getfqdn(), "dash.example:{port}",
                                  "Dash.Example."])
def test_hosts_this_machine_goes_by_are_answered(host: str) -> None:
    with running(allowed_hosts=("dash.example",)) as server:
        status, body = ask(server, "/api/snapshot", host.format(port=server.port))
    assert status == 200 and b'"snapshot"' in body


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "dash.example.evil", "[::1", "", "a:b:c"])
def test_a_foreign_host_is_refused_before_anything_is_read(host: str) -> None:
    with running(allowed_hosts=("dash.example",)) as server:
        for path in ("/api/snapshot", "/api/history", "/metrics", "/"):
            status, body = ask(server, path, host.format(port=server.port))
            assert status == 403, (path, status)
            assert b"--allow-host" in body and b"DCGM" not in body and b"snapshot" not in body
        assert ask(server, "/api/snapshot", host.format(port=server.port), method="HEAD") == (403, b"")


def test_two_host_headers_are_refused_and_star_allows_any_name() -> None:
    with running() as server, socket.create_connection(("127.0.0.1", server.port)) as raw:
        raw.sendall(b"GET /api/snapshot HTTP/1.0\r\nHost: localhost\r\nHost: evil.example\r\n\r\n")
        raw.settimeout(PATIENCE_S)
        assert raw.recv(64).startswith(b"HTTP/1.0 403")
    with running(allowed_hosts=("*",)) as server:
        assert ask(server, "/api/snapshot", "anything.example")[0] == 200


def _scrape_until(url_host: str, port: int, stop: threading.Event, answered: list[int]) -> None:
    """Scrape /metrics over and over, as a busy Prometheus would, until ``stop`` or the server is gone."""
    while not stop.is_set():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE_S)
        try:
            connection.request("GET", "/metrics", headers={"Host": url_host})
            reply = connection.getresponse()
            reply.read()
            answered.append(reply.status)
        except (OSError, http.client.HTTPException):  # the server stopped mid-answer: expected once signalled
            return
        finally:
            connection.close()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_it_cleanly_while_it_is_being_scraped(signum: signal.Signals) -> None:
    with serving("--allow-host", "scraper.example") as served:
        port = served.info["port"]
        stop = threading.Event()
        answered: list[int] = []
        with ThreadPoolExecutor(max_workers=8) as pool:
            for _ in range(8):
                pool.submit(_scrape_until, "scraper.example", port, stop, answered)
            # half-sent and abandoned requests in flight as well
            for leave in ABANDONED.values():
                leave(socket.create_connection(("127.0.0.1", port)))
            try:
                assert wait_until(lambda: len(answered) >= 50), "the scrapes were not answered"
                served.process.send_signal(signum)
                code = served.process.wait(timeout=PATIENCE_S)
            finally:
                stop.set()
        err = served.process.stderr.read() if served.process.stderr else ""
    assert code == 0, err
    assert "Traceback" not in err and err.strip() == "", err
    assert set(answered) == {200}, "every scrape under a name given with --allow-host was answered"
