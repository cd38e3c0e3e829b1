"""Per resource: serve → register → watch, restarted as a unit.

A runner serves its socket, registers, and on a kubelet restart (``kubelet.sock``
re-created) or the loss of its own socket does it all again on a fresh socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat

import grpc

from devicehost._proto.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from devicehost.config.host_config import HostConfig
from devicehost.kubelet.deviceplugin.plugin_dir import (
    plugin_dir_problem,  # gRPC-free: the CLI checks first
)
from devicehost.kubelet.deviceplugin.registration import register
from devicehost.kubelet.deviceplugin.restart_watch import DirectoryWatcher, file_identity
from devicehost.kubelet.deviceplugin.servicer import DevicePluginServicer
from devicehost.model import ResourceSpec
from devicehost.system.sockets import socket_path_problem
from devicehost.telemetry.facade import Telemetry

log = logging.getLogger(__name__)

SERVE_RETRY_SECONDS = 1.0


class ResourceRunner:
    """Serves one resource's socket and keeps it registered across kubelet restarts."""

    def __init__(
        self,
        config: HostConfig,
        spec: ResourceSpec,
        servicer: DevicePluginServicer,
        watcher: DirectoryWatcher,
        telemetry: Telemetry,
    ) -> None:
        self.config = config
        self.watcher = watcher
        self.telemetry = telemetry
        self.spec = spec
        self.name = spec.name
        self.servicer = servicer
        self.socket_path = config.plugin_dir / spec.socket_name
        self.registered = asyncio.Event()
        self.registered_with: object = None
        self.serving = asyncio.Event()

    def _remove_socket(self) -> None:
        """Remove whatever is at our path without following it (stale socket, planted link);
        nothing to do when the directory itself is gone or a file."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            os.unlink(self.socket_path)

    async def _serve(self) -> grpc.aio.Server:
        self._remove_socket()
        server = grpc.aio.server()
        pb_grpc.add_DevicePluginServicer_to_server(self.servicer, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        await server.start()
        try:
            if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                os.chmod(self.socket_path, 0o600)
        except OSError:
            await server.stop(None)  # never leak a server whose socket we cannot own
            raise
        return server

    async def _serve_until_bound(self) -> grpc.aio.Server:
        """Serve our socket, retrying while the directory is unusable. The cause is logged
        once per distinct cause, in words (gRPC's own error names none); a socket path
        too long for a unix socket can never bind, so that resource waits for a restart."""
        too_long = socket_path_problem(self.socket_path)
        if too_long:
            log.error("resource %r: cannot serve: %s", self.name, too_long)
            await asyncio.Event().wait()  # never served; cancelled at stop
        last = None
        while True:
            try:
                server = await self._serve()
            except (OSError, RuntimeError) as exc:
                cause = plugin_dir_problem(self.config.plugin_dir) or str(exc)
                if cause != last:
                    log.error(
                        "resource %r: cannot serve %s: %s; retrying every %.0f s",
                        self.name,
                        self.socket_path,
                        cause,
                        SERVE_RETRY_SECONDS,
                    )
                    last = cause
                await asyncio.sleep(SERVE_RETRY_SECONDS)
                continue
            if last is not None:
                log.info("resource %r: serving %s now", self.name, self.socket_path)
            self.serving.set()
            return server

    async def _register(self) -> None:
        config = self.config
        await register(
            config.kubelet_socket,
            self.name,
            self.spec.socket_name,
            self.servicer.options,
            initial_backoff=config.initial_backoff,
            max_backoff=config.max_backoff,
            rejected_backoff=config.rejected_backoff,
            on_attempt=self.telemetry.registration,
            tracing=self.telemetry.tracing,
        )
        # Which kubelet took it: a kubelet.sock event for that same kubelet is no news.
        self.registered_with = file_identity(config.kubelet_socket)
        self.registered.set()

    async def run(self) -> None:
        changed = self.watcher.subscribe()
        try:
            while True:
                server = await self._serve_until_bound()
                try:
                    reason = await self._keep_registered(changed, file_identity(self.socket_path))
                finally:
                    self.registered.clear()
                    await server.stop(None)
                log.info(
                    "resource %r: %s; serving again on a fresh socket and re-registering",
                    self.name,
                    reason,
                )
        finally:
            self.watcher.unsubscribe(changed)
            self._remove_socket()

    async def _keep_registered(self, changed: asyncio.Event, own: object) -> str:
        """Register, and again each time kubelet.sock is re-created; return once our own
        socket is gone (the kubelet deleted it), which needs a fresh server."""
        kubelet_socket = self.config.kubelet_socket
        kubelet = file_identity(kubelet_socket)
        registering = asyncio.create_task(self._register(), name=f"register-{self.name}")
        try:
            while True:
                # Checked first, not only after an event: the socket may vanish right
                # after it was served, before any event reaches us.
                if own is None or file_identity(self.socket_path) != own:
                    return "our socket was removed"
                now = file_identity(kubelet_socket)
                if now != kubelet:
                    kubelet = now
                    if now is None:
                        log.info(
                            "kubelet socket %s is gone; waiting for the kubelet to return",
                            kubelet_socket,
                        )
                    elif not (self.registered.is_set() and now == self.registered_with):
                        log.info(
                            "resource %r: kubelet.sock re-created; registering again", self.name
                        )
                        await _cancel(registering)
                        self.registered.clear()
                        registering = asyncio.create_task(
                            self._register(), name=f"register-{self.name}"
                        )
                await changed.wait()
                changed.clear()
        finally:
            await _cancel(registering)


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
