"""The plugin watcher's side of a DRA driver: ``pluginregistration.Registration``.

The kubelet watches ``plugins_registry/`` for sockets, calls ``GetInfo`` on each, checks
the answer and reports with ``NotifyRegistrationStatus``. A DRA driver answers type
``DRAPlugin``, its driver name, the absolute path of its DRA socket, and in
``supported_versions`` the gRPC services it serves, spelled as k8s.io/kubelet v0.37.2
names them (``DRAPluginService`` in ``pkg/apis/dra/v1`` and ``v1beta1``): a kubelet
refuses a plugin none of whose strings it knows.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from devicehost._proto.pluginregistration.v1 import api_pb2 as pb
from devicehost._proto.pluginregistration.v1 import api_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"  # pluginregistration/v1 constants.go
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")

Context = grpc.aio.ServicerContext[Any, Any]


class RegistrationServicer(pb_grpc.RegistrationServicer):
    """Answers the plugin watcher for one DRA driver and remembers what it was told."""

    def __init__(
        self,
        driver: str,
        endpoint: str,
        on_registered: Callable[[], None] | None = None,
        extra_services: tuple[str, ...] = (),
    ) -> None:
        """``on_registered``: called at each registration the kubelet reports (a kubelet
        that restarted, or unregistered the driver a while, registers it again);
        ``extra_services``: optional services also served (the health service)."""
        self.driver = driver
        self.services = (*SERVICES, *extra_services)
        self.endpoint = endpoint
        self.on_registered = on_registered
        self.registered = asyncio.Event()
        self.last_status: pb.RegistrationStatus | None = None

    async def GetInfo(self, request: pb.InfoRequest, context: Context) -> pb.PluginInfo:
        return pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=self.endpoint,
            supported_versions=list(self.services),
        )

    async def NotifyRegistrationStatus(
        self, request: pb.RegistrationStatus, context: Context
    ) -> pb.RegistrationStatusResponse:
        self.last_status = request
        if request.plugin_registered:
            log.info("DRA driver %s: registered with the kubelet", self.driver)
            self.registered.set()
            if self.on_registered is not None:
                self.on_registered()
        else:
            self.registered.clear()
            log.error("DRA driver %s: the kubelet refused it: %s", self.driver, request.error)
        return pb.RegistrationStatusResponse()
