"""Which pod and container received some devices — from the kubelet's PodResources API.

Allocate carries device IDs only. After it returns, the kubelet records the assignment, and
``List`` on ``pod-resources/kubelet.sock`` shows it. The resolver asks there, off the
request path, with a few retries, and never longer than a short timeout per call: a
missing or hanging socket costs spans their pod attributes, never a pod its start.
PodResources has no pod UID; the kubelet's device-manager checkpoint has it
(``checkpoint``), written just after the assignment shows in ``List``, so a pod found
without its UID is looked for again while retries last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

import grpc

from devicehost._proto.podresources.v1 import api_pb2 as pr
from devicehost._proto.podresources.v1 import api_pb2_grpc as pr_grpc
from devicehost.kubelet.deviceplugin.checkpoint import DeviceCheckpoint
from devicehost.telemetry.pods import PodIdentity

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
CALL_TIMEOUT_SECONDS = 1.0


class PodResolver:
    """Looks device IDs up in the kubelet's PodResources List."""

    def __init__(
        self,
        socket: Path | None,
        retry_delays: Sequence[float] = RETRY_DELAYS,
        call_timeout: float = CALL_TIMEOUT_SECONDS,
        checkpoint: Path | None = None,
    ) -> None:
        """``checkpoint``: the kubelet's ``kubelet_internal_checkpoint``, for pod UIDs
        (None: spans carry none)."""
        self.socket = socket
        self.checkpoint = DeviceCheckpoint(checkpoint) if checkpoint is not None else None
        self.retry_delays = tuple(retry_delays)
        self.call_timeout = call_timeout
        self._channel: grpc.aio.Channel | None = None
        self._said_absent = False

    @property
    def enabled(self) -> bool:
        return self.socket is not None

    def _available(self) -> bool:
        if self.socket is None:
            return False
        if self.socket.exists():
            self._said_absent = False
            return True
        if not self._said_absent:
            self._said_absent = True
            log.info(
                "PodResources socket %s is absent: spans carry no pod identity until it appears",
                self.socket,
            )
        return False

    async def lookup(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        """One List call: the container holding all of ``device_ids``, or None."""
        if not self._available():
            return None
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(f"unix://{self.socket}")
        stub = pr_grpc.PodResourcesListerStub(self._channel)
        try:
            response = await stub.List(pr.ListPodResourcesRequest(), timeout=self.call_timeout)
        except grpc.aio.AioRpcError as exc:
            log.debug("PodResources List failed: %s", exc.details())
            return None
        wanted = set(device_ids)
        for pod in response.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    if devices.resource_name == resource and wanted <= set(devices.device_ids):
                        uid = None
                        if self.checkpoint is not None:  # a file on the node: off the loop
                            uid = await asyncio.to_thread(
                                self.checkpoint.pod_uid, resource, container.name, device_ids
                            )
                        return PodIdentity(pod.name, pod.namespace, container.name, uid or "")
        return None

    async def resolve(self, resource: str, device_ids: Sequence[str]) -> PodIdentity | None:
        """Retry ``lookup`` while the kubelet records the assignment; None if it never shows.
        A pod found without its UID is asked for again while the checkpoint exists, and
        returned as found when the retries run out."""
        found = None
        for delay in self.retry_delays:
            await asyncio.sleep(delay)
            identity = await self.lookup(resource, device_ids) or found
            found = identity
            if identity is not None and (identity.uid or not self._checkpoint_exists()):
                return identity
            if not self._available():
                return found
        return found

    def _checkpoint_exists(self) -> bool:
        return self.checkpoint is not None and self.checkpoint.path.exists()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
