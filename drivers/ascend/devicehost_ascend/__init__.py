"""devicehost driver for Huawei Ascend NPUs.

Chips are found through DCMI (``libdcmi.so``), or from ``/dev/davinciN`` when DCMI is
missing; each chip family and each vNPU size is its own resource
(``huawei.com/Ascend910``, ``huawei.com/Ascend910-4c``, ...). Modules, one job each:

- ``dcmi``: the narrow DCMI interface; ``dcmi_ctypes`` binds the real library,
  ``dcmi_sim`` simulates it (and builds the fake /dev and sysfs tree for the demo).
- ``config``: the ``drivers.ascend`` section, parsed strictly.
- ``inventory`` / ``devfs``: the node's devices, through DCMI / from /dev.
- ``health``: chip health from DCMI and the fault-event fan-out.
- ``topology``: HCCS-aware preferred allocation.
- ``allocation``: the AllocateResponse in each mode, and the CDI spec.
- ``node``: one configured node; ``driver``: the devicehost hooks.
"""

from devicehost_ascend.driver import AscendDriver

__all__ = ["AscendDriver"]
