"""The HTTP endpoints for Prometheus and the DaemonSet's probes: /metrics, /healthz, /readyz.

A few lines of asyncio instead of a web framework: three GET routes, served on the host's
own event loop — so an answer from /healthz is itself proof that the loop is responsive.

The address is ``host:port``. An empty host (``:9400``) listens on every address family the
node has — IPv4 and IPv6 on a dual-stack node, IPv6 alone on an IPv6-only one — so the
same DaemonSet probes work on any cluster; ``0.0.0.0:9400`` or ``[::]:9400`` pin one family.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import socket
import time
from collections.abc import Callable

from devicehost.errors import ConfigError
from devicehost.system import supervision
from devicehost.telemetry.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)

#: bind errors that mean the node has no such address family, not that the port is taken
_FAMILY_ABSENT = frozenset({errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT})
HEARTBEAT_SECONDS = 1.0
MAX_LOOP_LAG_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 5.0


class StatusServer:
    """Serves ``metrics()`` as Prometheus text, liveness, and ``not_ready()`` as readiness."""

    def __init__(
        self,
        address: str,
        metrics: Callable[[], str],
        not_ready: Callable[[], list[str]],
        on_task_restart: Callable[[str], None] | None = None,
        drivers: Callable[[], object] | None = None,
    ) -> None:
        self.on_task_restart = on_task_restart
        #: the live state per driver, served as JSON on /drivers (``devicehost drivers``)
        self.drivers = drivers
        host, _, port = address.rpartition(":")
        #: None: every address family (see the module docstring).
        self.host: str | None = host.strip("[]") or None
        self.port = int(port)
        self.metrics = metrics
        self.not_ready = not_ready
        self.lag = 0.0
        self.addresses: list[str] = []
        self._servers: list[asyncio.Server] = []
        self._heartbeat: asyncio.Task[None] | None = None

    async def start(self) -> None:
        for sock in _listening_sockets(self.host, self.port):
            self._servers.append(await asyncio.start_server(self._handle, sock=sock))
            host, port = sock.getsockname()[:2]
            self.port = port
            self.addresses.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
        self._heartbeat = supervision.start("loop-heartbeat", self._beat, self.on_task_restart)
        log.info(
            "metrics and probes on %s (/metrics, /healthz, /readyz)",
            ", ".join(f"http://{a}" for a in self.addresses),
        )

    async def _beat(self) -> None:
        """Measure how late the loop wakes us: a blocked loop shows up as lag."""
        while True:
            expected = time.monotonic() + HEARTBEAT_SECONDS
            await asyncio.sleep(HEARTBEAT_SECONDS)
            self.lag = max(0.0, time.monotonic() - expected)

    def _route(self, path: str) -> tuple[int, str, str]:
        if path == "/metrics":
            return 200, CONTENT_TYPE, self.metrics()
        if path == "/healthz":
            if self.lag > MAX_LOOP_LAG_SECONDS:
                return 503, "text/plain", f"event loop lagging {self.lag:.1f} s\n"
            return 200, "text/plain", f"ok (loop lag {self.lag * 1000:.0f} ms)\n"
        if path == "/drivers" and self.drivers is not None:
            return 200, "application/json", json.dumps(self.drivers(), indent=2) + "\n"
        if path == "/readyz":
            reasons = self.not_ready()
            if reasons:
                return 503, "text/plain", "".join(f"{reason}\n" for reason in reasons)
            return 200, "text/plain", "ok\n"
        return 404, "text/plain", "not found: try /metrics, /healthz or /readyz\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_SECONDS)
            method, path, *_ = head.decode("latin-1").split(" ", 2)
            if method not in ("GET", "HEAD"):
                status, kind, body = 405, "text/plain", "only GET\n"
            else:
                status, kind, body = self._route(path.split("?", 1)[0])
            data = body.encode()
            reason = {
                200: "OK",
                404: "Not Found",
                405: "Method Not Allowed",
                503: "Service Unavailable",
            }[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            )
            if method != "HEAD":
                writer.write(data)
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ConnectionError,
            ValueError,
        ):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._heartbeat:
            self._heartbeat.cancel()
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()


def _listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """One bound, listening socket per address family ``host`` resolves to.

    With port 0 every family gets the port the first one was given, so the server has one
    port. An IPv6 socket is IPv6-only: the IPv4 socket beside it answers IPv4, whether or
    not the node maps IPv4 into IPv6. For the wildcard host a family the node lacks (IPv6
    disabled in the kernel) is skipped; the first error is raised only if no family binds.
    Any other error — a port another process holds on one family — is raised, naming the
    family.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    first_error: OSError | None = None
    seen: set[tuple[int, object]] = set()
    for family, kind, proto, _, sockaddr in infos:
        if (family, sockaddr[0]) in seen:
            continue
        seen.add((family, sockaddr[0]))
        bound_port = sockets[0].getsockname()[1] if sockets else port
        try:
            sock = socket.socket(family, kind, proto)
        except OSError as exc:
            first_error = first_error or exc
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((sockaddr[0], bound_port, *sockaddr[2:]))
            sock.listen(100)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            if host is not None or exc.errno not in _FAMILY_ABSENT:
                # Taken by another process (9400 is also dcgm-exporter's default): serving
                # the other family alone would send half the probes and scrapes elsewhere.
                for other in sockets:
                    other.close()
                raise OSError(exc.errno, f"{exc.strerror} ({family.name})") from exc
            log.info("status server: no %s listener (the node has none): %s", family.name, exc)
            first_error = first_error or exc
            continue
        sockets.append(sock)
    if not sockets:
        raise first_error or OSError(f"no address to listen on for {host!r}")
    return sockets


async def start_status_server(
    address: str,
    metrics: Callable[[], str],
    not_ready: Callable[[], list[str]],
    on_task_restart: Callable[[str], None] | None = None,
    drivers: Callable[[], object] | None = None,
) -> StatusServer | None:
    """The status server on ``address`` (``metrics.address``), serving; None when the
    address is empty (off). An address it cannot listen on is a config error."""
    if not address:
        return None
    server = StatusServer(address, metrics, not_ready, on_task_restart, drivers)
    try:
        await server.start()
    except OSError as exc:
        raise ConfigError(
            "config", "metrics.address", f"cannot listen on {address}: {exc.strerror}"
        ) from exc
    return server
