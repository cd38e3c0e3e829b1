"""What each Xid asks of the GPU before it can take work again, as data.

Transcribed from NVIDIA's Xid catalog for Ampere and newer GPUs ("Analyzing Xid Errors
with the Xid Catalog", docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html),
column "Resolution Bucket (Immediate Action)". Only Xids whose resolution is a GPU reset
or a node reboot are listed; every other Xid (RESTART_APP, IGNORE, CONTACT_SUPPORT, …)
is *transient* here: the GPU is Unhealthy for the quiet period and comes back when NVML
calls it sound. The README explains the choice Xid by Xid.
"""

from __future__ import annotations

import enum


class Resolution(enum.Enum):
    """What clears an Xid's mark."""

    TRANSIENT = "quiet period"  # RESTART_APP and the like: the GPU itself is fine
    GPU_RESET = "GPU reset"
    NODE_REBOOT = "node reboot"


#: Xid → resolution, for the Xids the catalog resolves by a reset or a reboot.
RESOLUTIONS: dict[int, Resolution] = {
    46: Resolution.GPU_RESET,  # GPU stopped processing: RESET_GPU
    48: Resolution.GPU_RESET,  # double-bit ECC: WORKFLOW_XID_48, "GPU reset or node reboot"
    62: Resolution.GPU_RESET,  # internal micro-controller halt: RESET_GPU
    64: Resolution.GPU_RESET,  # row remapping failure: RESET_GPU
    74: Resolution.GPU_RESET,  # NVLink error: WORKFLOW_NVLINK_ERR, "GPU reset or node reboot"
    79: Resolution.NODE_REBOOT,  # fallen off the bus: RESTART_BM
    95: Resolution.GPU_RESET,  # uncontained memory error: RESET_GPU
    109: Resolution.GPU_RESET,  # context switch timeout: RESET_GPU (ignored by default)
    110: Resolution.GPU_RESET,  # security fault: RESET_GPU
    119: Resolution.GPU_RESET,  # GSP RPC timeout: RESET_GPU
    120: Resolution.GPU_RESET,  # GSP error: RESET_GPU
    136: Resolution.GPU_RESET,  # link training failed: RESET_GPU
    140: Resolution.GPU_RESET,  # ECC unrecovered error: RESET_GPU
    143: Resolution.GPU_RESET,  # GPU initialization error: RESET_GPU
    155: Resolution.GPU_RESET,  # NVLink SW defined error: RESET_GPU
    156: Resolution.GPU_RESET,  # resource retirement event: RESET_GPU
    158: Resolution.GPU_RESET,  # GPU fatal timeout: RESET_GPU
}
#: A double-bit ECC error event (not an Xid event) is resolved as Xid 48 is.
DOUBLE_BIT_ECC_RESOLUTION = Resolution.GPU_RESET


def resolution(xid: int) -> Resolution:
    return RESOLUTIONS.get(xid, Resolution.TRANSIENT)
