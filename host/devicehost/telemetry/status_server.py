"""The HTTP endpoints for Prometheus and the DaemonSet's probes: /metrics, /healthz, /readyz.

A few lines of asyncio instead of a web framework: three GET routes, served on the host's
own event loop — so an answer from /healthz is itself proof that the loop is responsive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 1.0
MAX_LOOP_LAG_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 5.0


class StatusServer:
    """Serves ``metrics()`` as Prometheus text, liveness, and ``not_ready()`` as readiness."""

    def __init__(
        self, address: str, metrics: Callable[[], str], not_ready: Callable[[], list[str]]
    ) -> None:
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]") or "0.0.0.0"
        self.port = int(port)
        self.metrics = metrics
        self.not_ready = not_ready
        self.lag = 0.0
        self._server: asyncio.Server | None = None
        self._heartbeat: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        sockets = self._server.sockets or ()
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._heartbeat = asyncio.create_task(self._beat(), name="loop-heartbeat")
        log.info(
            "metrics and probes on http://%s:%d (/metrics, /healthz, /readyz)", self.host, self.port
        )

    async def _beat(self) -> None:
        """Measure how late the loop wakes us: a blocked loop shows up as lag."""
        while True:
            expected = time.monotonic() + HEARTBEAT_SECONDS
            await asyncio.sleep(HEARTBEAT_SECONDS)
            self.lag = max(0.0, time.monotonic() - expected)

    def _route(self, path: str) -> tuple[int, str, str]:
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4; charset=utf-8", self.metrics()
        if path == "/healthz":
            if self.lag > MAX_LOOP_LAG_SECONDS:
                return 503, "text/plain", f"event loop lagging {self.lag:.1f} s\n"
            return 200, "text/plain", f"ok (loop lag {self.lag * 1000:.0f} ms)\n"
        if path == "/readyz":
            waiting = self.not_ready()
            if waiting:
                return 503, "text/plain", "not registered: " + ", ".join(waiting) + "\n"
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
        if self._server:
            self._server.close()
            await self._server.wait_closed()
