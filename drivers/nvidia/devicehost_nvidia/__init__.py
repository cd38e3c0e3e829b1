"""devicehost driver for NVIDIA GPUs: NVML enumeration, health that recovers, MIG,
time-slicing and NVLink-aware allocation. The simulated NVML ships here too, imported
only when asked for (a node that is not simulated never loads it)."""

from typing import TYPE_CHECKING, Any

from devicehost_nvidia.driver import SIMULATED_MODULE, NvidiaDriver

if TYPE_CHECKING:
    from devicehost_nvidia.simulated import (
        SimGpu,
        SimNode,
        SimulatedNvml,
        default_node,
        sim_gpu,
    )

_SIMULATED = ("SimGpu", "SimNode", "SimulatedNvml", "default_node", "sim_gpu")


def __getattr__(name: str) -> Any:
    if name not in _SIMULATED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(SIMULATED_MODULE), name)


__all__ = ["NvidiaDriver", "SimGpu", "SimNode", "SimulatedNvml", "default_node", "sim_gpu"]
