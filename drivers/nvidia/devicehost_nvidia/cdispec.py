"""The CDI spec for the advertised GPUs, so ``nvidia.com/gpu=<uuid>`` resolves without
other tooling.

One device per unit (whole GPU or MIG device) named by its UUID, with its device nodes;
the control and UVM nodes go in the spec's common edits. The directory is a host path
(default ``/var/run/cdi``) written under ``root``, so the node's runtime reads it. The
file is rewritten only when its content changes (``devicehost.cdi.write_spec``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from devicehost import Allocation
from devicehost.cdi import write_spec
from devicehost_nvidia.allocation import CDI_KIND, control_nodes, distinct_units, unit_nodes
from devicehost_nvidia.inventory import Unit


def spec_directory(root: Path, directory: str) -> Path:
    return root / directory.lstrip("/")


def write_cdi_spec(root: Path, directory: str, units: Sequence[Unit]) -> Path:
    """Write (or leave unchanged) the spec for ``units``; return its path. Raises OSError."""
    devices = {
        u.cdi_name: Allocation(devices=tuple(unit_nodes(root, u))) for u in distinct_units(units)
    }
    common = Allocation(devices=tuple(control_nodes(root)))
    return write_spec(spec_directory(root, directory), CDI_KIND, devices, common)
