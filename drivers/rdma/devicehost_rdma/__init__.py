"""devicehost driver for RDMA NICs: HCAs from sysfs, shared and exclusive pools, health
from port state. The entry point is ``devicehost_rdma.driver:RdmaDriver``; fake trees for
tests and the demo are built with ``devicehost_rdma.simulated``."""
