"""A PodResources stand-in: the kubelet's PodResourcesLister (v1) on a unix socket.

Tests say which pod and container holds which devices; devicehost asks it over the real
protocol, as it asks the kubelet::

    with PodResourcesStandIn(path) as pods:
        pods.assign("default", "web-0", "main", "nvidia.com/gpu", ["GPU-1"])
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from devicehost._proto.podresources.v1 import api_pb2 as pr
from devicehost._proto.podresources.v1 import api_pb2_grpc as pr_grpc


class PodResourcesStandIn(pr_grpc.PodResourcesListerServicer):
    """Answers List/Get from assignments the test makes; ``delay`` makes List slow, and
    ``gate`` holds every List until the test sets it (slow for as long as a test needs,
    whatever the machine's speed)."""

    def __init__(
        self, socket: Path | str, delay: float = 0.0, gate: threading.Event | None = None
    ) -> None:
        self.socket = Path(socket)
        self.delay = delay
        self.gate = gate
        self.calls = 0
        self._pods: dict[tuple[str, str], dict[str, list[pr.ContainerDevices]]] = {}
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pr_grpc.add_PodResourcesListerServicer_to_server(self, self._server)

    def assign(
        self, namespace: str, pod: str, container: str, resource: str, device_ids: Sequence[str]
    ) -> None:
        with self._lock:
            containers = self._pods.setdefault((namespace, pod), {})
            containers.setdefault(container, []).append(
                pr.ContainerDevices(resource_name=resource, device_ids=list(device_ids))
            )

    def _pod(self, key: tuple[str, str]) -> pr.PodResources:
        containers = self._pods[key]
        return pr.PodResources(
            namespace=key[0],
            name=key[1],
            containers=[
                pr.ContainerResources(name=name, devices=devices)
                for name, devices in containers.items()
            ],
        )

    def List(
        self, request: pr.ListPodResourcesRequest, context: Any
    ) -> pr.ListPodResourcesResponse:
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.gate is not None:
            self.gate.wait()
        with self._lock:
            return pr.ListPodResourcesResponse(pod_resources=[self._pod(k) for k in self._pods])

    def Get(self, request: pr.GetPodResourcesRequest, context: Any) -> pr.GetPodResourcesResponse:
        with self._lock:
            key = (request.pod_namespace, request.pod_name)
            if key not in self._pods:
                context.abort(grpc.StatusCode.NOT_FOUND, f"pod {key[0]}/{key[1]} not found")
            return pr.GetPodResourcesResponse(pod_resources=self._pod(key))

    def GetAllocatableResources(
        self, request: pr.AllocatableResourcesRequest, context: Any
    ) -> pr.AllocatableResourcesResponse:
        return pr.AllocatableResourcesResponse()

    def start(self) -> PodResourcesStandIn:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        self._server.add_insecure_port(f"unix:{self.socket}")
        self._server.start()
        return self

    def stop(self) -> None:
        if self.gate is not None:
            self.gate.set()  # a held List must not outlive the stand-in
        self._server.stop(None)

    def __enter__(self) -> PodResourcesStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
