"""An example third-party driver: one device per ``<root>/dev/thingN``."""

from pathlib import Path

from devicehost import Allocation, Device, DeviceNode, ResourceSpec, UnknownDevice, hookimpl

RESOURCE = "example.org/thing"
_root = Path("/")


@hookimpl
def devicehost_configure(root):
    global _root
    _root = Path(root)


def _things():
    return sorted(p.name for p in (_root / "dev").glob("thing*"))


@hookimpl
def devicehost_resources():
    return [ResourceSpec(name=RESOURCE)] if _things() else []


@hookimpl
def devicehost_enumerate(resource):
    return [Device(id=name) for name in _things()]


@hookimpl
def devicehost_allocate(resource, device_ids):
    for device_id in device_ids:
        if device_id not in _things():
            raise UnknownDevice(resource, device_id)
    return Allocation(devices=tuple(DeviceNode(host_path=f"/dev/{d}") for d in device_ids))
