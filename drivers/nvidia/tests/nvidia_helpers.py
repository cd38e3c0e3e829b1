"""Shared names for the NVIDIA driver tests (a module, not conftest, so imports are exact)."""

from collections.abc import Callable

from devicehost_nvidia import NvidiaDriver

#: The ``make_driver`` fixture: ``make_driver(config=None, node=None, lay_out=True)``.
MakeDriver = Callable[..., NvidiaDriver]
