"""The kit devicehost ships to driver authors, and uses for its own tests and demo.

- ``KubeletStandIn``: the kubelet's side of the protocol over real unix sockets.
- ``FakeRoot``: fake sysfs and /dev trees under a directory.
- ``check_driver``: the conformance battery every driver runs on itself.
- ``HostThread``: a real host running in a background thread.
- ``OtlpReceiver``: an in-process OTLP/gRPC trace receiver.
- ``PodResourcesStandIn``: the kubelet's PodResources API on a unix socket.
- ``write_distribution``: make a module discoverable through entry points, no wheel needed.
- pytest fixtures (``fake_root``, ``plugin_dir``, ``kubelet``, ``host_config``,
  ``run_host``) arrive through the ``pytest11`` entry point.
"""

from devicehost.testing.conformance import ConformanceError, ConformanceReport, check_driver
from devicehost.testing.distributions import write_distribution
from devicehost.testing.fakeroot import FakeRoot
from devicehost.testing.hostthread import HostThread
from devicehost.testing.kubelet import KubeletStandIn
from devicehost.testing.otlp import OtlpReceiver
from devicehost.testing.podresources import PodResourcesStandIn

__all__ = [
    "ConformanceError",
    "ConformanceReport",
    "FakeRoot",
    "HostThread",
    "KubeletStandIn",
    "OtlpReceiver",
    "PodResourcesStandIn",
    "check_driver",
    "write_distribution",
]
