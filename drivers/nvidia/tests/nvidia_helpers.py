"""Shared names for the NVIDIA driver tests (a module, not conftest, so imports are exact)."""

from collections.abc import Callable, Sequence

from devicehost_nvidia import NvidiaDriver

from devicehost import ContainerEdits
from devicehost.edits.compose import compose

#: The ``make_driver`` fixture: ``make_driver(config=None, node=None, lay_out=True)``.
MakeDriver = Callable[..., NvidiaDriver]


def composed(driver: NvidiaDriver, resource: str, device_ids: Sequence[str]) -> ContainerEdits:
    """What the host composes for one container given ``device_ids`` of ``resource``: the
    resource's edits once, then each device's, joined as the host joins them."""
    spec = next(s for s in driver.devicehost_resources() if s.name == resource)
    devices = {d.id: d for d in driver.devicehost_enumerate(resource=resource)}
    return compose(spec, devices, device_ids)
