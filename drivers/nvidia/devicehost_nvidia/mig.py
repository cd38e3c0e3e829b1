"""MIG profile names (``1g.10gb``, ``1c.2g.20gb``, ``1g.10gb+me``, ``2g.20gb-me``) and the
resource each is advertised under.

The rule is NVIDIA's own (go-nvlib ``pkg/nvlib/device/mig_profile.go``): a MIG device's
profile comes from its GPU-instance profile *index* (``NVML_GPU_INSTANCE_PROFILE_*``), which
fixes the slice count and any variant (media extensions ``+me``, none ``-me``, all
``+me.all``, graphics ``+gfx``), from its compute-instance profile index (compute slices),
and from its memory rounded up to an eighth of the GPU's total, times the total in whole GB.
Slice counts and memory alone cannot tell ``1g.10gb`` from ``1g.10gb+me``. The resource is
``nvidia.com/mig-<profile>`` with ``+`` written as ``.``, and only profiles whose compute
instance spans the whole GPU instance are advertised (k8s-device-plugin
``internal/rm/rm.go``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_MIB = 1024 * 1024
_GIB = 1024 * 1024 * 1024
_EIGHTHS = 8

MEDIA = "me"
MEDIA_ALL = "me.all"
GRAPHICS = "gfx"

#: NVML_GPU_INSTANCE_PROFILE_* index → (GPU slices, attributes, negative attributes), as
#: go-nvlib NewMigProfile maps them (3_SLICE_GFX, index 17, is newer than that table and
#: follows the same rule).
GI_PROFILES: dict[int, tuple[int, tuple[str, ...], tuple[str, ...]]] = {
    0: (1, (), ()),  # 1_SLICE
    1: (2, (), ()),  # 2_SLICE
    2: (3, (), ()),  # 3_SLICE
    3: (4, (), ()),  # 4_SLICE
    4: (7, (), ()),  # 7_SLICE
    5: (8, (), ()),  # 8_SLICE
    6: (6, (), ()),  # 6_SLICE
    7: (1, (MEDIA,), ()),  # 1_SLICE_REV1
    8: (2, (MEDIA,), ()),  # 2_SLICE_REV1
    9: (1, (), ()),  # 1_SLICE_REV2 (1g with twice the memory)
    10: (1, (GRAPHICS,), ()),  # 1_SLICE_GFX
    11: (2, (GRAPHICS,), ()),  # 2_SLICE_GFX
    12: (4, (GRAPHICS,), ()),  # 4_SLICE_GFX
    13: (1, (), (MEDIA,)),  # 1_SLICE_NO_ME
    14: (2, (), (MEDIA,)),  # 2_SLICE_NO_ME
    15: (1, (MEDIA_ALL,), ()),  # 1_SLICE_ALL_ME
    16: (2, (MEDIA_ALL,), ()),  # 2_SLICE_ALL_ME
    17: (3, (GRAPHICS,), ()),  # 3_SLICE_GFX
}
#: NVML_COMPUTE_INSTANCE_PROFILE_* index → compute slices (go-nvlib NewMigProfile).
CI_PROFILES: dict[int, int] = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6, 7: 1, 8: 7}

_NAME_RE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:([+-])([a-z][a-z0-9.]*))?$")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A parsed profile: compute slices, GPU slices, GB and variant attributes."""

    compute: int
    slices: int
    gigabytes: int
    attributes: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()

    def __str__(self) -> str:
        suffix = ""
        if self.attributes:
            suffix = "+" + ",".join(self.attributes)
        if self.negative:
            suffix = "-" + ",".join(self.negative)
        base = f"{self.slices}g.{self.gigabytes}gb{suffix}"
        return base if self.compute == self.slices else f"{self.compute}c.{base}"

    @property
    def whole_instance(self) -> bool:
        """The compute instance spans its GPU instance: the only kind advertised."""
        return self.compute == self.slices

    @property
    def resource(self) -> str:
        return "nvidia.com/mig-" + str(self).replace("+", ".")

    def sort_key(self) -> tuple[int, int, int, str]:
        return self.slices, self.gigabytes, self.compute, str(self)


def parse_profile(name: str) -> MigProfile:
    """``"1g.10gb+me"`` → MigProfile(1, 1, 10, ("me",)). Raises ValueError for other text."""
    match = _NAME_RE.match(name)
    if not match:
        raise ValueError(
            f"MIG profile {name!r} is not of the form '[<c>c.]<g>g.<mem>gb[+attr|-attr]'"
        )
    compute, slices, gigabytes, sign, attribute = match.groups()
    attributes = (attribute,) if sign == "+" else ()
    negative = (attribute,) if sign == "-" else ()
    return MigProfile(int(compute or slices), int(slices), int(gigabytes), attributes, negative)


def memory_gb(total_bytes: int, mig_mb: int) -> int:
    """A MIG device's memory as its profile names it, in GB (go-nvlib getMigMemorySizeGB)."""
    share = math.ceil(mig_mb * _MIB / total_bytes * _EIGHTHS) / _EIGHTHS
    return round(share * -(-total_bytes // _GIB))


def profile_from_ids(gi_index: int, ci_index: int, mig_mb: int, total_bytes: int) -> MigProfile:
    """The profile of a MIG device from its GPU- and compute-instance profile indexes.
    Raises ValueError for an index NVIDIA's table does not know."""
    if gi_index not in GI_PROFILES:
        raise ValueError(f"unknown GPU instance profile index {gi_index}")
    if ci_index not in CI_PROFILES:
        raise ValueError(f"unknown compute instance profile index {ci_index}")
    slices, attributes, negative = GI_PROFILES[gi_index]
    return MigProfile(
        CI_PROFILES[ci_index], slices, memory_gb(total_bytes, mig_mb), attributes, negative
    )


def profile_from_slices(
    gi_slices: int, ci_slices: int, mig_mb: int, total_bytes: int
) -> MigProfile:
    """The fallback when NVML cannot name the profile IDs (old driver): no variants."""
    return MigProfile(ci_slices, gi_slices, memory_gb(total_bytes, mig_mb))
