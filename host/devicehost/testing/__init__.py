"""The kit devicehost ships to driver authors, and uses for its own tests and demo.

- ``KubeletStandIn``: the kubelet's side of the protocol over real unix sockets.
- ``FakeRoot``: fake sysfs and /dev trees under a directory.
- ``check_driver``: the conformance battery every driver runs on itself.
- ``HostThread``: a real host running in a background thread.
- ``serve_driver``: serve one installed driver to the stand-in outside pytest, and print
  what the kubelet saw (``python -m devicehost.testing serve NAME``).
- ``OtlpReceiver``: an in-process OTLP/gRPC trace receiver.
- ``PodResourcesStandIn``: the kubelet's PodResources API on a unix socket.
- ``write_distribution``: make a module discoverable through entry points, no wheel needed.
- ``watch_notifies``: run a driver's watch as the host does; did it notify?
- pytest fixtures (``fake_root``, ``plugin_dir``, ``kubelet``, ``host_config``,
  ``run_host``) arrive through the ``pytest11`` entry point.

Names are imported on first use: drivers import ``FakeRoot`` for their simulated nodes at
start-up, and should not pay for the gRPC servers and OTLP receiver they never use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devicehost.testing.conformance import ConformanceError as ConformanceError
    from devicehost.testing.conformance import ConformanceReport as ConformanceReport
    from devicehost.testing.conformance import check_driver as check_driver
    from devicehost.testing.distributions import write_distribution as write_distribution
    from devicehost.testing.fakeroot import FakeRoot as FakeRoot
    from devicehost.testing.hostthread import HostThread as HostThread
    from devicehost.testing.kubelet import KubeletStandIn as KubeletStandIn
    from devicehost.testing.otlp import OtlpReceiver as OtlpReceiver
    from devicehost.testing.podresources import PodResourcesStandIn as PodResourcesStandIn
    from devicehost.testing.serve import serve_driver as serve_driver
    from devicehost.testing.watching import watch_notifies as watch_notifies

_HOMES = {
    "ConformanceError": "conformance",
    "ConformanceReport": "conformance",
    "check_driver": "conformance",
    "write_distribution": "distributions",
    "FakeRoot": "fakeroot",
    "HostThread": "hostthread",
    "KubeletStandIn": "kubelet",
    "OtlpReceiver": "otlp",
    "PodResourcesStandIn": "podresources",
    "serve_driver": "serve",
    "watch_notifies": "watching",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'devicehost.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"devicehost.testing.{_HOMES[name]}"), name)
