"""devicehost benchmarks: `make bench` (or `python -m bench`) writes JSON to bench/results/.

Every figure is measured through the kubelet stand-in over real unix sockets, as the median
of several runs, beside a baseline measured in the same run: ``minimal_plugin``, the
smallest grpcio device plugin we could write — the floor for Python.
"""

import os

# grpc reads this when it is first imported: no connection chatter on kubelet restarts.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
