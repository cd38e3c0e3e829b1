"""One DRA driver's two sockets: its DRA service, then its registration with the kubelet.

Paths follow the kubelet's layout (k8s.io/dynamic-resource-allocation v0.37.2
``kubeletplugin``): the DRA service on ``<kubelet dir>/plugins/<driver>/dra.sock``, the
registration on ``<kubelet dir>/plugins_registry/<driver>-reg.sock``. Given this pod's
UID (a DaemonSet rolling with surge runs two instances of one driver on a node, and a
kubelet since 1.33 talks to both), both are named per pod as ``kubeletplugin``'s
``RollingUpdate`` names them: ``dra-<uid>.sock`` and ``<driver>-<uid>-reg.sock``
(shortened to a hash of the UID when the path would be too long for a unix socket).
The DRA socket is served first, so the kubelet never finds a registration whose endpoint
is not there; the registration socket is removed first on stop, so the kubelet
unregisters the driver.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

import grpc

from devicehost._proto.dra.v1 import api_pb2_grpc as v1_grpc
from devicehost._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from devicehost._proto.dra_health.v1 import api_pb2_grpc as health_grpc
from devicehost._proto.dra_health.v1alpha1 import api_pb2_grpc as alpha_health_grpc
from devicehost._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from devicehost.kubelet.dra.health import SERVICES as HEALTH_SERVICES
from devicehost.kubelet.dra.health import AlphaHealthServicer, HealthServicer
from devicehost.kubelet.dra.prepare import Preparer
from devicehost.kubelet.dra.registration import RegistrationServicer
from devicehost.kubelet.dra.servicer import DraBetaServicer, DraServicer
from devicehost.system.sockets import socket_path_problem
from devicehost.telemetry.tracing import Tracing

log = logging.getLogger(__name__)

DEFAULT_KUBELET_DIR = Path("/var/lib/kubelet")


def driver_dir(kubelet_dir: Path, driver: str) -> Path:
    """The driver's own directory: its DRA socket and its checkpoint."""
    return kubelet_dir / "plugins" / driver


#: The longest unix socket path ``kubeletplugin`` names (``unixPathMax``).
UNIX_PATH_MAX = 108


def _digest(text: str, size: int) -> str:
    return (
        base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()[:size]).decode().rstrip("=")
    )


def registration_socket(kubelet_dir: Path, driver: str, pod_uid: str = "") -> Path:
    """``<driver>-reg.sock``; with a pod UID the first of ``kubeletplugin``'s rolling-update
    names whose path fits (``RollingUpdateRegistrarSocketFile``): ``<driver>-<uid>-reg.sock``,
    ``<driver>-<8 bytes of SHA-256(uid)>-reg.sock``, ``dra-<16 bytes of SHA-256(driver NUL
    uid)>-reg.sock`` (URL-safe base64, unpadded)."""
    directory = kubelet_dir / "plugins_registry"
    if not pod_uid:
        return directory / f"{driver}-reg.sock"
    candidates = (
        f"{driver}-{pod_uid}-reg.sock",
        f"{driver}-{_digest(pod_uid, 8)}-reg.sock",
        f"dra-{_digest(driver + chr(0) + pod_uid, 16)}-reg.sock",
    )
    for name in candidates:
        if len(str(directory / name)) <= UNIX_PATH_MAX:
            return directory / name
    return directory / candidates[-1]


def dra_socket(kubelet_dir: Path, driver: str, pod_uid: str = "") -> Path:
    """``dra.sock`` in the driver's directory; ``dra-<uid>.sock`` with a pod UID."""
    return driver_dir(kubelet_dir, driver) / (f"dra-{pod_uid}.sock" if pod_uid else "dra.sock")


async def _serve(path: Path, add: list[Callable[[grpc.aio.Server], None]]) -> grpc.aio.Server:
    """Serve on ``path``, which appears only once the server answers: it listens on a dot
    name beside it first (the kubelet's plugin watcher ignores dot files) and is renamed,
    so a watcher that dials as soon as the socket appears is never refused."""
    starting = path.with_name(f".{path.name}~")
    for candidate in (path, starting):
        too_long = socket_path_problem(candidate)
        if too_long:
            raise OSError(too_long)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(candidate)
    path.parent.mkdir(parents=True, exist_ok=True)
    server = grpc.aio.server()
    for register in add:
        register(server)
    try:
        server.add_insecure_port(f"unix:{starting}")
        await server.start()
        os.chmod(starting, 0o600)
        os.replace(starting, path)
    except BaseException:
        await server.stop(None)  # never leak a server whose socket we cannot own
        with contextlib.suppress(FileNotFoundError):
            os.unlink(starting)
        raise
    return server


class DraPlugin:
    """Serves one DRA driver to the kubelet until ``stop``."""

    def __init__(
        self,
        driver: str,
        preparer: Preparer,
        kubelet_dir: Path,
        on_registered: Callable[[], None] | None = None,
        spans: Tracing | None = None,
        health: HealthServicer | None = None,
        pod_uid: str = "",
    ) -> None:
        """``health``: device health streamed to the kubelet, on the same socket;
        ``pod_uid``: this pod's, to name the sockets per pod (rolling updates)."""
        self.driver = driver
        self.spans = spans
        self.health = health
        self.dra_socket = dra_socket(kubelet_dir, driver, pod_uid)
        self.registration_socket = registration_socket(kubelet_dir, driver, pod_uid)
        self.registration = RegistrationServicer(
            driver,
            str(self.dra_socket),
            on_registered,
            extra_services=HEALTH_SERVICES if health is not None else (),
        )
        self.preparer = preparer
        self._servers: list[tuple[Path, grpc.aio.Server]] = []

    async def start(self) -> None:
        v1 = DraServicer(self.preparer, self.spans)
        beta = DraBetaServicer(self.preparer, self.spans)
        services = [
            lambda s: v1_grpc.add_DRAPluginServicer_to_server(v1, s),
            lambda s: v1beta1_grpc.add_DRAPluginServicer_to_server(beta, s),
        ]
        health = self.health
        if health is not None:
            alpha = AlphaHealthServicer(health)
            services += [
                lambda s: health_grpc.add_DRAResourceHealthServicer_to_server(health, s),
                lambda s: alpha_health_grpc.add_DRAResourceHealthServicer_to_server(alpha, s),
            ]
        dra = await _serve(self.dra_socket, services)
        self._servers.append((self.dra_socket, dra))
        try:
            registration = await _serve(
                self.registration_socket,
                [lambda s: reg_grpc.add_RegistrationServicer_to_server(self.registration, s)],
            )
        except BaseException:
            await self.stop(None)
            raise
        self._servers.insert(0, (self.registration_socket, registration))
        log.info(
            "DRA driver %s: serving %s, registering through %s",
            self.driver,
            self.dra_socket,
            self.registration_socket,
        )

    async def stop(self, grace: float | None = 1.0) -> None:
        """Unregister (remove the registration socket), then stop serving."""
        for path, server in self._servers:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            await server.stop(grace)
        self._servers.clear()
