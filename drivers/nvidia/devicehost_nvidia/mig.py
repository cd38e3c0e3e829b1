"""MIG profile names (``1g.10gb``, ``1c.2g.20gb``): parsed, and derived from NVML attributes.

NVML reports a MIG device's slice counts and memory in MiB, not its profile's name; the
name is derived the way NVIDIA's own tools show it: memory rounded up to an eighth of the
GPU's total, times the total in whole GB.
"""

from __future__ import annotations

import math
import re

from devicehost_nvidia.nvml import MigAttributes

_PROFILE_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb$")
_MIB = 1024 * 1024
_GIB = 1024 * 1024 * 1024
_EIGHTHS = 8


def parse_profile(profile: str) -> tuple[int, int, int]:
    """``"1g.10gb"`` → (compute slices, GPU slices, GB); ``"1c.2g.20gb"`` → (1, 2, 20)."""
    match = _PROFILE_RE.match(profile)
    if not match:
        raise ValueError(f"MIG profile {profile!r} is not of the form '<g>g.<mem>gb'")
    compute, slices, gigabytes = match.groups()
    return int(compute or slices), int(slices), int(gigabytes)


def memory_gb(total_bytes: int, mig_mb: int) -> int:
    """A MIG device's memory as its profile names it, in GB."""
    share = math.ceil(mig_mb * _MIB / total_bytes * _EIGHTHS) / _EIGHTHS
    return round(share * -(-total_bytes // _GIB))


def profile_name(attributes: MigAttributes, total_bytes: int) -> str:
    """The profile of a MIG device with ``attributes`` on a GPU of ``total_bytes``."""
    slices = attributes.gpu_instance_slice_count
    compute = attributes.compute_instance_slice_count
    name = f"{slices}g.{memory_gb(total_bytes, attributes.memory_size_mb)}gb"
    return name if compute == slices else f"{compute}c.{name}"


def nominal_attributes(profile: str, total_bytes: int) -> MigAttributes:
    """The attributes NVML would report for a ``profile`` device (a simulated one): a little
    under its nominal memory, as real slices are. Raises ValueError for a profile that
    cannot exist on a GPU of ``total_bytes``."""
    compute, slices, gigabytes = parse_profile(profile)
    memory_mb = int(gigabytes * 1024 * 0.96)
    attributes = MigAttributes(slices, compute, memory_mb)
    if compute > slices or slices > 7 or profile_name(attributes, total_bytes) != profile:
        total_gb = -(-total_bytes // _GIB)
        raise ValueError(
            f"MIG profile {profile!r} cannot exist on a {total_gb} GB GPU "
            f"(slices 1-7, memory in steps of {total_gb // _EIGHTHS} GB)"
        )
    return attributes
