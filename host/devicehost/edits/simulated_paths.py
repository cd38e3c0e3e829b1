"""Host paths on a simulated node: where the files an answer names really are.

A driver names host paths as the node's ``/`` shows them (``/dev/infiniband/uverbs6``),
and reads them under its ``root``. On a real node that root is the node's ``/`` (mounted at
``/host``), so the name is right as it is. Under ``--simulate`` the driver's ``/`` is its
own directory of the simulated tree, and nothing exists at ``/dev/infiniband/uverbs6`` on
the node: a container runtime given that answer fails the container ("no such file or
directory"). So the host moves every host path of a simulated driver's edits into the
driver's tree before it answers or writes a CDI spec from them; container paths stay as
the driver declared them. The simulation makes the device nodes there (``FakeRoot``), so a
runtime in the same mount namespace — or one that sees the tree at the same path, e.g. a
hostPath (``simulateDir``) — finds character devices where the answer says.

Applied where a driver's edits enter the host: its resources' edits at bring-up, its
devices at each scan, its ``allocate`` answers. A policy plugin's additions are the
operator's own and are left alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from devicehost.model import ContainerEdits, Device, DeviceNode, Mount, ResourceSpec


def edits_on_node(edits: ContainerEdits, tree: Path) -> ContainerEdits:
    """``edits`` with every device node's and mount's host path under ``tree``."""
    if not (edits.devices or edits.mounts):
        return edits
    base = str(tree)
    return dataclasses.replace(
        edits,
        devices=tuple(
            DeviceNode(
                host_path=base + d.host_path,
                container_path=d.container_path,
                permissions=d.permissions,
            )
            for d in edits.devices
        ),
        mounts=tuple(
            Mount(
                host_path=base + m.host_path,
                container_path=m.container_path,
                read_only=m.read_only,
            )
            for m in edits.mounts
        ),
    )


def spec_on_node(spec: ResourceSpec, tree: Path) -> ResourceSpec:
    """``spec`` with its every-container edits' host paths under ``tree``."""
    return dataclasses.replace(spec, edits=edits_on_node(spec.edits, tree))


def devices_on_node(devices: Iterable[Device], tree: Path) -> list[Device]:
    """``devices`` with their edits' host paths under ``tree``. Equal edits are moved
    once: every slot of a shared pool has the same (100 slots of 12 nodes: 6.5 → 0.55 ms
    a scan)."""
    moved: dict[ContainerEdits, ContainerEdits] = {}
    result = []
    for device in devices:
        if device.edits:
            edits = moved.get(device.edits)
            if edits is None:
                edits = moved[device.edits] = edits_on_node(device.edits, tree)
            device = dataclasses.replace(device, edits=edits)
        result.append(device)
    return result
