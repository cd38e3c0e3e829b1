"""devicehost: one Kubernetes device-plugin host for every accelerator and NIC vendor.

What a driver needs is here: ``hookimpl`` to mark hook functions, the model it returns
(``ResourceSpec``, ``Device``, ``Health``, ``ContainerEdits`` (alias ``Allocation``), ``Mount``,
``DeviceNode``, ``HostPath``) and the
exceptions it raises (``DriverUnavailable``, ``UnknownDevice``), ``natural_key`` to order
device names as people do (``gpu-2`` before ``gpu-10``), and ``resources_changed`` to tell
the host its resource list changed. Everything else is the
host's business. The testing kit is ``devicehost.testing``.
"""

import os as _os
from typing import TYPE_CHECKING, Any

# gRPC's C core writes connection chatter below ERROR straight to stderr ("Got goaway ...
# Cancelling all calls" when a kubelet goes away mid-call): noise in every log and test run.
# It reads its level once, as grpc is first imported, which in this package always comes
# after this line. GRPC_VERBOSITY=info (or debug) in the environment shows it again.
_os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

if TYPE_CHECKING:
    from devicehost.errors import (
        ConfigError,
        DevicehostError,
        DriverError,
        DriverTimeout,
        DriverUnavailable,
        RequestRefused,
        UnknownDevice,
    )
    from devicehost.hookspecs import hookimpl, resources_changed
    from devicehost.model import (
        Allocation,
        ContainerEdits,
        Device,
        DeviceAttributes,
        DeviceNode,
        Health,
        HostPath,
        Mount,
        ResourceSpec,
        natural_key,
    )

__version__: str  # set by __getattr__ on first use

#: Where each public name lives. They are imported on first use: ``devicehost run`` forks
#: its zygote right after reading its config, and importing the package must not delay
#: that fork by pluggy's and the model's imports (~25 ms), which it needs only later.
_PUBLIC = {
    **dict.fromkeys(
        (
            "ConfigError",
            "DevicehostError",
            "DriverError",
            "DriverTimeout",
            "DriverUnavailable",
            "RequestRefused",
            "UnknownDevice",
        ),
        "devicehost.errors",
    ),
    "hookimpl": "devicehost.hookspecs",
    "resources_changed": "devicehost.hookspecs",
    "natural_key": "devicehost.model",
    **dict.fromkeys(
        (
            "Allocation",
            "ContainerEdits",
            "Device",
            "DeviceAttributes",
            "DeviceNode",
            "Health",
            "HostPath",
            "Mount",
            "ResourceSpec",
        ),
        "devicehost.model",
    ),
}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use; ``__version__`` is read from the installed
    metadata on first use (a driver's worker process never needs it)."""
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib_metadata import PackageNotFoundError, version

    global __version__
    try:
        __version__ = version("devicehost")
    except PackageNotFoundError:  # running from a source tree that is not installed
        __version__ = "0+unknown"
    return __version__


__all__ = [
    "Allocation",
    "ConfigError",
    "ContainerEdits",
    "Device",
    "DeviceAttributes",
    "DeviceNode",
    "DevicehostError",
    "DriverError",
    "DriverTimeout",
    "DriverUnavailable",
    "Health",
    "HostPath",
    "Mount",
    "RequestRefused",
    "ResourceSpec",
    "UnknownDevice",
    "__version__",
    "hookimpl",
    "natural_key",
    "resources_changed",
]
