"""devicehost driver for NVIDIA GPUs: NVML enumeration, health that recovers, MIG,
time-slicing and NVLink-aware allocation. The simulated NVML ships here too."""

from devicehost_nvidia.driver import NvidiaDriver
from devicehost_nvidia.simulated import SimGpu, SimNode, SimulatedNvml, default_node, sim_gpu

__all__ = ["NvidiaDriver", "SimGpu", "SimNode", "SimulatedNvml", "default_node", "sim_gpu"]
